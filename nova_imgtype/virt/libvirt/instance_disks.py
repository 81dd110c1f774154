"""An instance's disks on this host's storage pools.

:class:`InstanceDisks` knows where a pool instance's disks are on this
host and does what stock's driver cannot do for them: it finds the
instance's pool (by the storage the record names, whatever the pool is
called here), deletes its volumes, moves a legacy instance's files into
its pool (crash-safe: recorded first, finished at the next start), records
the storage of pools recorded by name only, points the guest at the
kernel and ramdisk volumes, and tells the image cache manager which
templates the volumes of this host's dir pool still need.

It decides nothing: the instance's record (through the
:class:`~nova_imgtype.virt.libvirt.resolver.BackendResolver`) says where
the disks are; the storage layer (:class:`~.pools.StoragePools`,
:mod:`.pool_dir`) does the work. The driver asks it, around stock's steps.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from nova import objects
from nova.storage import rbd_utils
from nova.virt.libvirt import utils as libvirt_utils
from oslo_config import cfg
from oslo_log import log as logging
from oslo_utils import excutils

from nova_imgtype import exception
from nova_imgtype import record as record_mod
from nova_imgtype.virt.libvirt import pool_dir
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import pools as pools_mod
from nova_imgtype.virt.libvirt import resolver as resolver_mod

LOG = logging.getLogger(__name__)


class InstanceDisks:
    """The disks of instances on this host's storage pools.

    :param resolver: the instances' records.
    :param pools: this host's pools (``pools`` may be replaced: a test's
        own libvirt).
    :param image_backend: the driver's per-instance backend factory (a
        kernel's volume is the disk it makes).
    :param conf: the configuration nova-compute runs with.
    """

    def __init__(self, resolver: resolver_mod.BackendResolver,
                 pools: pools_mod.StoragePools, image_backend: Any,
                 conf: cfg.ConfigOpts) -> None:
        self._resolver = resolver
        self.pools = pools
        self._image_backend = image_backend
        self._conf = conf

    def pool_backing_paths(self) -> set[str]:
        """Templates in use by the volumes of this host's dir disks pool,
        found by its place (``<instances_path>/disks``), whatever its name
        and whatever the configuration says today: the overlays made
        under an earlier mapping or ``use_storage_pools`` still need
        theirs (none when there is no volume there).

        Any other state (a pool not started, volumes with no pool over
        them, libvirt unreachable) raises, so the image cache manager
        removes nothing it cannot check.
        """
        directory = pool_specs.dir_disks_location(self._conf)
        if not pool_dir.volume_files(directory):
            # No volume there (a dir pool's volumes are its files): none
            # uses a template, and libvirt need not be asked.
            return set()
        pool = self.pools.dir_pool_at(directory)
        if pool is None:
            raise exception.StorageUnavailable(
                pool=directory,
                reason='it holds instance volumes but no storage pool is '
                       'defined over it: their templates cannot be read')
        if not pool.isActive():
            raise exception.PoolInactive(pool=pool.name())
        return self.pools.backing_paths(pool)

    def instance_pool(self, instance: objects.Instance) -> Any:
        """The started disks pool of a pool instance."""
        return self.pools.get(self._resolver.decision_for(instance).pool)

    def delete_pool_volumes(self, instance: objects.Instance,
                             suffix: str = '') -> None:
        """Delete the instance's volumes (ending with ``suffix``)."""
        name = self._resolver.decision_for(instance).pool
        try:
            pool = self.pools.get(name)
        except exception.PoolNotFound:
            LOG.warning('Storage pool %s is gone: no volume of the instance '
                        'to delete', name, instance=instance)
            return
        self.pools.delete_instance_volumes(pool, instance.uuid, suffix)

    def can_move_to_pools(self, instance: objects.Instance) -> bool:
        """Whether the instance's files belong in this host's pools: it is
        legacy, not on its way back to stock's driver, and this host makes
        new disks of its backend in a pool (:meth:`.Resolver.storage_for`,
        the one rule)."""
        decision = self._resolver.decision_for(instance)
        return (decision.storage == resolver_mod.LEGACY and
                not record_mod.going_back(instance.system_metadata,
                                         self._conf.host) and
                self._resolver.storage_for(decision.backend) ==
                resolver_mod.POOLS)

    def move_to_pools(self, instance: objects.Instance) -> None:
        """Move a stopped legacy instance's disks into its pool.

        Files are renamed within one filesystem (instances_path), so the
        data stay as they are, overlays keep their absolute backing paths,
        and it costs nothing whatever the size; a failure puts back what was
        moved. lvm and rbd disks need no move: they have the pool's naming
        already, and the pool, once refreshed, lists them.
        """
        decision = self._resolver.decision_for(instance)
        pool_name = self._resolver.pool_for(decision.backend)
        pool = self.pools.get(pool_name)
        if pool_specs.pool_type(pool) != 'dir':
            pool_specs.refresh(pool)
            self._resolver.record(instance, self._resolver.with_storage(
                decision, resolver_mod.POOLS))
            instance.save()
            LOG.info('Disks now used through storage pool %s', pool_name,
                     instance=instance)
            return
        instance_dir = libvirt_utils.get_instance_path(instance)
        names = pool_dir.legacy_files(instance_dir)
        if not names:
            return
        # Each file in the format stock recorded for it, never one probed
        # from its bytes (the guest's).
        formats = pool_dir.legacy_formats(instance_dir, names)
        if formats is None:
            LOG.warning('Disks %s stay files: their formats are not all '
                        'recorded', ', '.join(names), instance=instance)
            return
        moved = self._resolver.adopted(decision, formats)
        # Recorded before any file moves: after a crash the record says
        # "pools" and the next start finishes the move
        # (_finish_interrupted_moves); a failure puts both back.
        self._resolver.record(instance, moved)
        instance.save()
        try:
            pool_dir.adopt(pool, instance, instance_dir, names)
        except Exception:
            with excutils.save_and_reraise_exception():
                self._resolver.record(instance, decision)
                instance.save()
        LOG.info('Moved disks %s into storage pool %s', ', '.join(names),
                 pool_name, instance=instance)

    def record_pool_locations(
            self, instances: list[objects.Instance]) -> None:
        """Record the storage (type and place) of the pool of each pool
        instance of this host recorded by an earlier release, by the pool's
        name only: this host's pool of that name, when it holds the
        instance's root disk volume (the evidence that the name means this
        pool here). Every later host finds its own pool of that storage by
        it, whatever the pool's name there. An instance whose pool or root
        volume is not found here is left as it is, said in the log: its
        name is not reinterpreted.
        """
        for inst in instances:
            decision = self._resolver.recorded(inst)
            if (decision is None or decision.storage != resolver_mod.POOLS
                    or decision.pool_location):
                continue
            root = pool_specs.volume_name(inst.uuid, 'disk')
            try:
                pool = self.pools.find_pool(decision.pool)
                found = (pool is not None and pool.isActive() and
                         self.pools.find_volume(pool, root) is not None)
                location = (pool_specs.location_key(
                    self.pools.definition(pool))
                    if found and pool is not None else '')
            except Exception as e:  # noqa: BLE001 - reported, start goes on
                LOG.warning('Storage of pool %(pool)s not recorded: %(e)s',
                            {'pool': decision.pool, 'e': e}, instance=inst)
                continue
            if not location:
                LOG.warning('Storage of pool %(pool)s not recorded: this '
                            'host has no started pool of that name holding '
                            'volume %(vol)s', {'pool': decision.pool,
                                               'vol': root}, instance=inst)
                continue
            self._resolver.record(inst, dataclasses.replace(
                decision, pool_location=location))
            inst.save()
            LOG.info('Recorded the storage of pool %(pool)s: %(loc)s',
                     {'pool': decision.pool, 'loc': location},
                     instance=inst)

    def finish_interrupted_moves(
            self, instances: list[objects.Instance]) -> None:
        """Finish the moves into a dir pool that a crash interrupted: the
        record says "pools" and disk files are still in the instance
        directory. Not those on their way back to stock's layout: files
        there are a way back cut short, which goes on (:mod:`.way_back`)."""
        for inst in instances:
            decision = self._resolver.recorded(inst)
            if (decision is None or decision.storage != resolver_mod.POOLS
                    or record_mod.going_back(inst.system_metadata,
                                             self._conf.host)):
                continue
            instance_dir = libvirt_utils.get_instance_path(inst)
            names = pool_dir.legacy_files(instance_dir)
            if not names:
                continue
            try:
                pool = self.pools.get(decision.pool)
                if pool_specs.pool_type(pool) != 'dir':
                    continue
                pool_dir.adopt(pool, inst, instance_dir, names)
            except Exception as e:  # noqa: BLE001 - reported, start goes on
                LOG.error('Disks %(names)s of an interrupted move into '
                          'storage pool %(pool)s are still in %(dir)s: '
                          '%(e)s', {'names': ', '.join(names),
                                    'pool': decision.pool,
                                    'dir': instance_dir, 'e': e},
                          instance=inst)
                continue
            LOG.warning('Finished the interrupted move of disks %(names)s '
                        'into storage pool %(pool)s',
                        {'names': ', '.join(names), 'pool': decision.pool},
                        instance=inst)

    def pools_here(self, decision: resolver_mod.BackendDecision
                    ) -> resolver_mod.BackendDecision:
        """``decision`` on this host's pools: its recorded pool where this
        host has it (the record outlives a change of images_type), this
        host's pool of the backend otherwise (a pool of another name on the
        host the instance comes from)."""
        if decision.storage == resolver_mod.POOLS:
            try:
                self.pools.get(decision.pool)
                return decision
            except exception.PoolNotFound as e:
                if pool_specs.is_shared_location(decision.pool_location):
                    # The disks are in a Ceph pool this host does not
                    # reach: a pool of this host is not where they are.
                    raise exception.StorageUnavailable(
                        pool=decision.pool_location,
                        reason='this host has no storage pool of it, and '
                               'the disks of the instance are there'
                    ) from e
        return self._resolver.with_storage(decision, resolver_mod.POOLS)

    def use_this_hosts_pool(self, instance: objects.Instance) -> None:
        """A pool instance rebuilt here (an evacuation) uses this host's
        pool; the compute manager saves the record with the rebuilt
        instance."""
        decision = self._resolver.decision_for(instance)
        if decision.storage != resolver_mod.POOLS:
            return
        here = self.pools_here(decision)
        if here != decision:
            LOG.info('Disks in storage pool %(here)s of this host (were in '
                     '%(was)s)', {'here': here.pool, 'was': decision.pool},
                     instance=instance)
            self._resolver.record(instance, here)

    def point_at_kernel_volumes(self, instance: objects.Instance,
                                 guest: Any) -> None:
        """Stock writes ``<instance dir>/kernel[.rescue]`` (and ramdisk)
        into the guest; a pool instance's kernel and ramdisk are volumes of
        its dir pool."""
        for attr in ('os_kernel', 'os_initrd'):
            path = getattr(guest, attr, None)
            if not path or os.path.basename(path).split('.')[0] not in (
                    'kernel', 'ramdisk'):
                continue
            disk = self._image_backend.by_name(
                instance, os.path.basename(path), 'raw')
            if not disk.is_file_in_instance_path():
                setattr(guest, attr, disk.path)

    def delete_dir_volumes(self, instance: objects.Instance) -> bool:
        """Delete the instance's volumes in this host's dir pool (a
        deleted instance's, a move's that failed on this host), found by
        the pool's place whatever the record says; whether it could.
        Shared storage (rbd) is not touched: the instance's own host
        removes its disks there when it destroys it."""
        directory = pool_specs.dir_disks_location(self._conf)
        try:
            removed = pool_dir.remove_volumes(directory, instance)
            if removed:
                pool = self.pools.dir_pool_at(directory)
                if pool is not None and pool.isActive():
                    pool_specs.refresh(pool)
        except Exception as e:  # noqa: BLE001 - tried again by stock's task
            LOG.warning('Could not remove the volumes of the instance from '
                        '%(dir)s: %(e)s', {'dir': directory, 'e': e},
                        instance=instance)
            return False
        return True

    def delete_rescue_disks(self, instance: objects.Instance) -> None:
        """Delete the disks a rescue made that stock's unrescue leaves: a
        pool instance's ``.rescue`` volumes, and an rbd instance's
        ``.rescue`` images on a host whose ``images_type`` is not rbd."""
        if self._resolver.decision_for(instance).storage == \
                resolver_mod.POOLS:
            self.delete_pool_volumes(instance, suffix='.rescue')
        if (self._resolver.backend_for(instance) == 'rbd' and
                self._conf.libvirt.images_type != 'rbd'):
            uuid = instance.uuid
            rbd_utils.RBDDriver().cleanup_volumes(
                lambda disk: (disk.startswith(uuid) and
                              disk.endswith('.rescue')))
