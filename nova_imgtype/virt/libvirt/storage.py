"""``LibvirtStorage``: instance disks as libvirt storage volumes.

An image backend (a Nova :class:`~nova.virt.libvirt.imagebackend.Image`)
whose disks are volumes ``{instance-uuid}_{name}`` of ``nova-disks-pool``
and whose templates are the files of ``nova-base-images-pool`` (the image
cache directory, unchanged). The instance's recorded backend decides the
volume format: ``qcow2`` volumes are copy-on-write overlays with a
``<backingStore>`` on the template; ``raw``/``flat`` volumes are
``createXMLFrom`` copies, converted by libvirt. Guests see
``<disk type='volume'>``.

This class serves dir and logical pools; rbd pools, whose volumes are
shared by every host of the Ceph cluster, are
:class:`~.storage_rbd.RbdStorage`'s.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from nova import exception as nova_exception
from nova.i18n import _
from nova.virt import images
from nova.virt.image import model as imgmodel
from nova.virt.libvirt import imagebackend
from oslo_config import cfg
from oslo_log import log as logging
from oslo_utils import strutils

from nova_imgtype import record
from nova_imgtype.stock import volume_disk
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import pools as pools_mod
from nova_imgtype.virt.libvirt import sizes
from nova_imgtype.virt.libvirt.template_handlers import volume_linking

LOG = logging.getLogger(__name__)
CONF = cfg.CONF

#: Volume format of each file backend when it is implemented by pools.
VOLUME_FORMATS = record.VOLUME_FORMATS


class LibvirtStorage(sizes.InProcessSizes, imagebackend.Image):
    """A disk on a libvirt storage volume.

    :param pools: the host's :class:`~.pools.StoragePools`.
    :param volume_format: ``qcow2`` (copy-on-write overlays) or ``raw``.
    """

    #: Formats used without conversion when this backend is mapped.
    native_disk_formats = ('raw', 'qcow2')
    #: A template is a read-only ``<backingStore>`` or copied by libvirt
    #: (``createXMLFrom``, an upload): never a volume's alias.
    accepts_linked_templates = True

    @classmethod
    def host_support_error(cls, conf: cfg.ConfigOpts) -> str | None:
        """Pools exist only where ``[libvirt]use_storage_pools`` is on."""
        if not conf.libvirt.use_storage_pools:
            return '[libvirt]use_storage_pools is off'
        return None

    def __init__(self, instance: Any = None, disk_name: str | None = None,
                 path: str | None = None, disk_info_mapping: Any = None, *,
                 pools: pools_mod.StoragePools | None = None,
                 volume_format: str = 'qcow2',
                 pool_name: str = pool_specs.DISKS_POOL) -> None:
        if pools is None:
            raise nova_exception.InternalError(
                _('LibvirtStorage needs the host storage pools'))
        self.pools = pools
        self.volume_format = volume_format
        self.pool_name = pool_name or pool_specs.DISKS_POOL
        if path is not None:
            self.volume_name = os.path.basename(path)
        else:
            # Stock asks for a disk by name or, like its file backends
            # allow, by its path in the instance directory.
            self.volume_name = pool_specs.volume_name(
                instance.uuid, os.path.basename(str(disk_name)))
        # Looked up once: an Image is made for an operation, as stock's
        # are; a pool's type and target do not change (read once per pool).
        self._pool = pools.get(self.pool_name)
        defined = pools.definition(self._pool)
        self.pool_type = defined.type
        super().__init__(defined.volume_path(self.volume_name),
                         'volume', volume_format,
                         disk_info_mapping=disk_info_mapping)
        # As stock's file backends: [DEFAULT]preallocate_images = space.
        self.preallocate = (
            strutils.to_slug(CONF.preallocate_images) == 'space')
        # The capacity this object made the volume with, if it made it.
        self._made_capacity: int | None = None

    # -- the Image contract -------------------------------------------------

    def _volume(self) -> Any:
        return self.pools.find_volume(self._pool, self.volume_name)

    def exists(self) -> bool:
        return self._volume() is not None

    def _get_driver_format(self) -> str:
        return self.volume_format

    def create_image(self, prepare_template: Any, base: str, size: Any,
                     safe: bool = False, *args: Any, **kwargs: Any) -> None:
        """Make the volume from the template ``base`` in the cache pool."""
        if not os.path.exists(base):
            prepare_template(*args, target=base, **kwargs)
        # The template's format as Nova's inspector found it when it passed
        # the safety check; never libvirt's reading of it.
        base_format: str | None = None
        if os.path.islink(base):
            # Linked to an image volume its owner can rewrite: checked
            # again, in the format recorded when it was accepted.
            base_format = volume_linking.checked(base)[0]
        elif not CONF.workarounds.disable_deep_image_inspection and not safe:
            base_format = sizes.template_format(sizes.checked_template(base))
        else:
            imagebackend._update_utime_ignore_eacces(base)
        self.verify_base_size(base, size)
        if self.exists():
            return
        cache = self.pools.get(pool_specs.BASE_POOL)
        name = os.path.basename(base)
        template = self.pools.find_volume(cache, name)
        if template is None:
            # The cache gained a file libvirt has not seen yet (a refresh
            # reads every template's header: only then).
            pool_specs.refresh(cache)
            template = cache.storageVolLookupByName(name)
        if base_format is None:
            # Deep inspection off (or a template made here, ``safe``): as
            # stock, the format found in the file.
            base_format = pool_specs.volume_format(template)
        capacity = max(size or 0, template.info()[1])
        self._make_volume(template, base, base_format, capacity)

    def _make_volume(self, template: Any, base: str, base_format: str,
                     capacity: int) -> None:
        """Make this disk's volume from the cached ``template`` (the
        volume of ``base`` in the image cache pool)."""
        disks = self._pool
        kind = self.pool_type
        if kind == 'dir' and self.volume_format == 'qcow2':
            self.pools.create_cow(disks, self.volume_name, base,
                                  base_format, capacity)
        else:
            # A logical volume is allocated whole: a thin one (allocation
            # below capacity) would be an LVM snapshot.
            self.pools.copy(disks, self.volume_name, template, base_format,
                            self.volume_format if kind == 'dir' else '',
                            capacity,
                            preallocate=self.preallocate or kind == 'logical')
        self._made_capacity = capacity

    def import_file(self, instance: Any, local_file: str,
                    remote_name: str) -> None:
        """Import a local file (a config drive) as this volume.

        The local copy is removed once imported: the volume is the disk.
        """
        self.pools.import_file(self._pool, self.volume_name, local_file)
        self._remove_imported(local_file)

    @staticmethod
    def _remove_imported(local_file: str) -> None:
        """Remove the local copy of an imported file, unless stock does:
        on a host whose ``images_type`` is rbd its config drive step
        removes it after any import."""
        if CONF.libvirt.images_type != 'rbd':
            os.unlink(local_file)

    def resize_image(self, size: int) -> None:
        """Grow the volume to ``size``; nothing to ask libvirt when this
        object has just made it that large (as ``create_image`` does, from
        the size stock then asks for)."""
        if self._made_capacity is not None and self._made_capacity >= size:
            return
        vol = self._volume()
        if vol is None:
            return
        if self.pool_type == 'dir' and self.volume_format == 'raw':
            # libvirt (and qemu-img without -f) would resize the file in the
            # format it probes in it, a header the guest wrote: a raw
            # file's size is its length, grown sparse.
            path = vol.path()
            if os.path.getsize(path) < size:
                os.truncate(path, size)
            return
        if vol.info()[1] < size:
            vol.resize(size, 0)

    def snapshot_extract(self, target: str, out_format: str) -> None:
        """Copy the disk into ``target``, read in its recorded format.

        A volume of a dir pool is a file that libvirt would read in the
        format it probes in it (a raw volume's bytes are the guest's): it
        is converted as stock's ``Flat`` converts its disk, by
        ``qemu-img convert`` naming the volume's recorded format. Other
        volumes (raw by nature) go through a temporary dir pool, removed on
        success and on failure; the file written stays for the caller to
        upload.
        """
        if self.pool_type == 'dir':
            images.convert_image(self._volume().path(), target,
                                 self.volume_format, out_format)
            return
        spec = pool_specs.PoolSpec('nova-snapshot-%s' % uuid.uuid4().hex,
                                   'dir', os.path.dirname(target))
        pool = self.pools.ensure(spec, autostart=False)
        try:
            vol = self._volume()
            self.pools.copy(pool, os.path.basename(target), vol,
                            self.volume_format, out_format, vol.info()[1])
        finally:
            pool.destroy()
            pool.undefine()

    def get_model(self, connection: Any) -> Any:
        if self.pool_type == 'logical':
            return imgmodel.LocalBlockImage(self.path)
        fmt = (imgmodel.FORMAT_QCOW2 if self.volume_format == 'qcow2'
               else imgmodel.FORMAT_RAW)
        return imgmodel.LocalFileImage(self.path, fmt)

    def libvirt_info(self, cache_mode: str, extra_specs: Any,
                     boot_order: Any = None, disk_unit: Any = None) -> Any:
        stock = super().libvirt_info(cache_mode, extra_specs,
                                     boot_order=boot_order,
                                     disk_unit=disk_unit)
        return volume_disk.from_stock(stock, self.pool_name,
                                      self.volume_name)

    @staticmethod
    def is_file_in_instance_path() -> bool:
        return False
