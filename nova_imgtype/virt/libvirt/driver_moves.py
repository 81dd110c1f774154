"""The driver's part for cold moves (resize, cold migration): the
destination's check, pool volumes staged out of the pool and copied, and
their return on a revert.

One of the parts :class:`~nova_imgtype.virt.libvirt.driver.LibvirtDriver`
is made of.
"""

from __future__ import annotations

import os
from typing import Any

from nova import exception as nova_exception
from nova import objects
from nova.i18n import _
from nova.virt.libvirt import utils as libvirt_utils
from oslo_config import cfg
from oslo_log import log as logging
from oslo_serialization import jsonutils

import nova_imgtype.conf
from nova_imgtype import compat
from nova_imgtype import exception
from nova_imgtype import traits
from nova_imgtype.stock import disk_info_file
from nova_imgtype.virt.libvirt import driver_transfers
from nova_imgtype.virt.libvirt import pool_dir as pool_dir_mod
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import resolver as resolver_mod

LOG = logging.getLogger(__name__)
CONF: cfg.ConfigOpts = nova_imgtype.conf.CONF

class ColdMoves(driver_transfers.Transfers):
    """Resize and cold migration of instances on pools and files."""

    def _check_destination_serves(self, context: Any,
                                  instance: objects.Instance) -> bool:
        """Refuse a cold move to a host that can't serve the backend.

        Asked of placement before anything is touched: the destination
        node reports one ``CUSTOM_IMGTYPE_BACKEND_<NAME>`` trait per backend
        it can serve. A destination reporting none runs no nova-imgtype and
        would not use the instance's disks: refused (the scheduler's
        ``instance_backend`` request filter never picks it; this holds
        where the scheduler runs without it). A pool instance may move to a
        host without storage pools that serves its backend: its volumes
        become that backend's files there.

        :returns: False when the disks of a pool instance go to a host
            without storage pools (as files), True otherwise.
        """
        decision = self._resolver.recorded(instance)
        if decision is None or not instance.migration_context:
            return True
        migration = objects.Migration.get_by_id(
            context, instance.migration_context.migration_id)
        node = objects.ComputeNode.get_by_host_and_nodename(
            context, migration.dest_compute, migration.dest_node)
        node_traits = traits.reported(context, [node.uuid])
        if not traits.runs_imgtype(node_traits):
            raise nova_exception.InstanceFaultRollback(
                nova_exception.MigrationPreCheckError(reason=str(
                    exception.DestinationWithoutImgtype(
                        host=migration.dest_compute,
                        instance_uuid=instance.uuid,
                        backend=decision.backend,
                        storage=decision.storage))))
        if traits.backend_trait(decision.backend) not in node_traits:
            reason = _('destination host %(dest)s cannot serve image backend '
                       '%(backend)s of this instance') % {
                'dest': migration.dest_compute,
                'backend': decision.backend}
            raise nova_exception.InstanceFaultRollback(
                nova_exception.MigrationPreCheckError(reason=reason))
        return (decision.storage != resolver_mod.POOLS or
                traits.backend_trait(resolver_mod.STORAGE_BACKEND) in
                node_traits)

    def migrate_disk_and_power_off(self, *args: Any, **kwargs: Any) -> Any:
        call = compat.driver('migrate_disk_and_power_off', self, args,
                             kwargs)
        instance: objects.Instance = call['instance']
        dest: str = call['dest']
        if (self._resolver.backend_for(instance) == 'lvm' and
                not self._is_booted_from_volume(call['block_device_info'])):
            reason = _('Migration is not supported for LVM backed instances')
            raise nova_exception.InstanceFaultRollback(
                nova_exception.MigrationPreCheckError(reason=reason))
        dest_pools = self._check_destination_serves(call['context'],
                                                    instance)
        decision = self._resolver.decision_for(instance)
        if decision.storage != resolver_mod.POOLS or pool_specs.pool_type(
                self._pools.get(decision.pool)) != 'dir':
            # Legacy disks, or volumes on shared storage (rbd) that the
            # destination finds in its own pool of the same name.
            return self._migrate_files(call, instance=instance, dest=dest)
        return self._migrate_pool_disks(
            call, instance=instance, dest=dest, timeout=call['timeout'],
            retry_interval=call['retry_interval'], dest_pools=dest_pools)

    def finish_migration(self, *args: Any, **kwargs: Any) -> None:
        call = compat.driver('finish_migration', self, args, kwargs)
        instance: objects.Instance = call['instance']
        decision = self._resolver.decision_for(instance)
        if (decision.storage == resolver_mod.POOLS and
                self._resolver.storage_for(decision.backend) !=
                resolver_mod.POOLS):
            # No pools here: the volumes came as this backend's files
            # (_migrate_pool_disks), and the instance keeps its backend.
            decision = self._resolver.with_storage(decision,
                                                   resolver_mod.LEGACY)
            self._resolver.record(instance, decision)
            instance.save()
            LOG.info('Disks of backend %s are files on this host, which '
                     'has no storage pools for it', decision.backend,
                     instance=instance)
        self._resolver.ensure_served(instance, CONF.host)
        infos = jsonutils.loads(call['disk_info'])
        if decision.storage == resolver_mod.POOLS:
            # This host's pool implementing the backend (the same storage:
            # the same directory, or the same Ceph pool).
            here = self._resolver.with_storage(decision, resolver_mod.POOLS)
            if here != decision:
                self._resolver.record(instance, here)
                instance.save()
            # The volume files came with the migration: show them to libvirt.
            self._instance_pool(instance).refresh(0)
        elif (self._can_move_to_pools(instance) and
                not self._is_booted_from_volume(call['block_device_info'])):
            # Transition: the legacy files just copied here go into the pool
            # before the guest starts.
            self._move_to_pools(instance)
        # Stock rewrites raw disks listed here as qcow2 when use_cow_images,
        # because it cannot tell one instance's layout from the host's
        # default. The record can: a volume's format is the instance's, and
        # so is a file's of an instance recorded on another backend than
        # qcow2 (its raw disks stay raw, as its guest XML and disk.info
        # say). Only the disks of a qcow2 instance are left to stock.
        recorded = self._resolver.recorded(instance)
        infos = [i for i in infos
                 if 'volume' not in i and os.path.exists(i['path']) and
                 (recorded is None or recorded.backend == 'qcow2' or
                  i.get('type') != 'raw')]
        args, kwargs = call.replaced(disk_info=jsonutils.dumps(infos))
        super().finish_migration(*args, **kwargs)

    def finish_revert_migration(self, *args: Any, **kwargs: Any) -> None:
        """Put back the disks kept in ``<instance>_resize``.

        Volumes kept there go back into the pool, replacing the copies the
        migration made (same host or shared storage); an instance that moved
        into the pool during the migration is legacy again, its files being
        the ones stock puts back.
        """
        instance: objects.Instance = compat.driver(
            'finish_revert_migration', self, args, kwargs)['instance']
        inst_dir = libvirt_utils.get_instance_path(instance)
        backup_dir = inst_dir + '_resize'
        if not os.path.isdir(backup_dir):
            # Interrupted before stock kept the directory (nova-compute
            # restarted while migrating reverts): the volumes are still
            # staged in the instance directory.
            backup_dir = inst_dir
        disk_info_file.recover(backup_dir)
        names = (os.listdir(backup_dir) if os.path.isdir(backup_dir)
                 else [])
        volumes = [n for n in names if n.startswith(instance.uuid + '_')]
        legacy = ([n for n in names if pool_dir_mod.LEGACY_DISK.match(n)]
                  if backup_dir != inst_dir else [])
        decision = self._resolver.decision_for(instance)
        if volumes:
            # Back into this host's pool: the destination recorded its own
            # (files on a host without pools, or its pool's name).
            here = self._pools_here(decision)
            if here != decision:
                decision = here
                self._resolver.record(instance, decision)
                instance.save()
        if backup_dir != inst_dir and (volumes or (
                legacy and decision.storage == resolver_mod.POOLS)):
            # Copies the migration made (same host, or shared storage);
            # volumes never staged out are originals, and stay.
            self._delete_pool_volumes(instance)
        if volumes:
            pool = self._instance_pool(instance)
            pool_dir_mod.stage_in(pool, instance, backup_dir, volumes)
        elif legacy and decision.storage == resolver_mod.POOLS:
            self._resolver.record(instance, self._resolver.with_storage(
                decision, resolver_mod.LEGACY))
            instance.save()
        super().finish_revert_migration(*args, **kwargs)
