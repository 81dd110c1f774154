"""The driver's part for cold moves (resize, cold migration): the
destination's check, pool volumes staged out of the pool and copied, and
their return on a revert.

One of the parts :class:`~nova_imgtype.virt.libvirt.driver.LibvirtDriver`
is made of.
"""

from __future__ import annotations

import contextvars
import os
from typing import Any

import libvirt
from nova import exception as nova_exception
from nova import objects
from nova.i18n import _
from nova.virt.libvirt import driver as libvirt_driver
from nova.virt.libvirt import utils as libvirt_utils
from oslo_config import cfg
from oslo_log import log as logging
from oslo_serialization import jsonutils
from oslo_utils import excutils
from oslo_utils import fileutils

import nova_imgtype.conf
from nova_imgtype import exception
from nova_imgtype import traits
from nova_imgtype.virt.libvirt import pool_dir as pool_dir_mod
from nova_imgtype.virt.libvirt import pools as pools_mod
from nova_imgtype.virt.libvirt import remote_storage
from nova_imgtype.virt.libvirt import resolver as resolver_mod

LOG = logging.getLogger(__name__)
CONF: cfg.ConfigOpts = nova_imgtype.conf.CONF

DISK_INFO = 'disk.info'
_HIDDEN = DISK_INFO + '.imgtype-moving'

#: The remote filesystem of the cold move of a pool instance running in
#: this thread (the destination's libvirtd); None for any other move.
_REMOTE: contextvars.ContextVar[
    remote_storage.LibvirtRemoteFilesystem | None] = contextvars.ContextVar(
        'nova_imgtype_remotefs', default=None)


def _hide(directory: str, name: str) -> str | None:
    """Rename ``name`` in ``directory`` out of stock's sight; the new name,
    or None when there is no such file."""
    if not os.path.exists(os.path.join(directory, name)):
        return None
    os.rename(os.path.join(directory, name),
              os.path.join(directory, _HIDDEN))
    return _HIDDEN


def _unhide(directory: str, hidden: str | None) -> None:
    """Undo :func:`_hide` in ``directory`` (where it may have moved)."""
    path = os.path.join(directory, hidden) if hidden else None
    if path and os.path.exists(path):
        os.rename(path, os.path.join(directory, DISK_INFO))


class ColdMoves(libvirt_driver.LibvirtDriver):
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

    def migrate_disk_and_power_off(self, context: Any,
                                   instance: objects.Instance, dest: str,
                                   flavor: Any, network_info: Any,
                                   block_device_info: Any = None,
                                   timeout: int = 0,
                                   retry_interval: int = 0) -> Any:
        if (self._resolver.backend_for(instance) == 'lvm' and
                not self._is_booted_from_volume(block_device_info)):
            reason = _('Migration is not supported for LVM backed instances')
            raise nova_exception.InstanceFaultRollback(
                nova_exception.MigrationPreCheckError(reason=reason))
        dest_pools = self._check_destination_serves(context, instance)
        decision = self._resolver.decision_for(instance)
        if decision.storage != resolver_mod.POOLS or pools_mod.pool_type(
                self._pools.get(decision.pool)) != 'dir':
            # Legacy disks, or volumes on shared storage (rbd) that the
            # destination finds in its own pool of the same name.
            return super().migrate_disk_and_power_off(
                context, instance, dest, flavor, network_info,
                block_device_info=block_device_info, timeout=timeout,
                retry_interval=retry_interval)
        return self._migrate_pool_disks(
            context, instance, dest, flavor, network_info,
            block_device_info, timeout, retry_interval, dest_pools)

    def _migrate_pool_disks(self, context: Any, instance: objects.Instance,
                            dest: str, flavor: Any, network_info: Any,
                            block_device_info: Any, timeout: int,
                            retry_interval: int,
                            dest_pools: bool = True) -> str:
        """Stock's resize and cold migration, for disks on pool volumes,
        through the destination's libvirtd instead of SSH.

        With the guest stopped, the volume files are moved (renamed, same
        filesystem) into the instance directory, which stock then keeps as
        ``<instance>_resize`` for a revert, as it does for legacy disks.
        Every remote operation of stock's (is the instance directory
        shared, make it there, remove it after a failure) and every copy
        goes through :class:`~.remote_storage.LibvirtRemoteFilesystem`,
        over the connection Nova opens to the destination for live
        migration: each volume to the same pool path there (a local ``cp``
        when the pool directory is shared with the destination), as a
        sparse stream. A destination without storage pools (``dest_pools``
        False) gets each volume as the file stock would have there
        (``<instance>/disk``, ...), and makes the instance's disks files
        of its backend (``finish_migration``). A failure puts everything
        back where it was.
        """
        remote = remote_storage.LibvirtRemoteFilesystem(
            self._live_migration_uri)
        token = _REMOTE.set(remote)
        try:
            self._reach_destination(remote, instance, dest)
            return self._migrate_pool_disks_here(
                context, instance, dest, flavor, network_info,
                block_device_info, timeout, retry_interval, dest_pools,
                remote)
        finally:
            _REMOTE.reset(token)

    def _reach_destination(self, remote: Any, instance: objects.Instance,
                           dest: str) -> None:
        """Make the instance directory on the destination through its
        libvirtd before anything is touched here (stock makes it before it
        powers off; this move powers off first, to stage the volumes).

        :raises InstanceFaultRollback: the destination's libvirtd does not
            answer, or refuses.
        """
        inst_base = libvirt_utils.get_instance_path(instance)
        try:
            if not self._is_path_shared_with(dest, inst_base):
                remote.create_dir(dest, inst_base)
        except libvirt.libvirtError as e:
            raise nova_exception.InstanceFaultRollback(
                nova_exception.ResizeError(reason=_(
                    'cannot make the instance directory on %(dest)s through '
                    'its libvirtd (%(uri)s): %(error)s') % {
                        'dest': dest,
                        'uri': self._live_migration_uri(dest),
                        'error': e})) from e

    def _migrate_pool_disks_here(
            self, context: Any, instance: objects.Instance, dest: str,
            flavor: Any, network_info: Any, block_device_info: Any,
            timeout: int, retry_interval: int, dest_pools: bool,
            remote: remote_storage.LibvirtRemoteFilesystem) -> str:
        pool = self._instance_pool(instance)
        pool_dir = pools_mod.pool_target(pool)
        inst_base = libvirt_utils.get_instance_path(instance)
        inst_base_resize = inst_base + '_resize'
        vols = [(v.name(), pools_mod.volume_format(v))
                for v in self._pools.volumes(pool, instance.uuid + '_')
                if not v.name().endswith('.rescue')]
        # Stopped before its volumes are read; stock's own power_off that
        # follows finds it stopped, as for a stopped instance.
        self.power_off(instance, timeout, retry_interval)
        staged = pool_dir_mod.stage_out(pool, instance, inst_base,
                                        [name for name, _fmt in vols])
        # Stock copies a disk.info with scp/rsync itself; this one goes
        # through libvirt below (a pool instance's is a legacy left-over).
        kept = _hide(inst_base, DISK_INFO)
        try:
            disk_info = jsonutils.loads(super().migrate_disk_and_power_off(
                context, instance, dest, flavor, network_info,
                block_device_info=block_device_info, timeout=timeout,
                retry_interval=retry_interval))
        except Exception:
            with excutils.save_and_reraise_exception():
                # Stock put the instance directory back in place.
                _unhide(inst_base, kept)
                pool_dir_mod.stage_in(pool, instance, inst_base, staged)
        target_dir = pool_dir if dest_pools else inst_base
        shared_pool = self._is_path_shared_with(dest, target_dir)
        shared_dir = self._is_path_shared_with(dest, inst_base)
        copies = [(os.path.join(inst_base_resize, name), fmt, os.path.join(
            target_dir, name if dest_pools else name[len(instance.uuid) + 1:]),
            shared_pool) for name, fmt in vols]
        if kept:
            copies.append((os.path.join(inst_base_resize, kept), 'raw',
                           os.path.join(inst_base, DISK_INFO), shared_dir))
        copied: list[tuple[str, bool]] = []
        try:
            for src, fmt, target, shared in copies:
                if shared:
                    libvirt_utils.copy_image(src, target)
                else:
                    remote.upload(src, dest, target)
                copied.append((target, shared))
                if target.endswith(DISK_INFO):
                    continue
                name = os.path.basename(src)
                disk_info.append({'type': fmt, 'path': target,
                                  'volume': name} if dest_pools else
                                 {'type': fmt, 'path': target})
        except Exception:
            with excutils.save_and_reraise_exception():
                for target, shared in copied:
                    if shared:
                        fileutils.delete_if_exists(target)
                    else:
                        self._remotefs.remove_file(dest, target)
                self._cleanup_remote_migration(
                    dest, inst_base, inst_base_resize, shared_dir)
                _unhide(inst_base, kept)
                pool_dir_mod.stage_in(pool, instance, inst_base, staged)
        _unhide(inst_base_resize, kept)
        if shared_pool and dest_pools:
            # The copies are in this pool's directory too (same host, or a
            # shared one): make libvirt see them.
            pool.refresh(0)
        return jsonutils.dumps(disk_info)

    def _get_instance_disk_info(self, instance: objects.Instance,
                                *args: Any, **kwargs: Any) -> Any:
        info = super()._get_instance_disk_info(instance, *args, **kwargs)
        if _REMOTE.get() is None:
            return info
        # During the move of a pool instance: its volumes named by path (a
        # guest live-migrated here, until its next start) are copied by
        # _migrate_pool_disks_here, through libvirt, not by stock.
        return [i for i in info if not os.path.basename(
            i['path']).startswith(instance.uuid + '_')]

    @property
    def _remotefs(self) -> Any:
        """Stock's remote filesystem (SSH or rsync), or the destination's
        libvirtd during a move of a pool instance in this thread."""
        return _REMOTE.get() or self._stock_remotefs

    @_remotefs.setter
    def _remotefs(self, value: Any) -> None:
        # Stock's __init__ sets it.
        self._stock_remotefs = value

    def finish_migration(self, context: Any, migration: Any,
                         instance: objects.Instance, disk_info: str,
                         network_info: Any, image_meta: Any,
                         resize_instance: bool, allocations: Any,
                         block_device_info: Any = None,
                         power_on: bool = True, share_info: Any = None
                         ) -> None:
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
        infos = jsonutils.loads(disk_info)
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
                not self._is_booted_from_volume(block_device_info)):
            # Transition: the legacy files just copied here go into the pool
            # before the guest starts.
            self._move_to_pools(instance)
        # Stock rewrites raw disks listed here as qcow2 when use_cow_images;
        # the format of a volume is the instance's, leave volumes alone.
        infos = [i for i in infos
                 if 'volume' not in i and os.path.exists(i['path'])]
        super().finish_migration(
            context, migration, instance, jsonutils.dumps(infos),
            network_info, image_meta, resize_instance, allocations,
            block_device_info=block_device_info, power_on=power_on,
            share_info=share_info)

    def finish_revert_migration(self, context: Any,
                                instance: objects.Instance,
                                network_info: Any, migration: Any,
                                block_device_info: Any = None,
                                power_on: bool = True,
                                share_info: Any = None) -> None:
        """Put back the disks kept in ``<instance>_resize``.

        Volumes kept there go back into the pool, replacing the copies the
        migration made (same host or shared storage); an instance that moved
        into the pool during the migration is legacy again, its files being
        the ones stock puts back.
        """
        inst_dir = libvirt_utils.get_instance_path(instance)
        backup_dir = inst_dir + '_resize'
        if not os.path.isdir(backup_dir):
            # Interrupted before stock kept the directory (nova-compute
            # restarted while migrating reverts): the volumes are still
            # staged in the instance directory.
            backup_dir = inst_dir
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
        super().finish_revert_migration(
            context, instance, network_info, migration,
            block_device_info=block_device_info, power_on=power_on,
            share_info=share_info)
