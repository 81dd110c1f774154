"""What nova-imgtype records with an instance: its system metadata keys.

Written by the compute driver (:mod:`nova_imgtype.virt.libvirt.resolver`
decides and records), read there and by the scheduler's request filters,
which import nothing of the compute side (no libvirt on scheduler nodes).
"""

#: The instance's backend name.
BACKEND = 'imgtype_backend'
#: The disk formats the instance uses without conversion (comma separated;
#: empty when its images are converted).
NATIVE = 'imgtype_native_formats'
#: 'pools' when the instance's disks are libvirt storage volumes
#: (LibvirtStorage), 'legacy' for stock image files.
STORAGE = 'imgtype_storage'
#: The storage pool holding a pool instance's disks, recorded so that a
#: later change of images_type never re-points them.
POOL = 'imgtype_pool'
#: Where the disks of an instance being live-migrated are made on the
#: destination, written by the destination before the migration, read by
#: the source to write the guest XML it sends there, and dropped by the
#: destination when the migration ends.
ARRIVAL = 'imgtype_live_migration_arrival'
