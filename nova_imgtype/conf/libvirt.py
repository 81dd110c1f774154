"""Options nova-imgtype adds to Nova's ``[libvirt]`` group."""

from nova.conf import libvirt as nova_libvirt
from oslo_config import cfg

from nova_imgtype.virt.libvirt import mapping

libvirt_group = nova_libvirt.libvirt_group

images_type_mapping_opt = cfg.Opt(
    'images_type_mapping',
    type=mapping.ImagesTypeMappingType(),
    default='',
    help="""
Image backends that use images of a given format in their own format.

A comma separated list of ``<source disk_format>:<backend>`` entries. An
instance booted from an image whose disk_format is listed gets that backend
and its image is used without conversion (``force_raw_images`` does not apply
to it). An image whose format is not listed is converted to
``[libvirt]images_type`` exactly as without this option.

The backend an instance gets is recorded with the instance (system metadata
``imgtype_backend``) and used for its whole life: changing this option or
``images_type`` later changes only new instances.

The value is checked when it is read and again when nova-compute starts;
nova-compute refuses to start with an invalid value and logs the offending
entry.

Possible values:

* Empty (the default): no mapping; every image goes to ``images_type``.
* Entries whose source is a Glance disk_format (ami, ari, aki, vhd, vhdx,
  vmdk, raw, qcow2, vdi, iso, ploop) and whose backend is registered in the
  ``nova_imgtype.image_backends`` namespace (stock: raw, flat, qcow2, lvm,
  rbd, ploop) and uses that format natively: ``raw`` on raw, flat, lvm or
  rbd; ``qcow2`` on qcow2; ``ploop`` on ploop. Each source at most once.
  Examples: ``raw:lvm, qcow2:qcow2``; ``raw:rbd``; ``ploop:ploop``.

Related options:

* ``[libvirt]images_type``: the backend of unmapped formats.
* ``[libvirt]images_volume_group``: needed by an ``lvm`` entry.
* ``[libvirt]images_rbd_pool``: needed by an ``rbd`` entry.
* ``[libvirt]virt_type``: must be ``parallels`` for a ``ploop`` entry.
* ``force_raw_images``: applies to unmapped formats only.
""")

use_storage_pools_opt = cfg.BoolOpt(
    'use_storage_pools',
    default=True,
    help="""
Put the disks of new instances on libvirt storage pools (``LibvirtStorage``).

When enabled, nova-compute creates at start (or finds, when they exist) the
storage pools it needs, started and set to autostart:

* ``nova-base-images-pool``: a directory pool over the image cache
  (``<instances_path>/_base``); its layout does not change.
* ``nova-disks-pool``: the pool of ``images_type``'s backend: a directory
  pool at ``<instances_path>/disks`` for ``raw``, ``flat`` and ``qcow2``; a
  logical pool on ``images_volume_group`` for ``lvm``; an rbd pool on
  ``images_rbd_pool`` (the monitors the cluster of ``images_rbd_ceph_conf``
  lists, cephx user ``rbd_user`` with the libvirt secret
  ``rbd_secret_uuid``) for ``rbd``.
* ``nova-disks-pool-dir``, ``nova-disks-pool-logical``,
  ``nova-disks-pool-rbd``: the pool of another type that
  ``images_type_mapping`` needs on the same host.

A pool that exists with another definition stops nova-compute with an error
naming it; it is never redefined. New instances get their disks as volumes
``{instance-uuid}_{name}``: copy-on-write qcow2 overlays on the cached
template for ``qcow2``, libvirt copies (``createXMLFrom``) for ``raw`` and
``flat`` and into logical pools, and for rbd the template uploaded once to
the Ceph pool and cloned there. The storage and the pool are recorded with
each instance (system metadata ``imgtype_storage``, ``imgtype_pool``) and
kept for its life, whatever this option or ``images_type`` say later.

Existing (legacy) instances keep working; their disks move into the pools
on their next hard reboot, resize, cold migration, live block migration or
unshelve, and nova-compute logs at start how many remain. Instances on dir
pools live-migrate (block migration: the destination makes their disks in
its own pool, or as files when it has none, and libvirt copies the data),
those on rbd pools without copying (shared); those on logical pools do not
(refused with a clear error). Their snapshots are cold.

Possible values:

* True (default): new instances of the raw, flat, qcow2, lvm and rbd
  backends on libvirt storage pools.
* False: stock image backends for new instances; instances already on
  pools stay there, and an instance on pools that moves here (resize, cold
  or live migration) gets its disks as files of its backend.

Related options:

* ``[libvirt]images_type`` and ``[libvirt]images_type_mapping`` choose the
  backend, and so the pool type and the volume format.
* ``[libvirt]images_volume_group``, ``[libvirt]images_rbd_pool``,
  ``[libvirt]images_rbd_ceph_conf``, ``[libvirt]rbd_user``,
  ``[libvirt]rbd_secret_uuid``: where the logical and rbd pools are.
* ``use_cow_images``: as in stock Nova, ``images_type = default`` means
  qcow2 with it and flat without.
* ``preallocate_images``: ``space`` makes file volumes fully allocated.
""")

ALL_OPTS = [images_type_mapping_opt, use_storage_pools_opt]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(libvirt_group)
    conf.register_opts(ALL_OPTS, group=libvirt_group)


def list_opts() -> dict[cfg.OptGroup, list[cfg.Opt]]:
    return {libvirt_group: ALL_OPTS}
