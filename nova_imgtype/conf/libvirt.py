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

ALL_OPTS = [images_type_mapping_opt]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(libvirt_group)
    conf.register_opts(ALL_OPTS, group=libvirt_group)


def list_opts() -> dict[cfg.OptGroup, list[cfg.Opt]]:
    return {libvirt_group: ALL_OPTS}
