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
    default=False,
    help="""
Put the disks of new instances on libvirt storage pools (``LibvirtStorage``).

When enabled, nova-compute creates (or finds) the storage pools
``nova-base-images-pool``, a directory pool over the image cache that does
not change its layout, and ``nova-disks-pool``, a directory pool at
``<instances_path>/disks``, and new instances of the ``raw``, ``flat`` and
``qcow2`` backends get their disks as volumes ``{instance-uuid}_{name}`` of
``nova-disks-pool``: copy-on-write qcow2 overlays on the cached template for
``qcow2``, libvirt copies (``createXMLFrom``) for ``raw``/``flat``. The
choice is recorded with each instance (system metadata ``imgtype_storage``)
and kept for its life; existing instances are not moved.

Not yet supported for instances on pools (refused with a clear error):
cold and live migration and resize; snapshots are cold. lvm and rbd backends
keep their legacy storage. Legacy instances move into the pool on their next
hard reboot.

Possible values:

* False (default): stock image backends.
* True: file backends on libvirt storage pools for new instances.

Related options:

* ``[libvirt]images_type`` and ``[libvirt]images_type_mapping`` choose the
  backend, and so the volume format.
* ``use_cow_images``: as in stock Nova, ``images_type = default`` means
  qcow2 with it and flat without.
""")

ALL_OPTS = [images_type_mapping_opt, use_storage_pools_opt]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(libvirt_group)
    conf.register_opts(ALL_OPTS, group=libvirt_group)


def list_opts() -> dict[cfg.OptGroup, list[cfg.Opt]]:
    return {libvirt_group: ALL_OPTS}
