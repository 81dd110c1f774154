"""Cold moves (resize, cold migration) of instances recorded by
nova-imgtype.

:class:`ColdMoves` is this host's part around stock's steps:

- as the source (``migrate_disk_and_power_off``): refuse, before anything
  is touched, a destination that cannot serve the instance's backend (or
  runs no nova-imgtype), and an lvm instance (stock's rule, for a host
  that is not lvm itself); then one :class:`~.cold_move.ColdMove` sends
  the disks through the destination's libvirtd;
- as the destination (``finish_migration``): record where the disks are
  here before stock opens them (this host's pool of the same storage, or
  files where it has no pools), move legacy files into the pool, and give
  stock the disk info it must not rewrite;
- on a revert (``finish_revert_migration``): the volumes kept in
  ``<instance>_resize`` go back into the pool, the record with them.
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

from nova_imgtype import exception
from nova_imgtype import traits
from nova_imgtype.stock import disk_info_file
from nova_imgtype.stock import driver_steps
from nova_imgtype.virt.libvirt import cold_move
from nova_imgtype.virt.libvirt import file_formats
from nova_imgtype.virt.libvirt import instance_disks
from nova_imgtype.virt.libvirt import pool_dir as pool_dir_mod
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import resolver as resolver_mod

LOG = logging.getLogger(__name__)


class ColdMoves:
    """This host's part of the cold moves of recorded instances.

    :param resolver: the instances' records.
    :param disks: the instances' disks on this host's pools.
    :param stock: stock's steps of the driver.
    :param conf: the configuration nova-compute runs with.
    """

    def __init__(self, resolver: resolver_mod.BackendResolver,
                 disks: instance_disks.InstanceDisks,
                 stock: driver_steps.StockSteps,
                 conf: cfg.ConfigOpts) -> None:
        self._resolver = resolver
        self._disks = disks
        self._stock = stock
        self._conf = conf

    # -- the source -----------------------------------------------------------

    def check_destination(self, context: Any,
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
        :raises InstanceFaultRollback: refused, saying why.
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

    def migrate(self, context: Any, instance: objects.Instance, dest: str,
                booted_from_volume: bool,
                stock_move: cold_move.StockMove) -> str:
        """The move from this host: checked, then stock's
        (``stock_move``) with the disks sent through libvirt.

        :returns: stock's disk info, for the destination.
        """
        if (self._resolver.backend_for(instance) == 'lvm' and
                not booted_from_volume):
            reason = _('Migration is not supported for LVM backed instances')
            raise nova_exception.InstanceFaultRollback(
                nova_exception.MigrationPreCheckError(reason=reason))
        dest_pools = self.check_destination(context, instance)
        decision = self._resolver.decision_for(instance)
        move = cold_move.ColdMove(instance, dest, self._stock)
        if decision.storage != resolver_mod.POOLS:
            return move.send_files(stock_move)
        pool = self._disks.instance_pool(instance)
        if pool_specs.pool_type(pool) != 'dir':
            # Volumes on shared storage (rbd), which the destination finds
            # in its own pool of the same storage.
            return move.send_files(stock_move)
        return move.send_pool_disks(stock_move, self._disks.pools, pool,
                                    decision, dest_pools=dest_pools)

    # -- the destination ---------------------------------------------------

    def finish(self, instance: objects.Instance, disk_info: str,
               booted_from_volume: bool) -> str:
        """Record where the arrived disks are on this host, before stock's
        ``finish_migration`` opens them; the disk info stock gets.

        Stock rewrites raw disks listed in its disk info as qcow2 when
        ``use_cow_images``, because its Qcow2 backend gives QEMU every disk
        as qcow2. The record can tell: a volume's format is the
        instance's, and a file's is what the record names for it
        (:meth:`_files_arrived`), which the image backend gives QEMU. Stock
        gets no raw disk of a recorded instance.
        """
        resolver = self._resolver
        decision = resolver.decision_for(instance)
        if (decision.storage == resolver_mod.POOLS and
                resolver.storage_for(decision.backend) !=
                resolver_mod.POOLS):
            # No pools here: the volumes came as this backend's files
            # (ColdMove.send_pool_disks), and the instance keeps its
            # backend.
            decision = resolver.with_storage(decision, resolver_mod.LEGACY)
            resolver.record(instance, decision)
            instance.save()
            LOG.info('Disks of backend %s are files on this host, which '
                     'has no storage pools for it', decision.backend,
                     instance=instance)
        resolver.ensure_served(instance, self._conf.host)
        infos = jsonutils.loads(disk_info)
        decision = resolver.decision_for(instance)
        if decision.storage != resolver_mod.POOLS:
            self._files_arrived(instance, decision, infos)
        if decision.storage == resolver_mod.POOLS:
            # This host's pool implementing the backend (the same storage:
            # the same directory, or the same Ceph pool).
            here = resolver.with_storage(decision, resolver_mod.POOLS)
            if here != decision:
                resolver.record(instance, here)
                instance.save()
            # The volume files came with the migration: show them to
            # libvirt.
            pool_specs.refresh(self._disks.instance_pool(instance))
        elif (self._disks.can_move_to_pools(instance) and
                not booted_from_volume):
            # Transition: the legacy files just copied here go into the
            # pool before the guest starts.
            self._disks.move_to_pools(instance)
        recorded = resolver.recorded(instance)
        infos = [i for i in infos
                 if 'volume' not in i and os.path.exists(i['path']) and
                 (recorded is None or i.get('type') != 'raw')]
        return jsonutils.dumps(infos)

    def _files_arrived(self, instance: objects.Instance,
                       decision: resolver_mod.BackendDecision,
                       infos: list[dict[str, Any]]) -> None:
        """Before stock opens the disk files that arrived here: the record
        names each one whose format is not its backend's (a raw disk of a
        qcow2 instance, which stock would convert, stays raw: the image
        backend gives it to QEMU as raw), and ``disk.info`` lists them all
        in the format the record gives them (:mod:`.file_formats`)."""
        inst_dir = libvirt_utils.get_instance_path(instance)
        named = file_formats.arrived(decision, inst_dir, infos)
        if named != decision:
            self._resolver.record(instance, named)
            instance.save()
        file_formats.write(named, inst_dir)

    def revert(self, instance: objects.Instance) -> None:
        """Put back the disks kept in ``<instance>_resize``, before stock's
        ``finish_revert_migration``.

        Volumes kept there go back into the pool, replacing the copies the
        migration made (same host or shared storage); an instance that
        moved into the pool during the migration is legacy again, its files
        being the ones stock puts back.
        """
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
            here = self._disks.pools_here(decision)
            if here != decision:
                decision = here
                self._resolver.record(instance, decision)
                instance.save()
        if backup_dir != inst_dir and (volumes or (
                legacy and decision.storage == resolver_mod.POOLS)):
            # Copies the migration made (same host, or shared storage);
            # volumes never staged out are originals, and stay.
            self._disks.delete_pool_volumes(instance)
        if volumes:
            pool = self._disks.instance_pool(instance)
            pool_dir_mod.stage_in(pool, instance, backup_dir, volumes)
        elif legacy and decision.storage == resolver_mod.POOLS:
            self._resolver.record(instance, self._resolver.with_storage(
                decision, resolver_mod.LEGACY))
            instance.save()
