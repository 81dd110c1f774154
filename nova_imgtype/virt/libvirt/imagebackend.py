"""Nova's image ``Backend`` factory, made per-instance.

Stock :class:`nova.virt.libvirt.imagebackend.Backend` builds every disk with
the host-wide ``[libvirt]images_type``. This subclass finds backend classes in
the ``nova_imgtype.image_backends`` namespace and asks the instance's
record (the resolver's ``decision_for``, which the driver hands it) which
backend an instance's disks are on: it decides nothing itself.

Stock driver code sometimes asks ``backend()`` with no instance at hand (for
example ``SUPPORTS_CLONE`` before removing a resize snapshot, or
``is_shared_block_storage()`` in live-migration checks). The driver wraps
such calls in :meth:`Backend.scope`, which names the instance for the current
thread only (a ContextVar: every native thread, as Nova 34's services run,
and every eventlet greenthread has its own context).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

from nova import objects
from nova.virt.libvirt import imagebackend
from oslo_config import cfg

from nova_imgtype import compat
from nova_imgtype import exception
from nova_imgtype import record as record_mod
from nova_imgtype.stock import backend_scope
from nova_imgtype.virt.libvirt import backends
from nova_imgtype.virt.libvirt import config_drive
from nova_imgtype.virt.libvirt import file_formats
from nova_imgtype.virt.libvirt import flat
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import pools as pools_mod
from nova_imgtype.virt.libvirt import storage
from nova_imgtype.virt.libvirt import storage_rbd

# Disks whose type stock Nova chooses by itself, whatever the instance's
# backend: kernel and ramdisk are raw, config drives follow
# _get_disk_config_image_type() (rbd on rbd hosts, raw elsewhere).
_STOCK_TYPED_DISKS = ('kernel', 'ramdisk', 'disk.config')
# Of those, on a pool instance: raw volumes of its pool. A kernel and a
# ramdisk must be local files for <kernel>/<initrd>: volumes of a dir pool
# only (elsewhere they stay stock files in the instance directory).
_CONFIG_DISK = 'disk.config'

_STOCK = 'nova.virt.libvirt.imagebackend:Backend.'

#: What the instance's record says its disks are (the resolver's
#: ``decision_for``).
DecisionFor = Callable[[objects.Instance], record_mod.BackendDecision]


class Backend(imagebackend.Backend):
    """Image backend factory resolving each instance's own backend."""

    def __init__(self, use_cow: bool, decision_for: DecisionFor,
                 conf: cfg.ConfigOpts,
                 pools: pools_mod.StoragePools | None = None) -> None:
        super().__init__(use_cow)
        self._decision_for = decision_for
        self._conf = conf
        self.pools = pools

    @contextlib.contextmanager
    def scope(self, instance: objects.Instance) -> Iterator[None]:
        """Make ``backend()`` without a type mean this instance's backend
        (:mod:`nova_imgtype.stock.backend_scope`)."""
        with backend_scope.scoped(instance):
            yield

    def backend(self, *args: Any, **kwargs: Any) -> Any:
        image_type: str | None = compat.called(
            _STOCK + 'backend', self, args, kwargs)['image_type']
        if not image_type:
            scoped = backend_scope.current()
            if scoped is not None:
                return self.class_for(self._decision_for(scoped))
            image_type = self._conf.libvirt.images_type
        return backends.get_class(
            backends.resolve_name(image_type, self._conf.use_cow_images))

    def class_for(self, decision: record_mod.BackendDecision) -> Any:
        """The image backend class of an instance's root disk."""
        if decision.storage == record_mod.POOLS:
            return self._storage_class(decision.pool)
        return backends.get_class(backends.resolve_name(
            decision.backend, self._conf.use_cow_images))

    def _storage_class(self, pool: str) -> type[storage.LibvirtStorage]:
        """The storage class of the volumes of ``pool``: shared rbd ones
        are :class:`~.storage_rbd.RbdStorage`. A pool this host does not
        have holds nothing here (not shared), but for storage of a Ceph
        cluster that this host does not reach (the resolver names it by
        its location): that is shared, and never taken for disks of this
        host to delete."""
        if self.pools is None:
            return storage.LibvirtStorage
        try:
            kind = self.pools.definition(self.pools.get(pool)).type
        except (exception.PoolNotFound, exception.PoolInactive):
            # Not here (a libvirt that does not answer raises: nothing is
            # known of the pool, least of all that it is not shared).
            return (storage_rbd.RbdStorage
                    if pool_specs.is_shared_location(pool)
                    else storage.LibvirtStorage)
        return storage_rbd.RbdStorage if kind == 'rbd' else (
            storage.LibvirtStorage)

    def _follows_instance(self, name: str, image_type: str | None) -> bool:
        """Whether stock means "the instance's backend" for this disk."""
        if image_type and os.path.basename(name).startswith(
                _STOCK_TYPED_DISKS):
            return False
        # Stock passes nothing, images_type, or the import-time default of
        # a keyword argument ('default') when it means "the instance's
        # backend"; anything else is an explicit choice kept as it is.
        return image_type in (None, '', backends.DEFAULT,
                              self._conf.libvirt.images_type)

    def by_name(self, *args: Any, **kwargs: Any) -> Any:
        call = compat.called(_STOCK + 'by_name', self, args, kwargs)
        instance: objects.Instance = call['instance']
        name: str = call['name']
        image_type: str | None = call['image_type']
        disk_info_mapping = call['disk_info_mapping']
        decision = self._decision_for(instance)
        if self._follows_instance(name, image_type):
            if decision.storage == record_mod.POOLS:
                return self._volume(instance, name, disk_info_mapping,
                                    decision)
            image_type = decision.backend
        elif decision.storage == record_mod.POOLS:
            if self._raw_volume_on_pool(name, decision.pool):
                return self._volume(instance, name, disk_info_mapping,
                                    decision)
        elif self._local_config_drive(name, image_type, decision):
            return flat.recording(config_drive.LocalConfigDrive, 'raw')(
                instance=instance, disk_name=name,
                disk_info_mapping=disk_info_mapping)
        return self._file(self.backend(image_type), decision, name,
                          instance=instance, disk_name=name,
                          disk_info_mapping=disk_info_mapping)

    @staticmethod
    def _file(cls: Any, decision: record_mod.BackendDecision, name: str,
              **kwargs: Any) -> Any:
        """Disk ``name`` as an object of the backend class ``cls``, in the
        format the record names for it (:func:`.file_formats.named`): a
        disk of another format than a qcow2 backend's (an adopted raw
        ephemeral disk) is a :class:`~.flat.Flat` file of that format, as
        stock's Qcow2 gives QEMU every disk as qcow2."""
        fmt = file_formats.named(decision, name)
        if fmt and isinstance(cls, type) and issubclass(cls, flat.Flat):
            return flat.recording(cls, fmt)(**kwargs)
        if fmt and fmt != 'qcow2' and isinstance(cls, type) and issubclass(
                cls, imagebackend.Qcow2):
            return flat.recording(flat.Flat, fmt)(**kwargs)
        return cls(**kwargs)

    def _volume(self, instance: objects.Instance, name: str,
                disk_info_mapping: Any,
                decision: record_mod.BackendDecision
                ) -> storage.LibvirtStorage:
        """Disk ``name`` of a pool instance: a volume of its pool, in the
        format its record gives that disk."""
        return self._storage_class(decision.pool)(
            instance=instance, disk_name=name,
            disk_info_mapping=disk_info_mapping, pools=self.pools,
            volume_format=decision.volume_format(os.path.basename(name)),
            pool_name=decision.pool)

    def _raw_volume_on_pool(self, name: str, pool: str) -> bool:
        """Whether a stock-typed disk of a pool instance is a volume."""
        base = os.path.basename(name)
        if base.startswith(_CONFIG_DISK):
            return True
        if base.startswith(('kernel', 'ramdisk')) and self.pools is not None:
            return pool_specs.pool_type(self.pools.get(pool)) == 'dir'
        return False

    @staticmethod
    def _local_config_drive(name: str, image_type: str | None,
                            decision: record_mod.BackendDecision) -> bool:
        """Whether a disk of an instance that is not on pools is its
        config drive as a raw file: wherever stock makes it a file, and on
        an rbd host when the record says so (stock's choice, in Ceph, for
        an rbd instance and one recorded before the record said)."""
        if not os.path.basename(name).startswith(_CONFIG_DISK):
            return False
        return (image_type != 'rbd' or
                decision.config_drive == record_mod.LOCAL)

    def by_libvirt_path(self, *args: Any, **kwargs: Any) -> Any:
        call = compat.called(_STOCK + 'by_libvirt_path', self, args, kwargs)
        instance: objects.Instance = call['instance']
        path: str = call['path']
        image_type: str | None = call['image_type']
        decision = self._decision_for(instance)
        if not image_type:
            image_type = decision.backend
        return self._file(self.backend(image_type), decision, path,
                          instance=instance, path=path)
