"""The driver's part for what cold moves (resize, cold migration) send to
the destination: through its libvirtd, not SSH
(:mod:`.remote_storage`), stock doing the rest of the move.

One of the parts :class:`~nova_imgtype.virt.libvirt.driver.LibvirtDriver`
is made of (through :class:`.driver_moves.ColdMoves`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any
from typing import NoReturn

import libvirt
from nova import exception as nova_exception
from nova import objects
from nova.i18n import _
from nova.virt import hardware
from nova.virt.libvirt import driver as libvirt_driver
from nova.virt.libvirt import utils as libvirt_utils
from oslo_log import log as logging
from oslo_serialization import jsonutils
from oslo_utils import excutils

from nova_imgtype import compat
from nova_imgtype import exception
from nova_imgtype.stock import after_power_off
from nova_imgtype.stock import disk_info_file
from nova_imgtype.stock import remote_filesystem
from nova_imgtype.stock import withheld_disks
from nova_imgtype.virt.libvirt import pool_dir as pool_dir_mod
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import remote_storage

LOG = logging.getLogger(__name__)

DISK_INFO = disk_info_file.DISK_INFO


def _unmake(remote: remote_storage.LibvirtRemoteFilesystem, dest: str,
            inst_base: str, made: bool) -> None:
    """Remove the directory :meth:`Transfers._reach_destination` made on
    the destination, after stock's part of the move failed: when stock
    refused it before keeping the instance directory as ``_resize`` (a
    resize down, an lvm host), nothing else would (after, stock's
    ``_cleanup_remote_migration`` did already: this finds nothing)."""
    if not made:
        return
    try:
        remote.remove_dir(dest, inst_base)
    except libvirt.libvirtError as e:
        LOG.warning('Could not remove %(dir)s on %(dest)s: %(e)s',
                    {'dir': inst_base, 'dest': dest, 'e': e})


def _raise_rollback(e: Exception) -> NoReturn:
    """After the source is as before the move: a failed copy rolls the
    move back (the instance keeps its host and disks, and may be moved
    again); anything else is raised as it is."""
    if isinstance(e, exception.DiskCopyFailed):
        raise nova_exception.InstanceFaultRollback(
            nova_exception.ResizeError(reason=str(e))) from e
    raise e


class Transfers(libvirt_driver.LibvirtDriver):
    """Cold moves sending disks through the destination's libvirtd."""

    def _migrate_files(self, stock: compat.StockCall,
                       instance: objects.Instance, dest: str) -> str:
        """Stock's resize and cold migration of the disk files of the
        instance directory, through the destination's libvirtd.

        Stock does it all (checks, power off, the directory kept as
        ``<instance>_resize``) with the destination's libvirtd as its
        remote filesystem, but copies nothing: the disks it found are
        withheld from it (:meth:`_get_instance_disk_info`) and copied here
        from ``_resize`` to the same paths there, as sparse libvirt
        streams, swap excepted (stock makes it anew). An instance with a
        vTPM, whose state stock copies with SSH, moves the stock way.

        :param stock: the call of ``migrate_disk_and_power_off``, whose
            arguments stock gets as they came.
        """
        if hardware.get_vtpm_constraint(instance.flavor, instance.image_meta):
            return super().migrate_disk_and_power_off(*stock.args,
                                                      **stock.kwargs)
        remote = remote_storage.LibvirtRemoteFilesystem(
            self._live_migration_uri)
        inst_base = libvirt_utils.get_instance_path(instance)
        inst_base_resize = inst_base + '_resize'
        with (remote_filesystem.using(remote),
              withheld_disks.withholding() as withheld):
            made = self._reach_destination(remote, instance, dest)
            kept = disk_info_file.hide(inst_base)
            try:
                super().migrate_disk_and_power_off(*stock.args,
                                                   **stock.kwargs)
            except Exception:
                with excutils.save_and_reraise_exception():
                    disk_info_file.unhide(inst_base, kept)
                    _unmake(remote, dest, inst_base, made)
            shared = self._is_path_shared_with(dest, inst_base)
            copies = [(os.path.join(inst_base_resize,
                                    os.path.basename(i['path'])),
                       i['path'], shared) for i in withheld
                      if os.path.basename(i['path']) != 'disk.swap']
            self._send(remote, dest, inst_base, copies, kept, shared)
            return jsonutils.dumps(withheld)

    def _migrate_pool_disks(self, stock: compat.StockCall,
                            instance: objects.Instance, dest: str,
                            timeout: int, retry_interval: int,
                            dest_pools: bool = True) -> str:
        """Stock's resize and cold migration, for disks on pool volumes,
        through the destination's libvirtd instead of SSH.

        Stock's part runs first, with its checks before the guest is
        touched (a resize down is refused with the guest running). Once
        stock has stopped the guest (:meth:`power_off`), the volume files
        are moved (renamed, same filesystem) into the instance directory,
        which stock then keeps as ``<instance>_resize`` for a revert, as it
        does for legacy disks.
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

        :param stock: the call of ``migrate_disk_and_power_off``, whose
            arguments stock gets as they came.
        """
        remote = remote_storage.LibvirtRemoteFilesystem(
            self._live_migration_uri)
        with remote_filesystem.using(remote):
            made = self._reach_destination(remote, instance, dest)
            return self._migrate_pool_disks_here(
                stock, instance, dest, timeout, retry_interval, dest_pools,
                remote, made)

    def _reach_destination(self, remote: Any, instance: objects.Instance,
                           dest: str) -> bool:
        """Make the instance directory on the destination through its
        libvirtd before anything is touched here (stock makes it before it
        powers off; this move powers off first, to stage the volumes).

        :returns: whether the directory was made there (not shared).
        :raises InstanceFaultRollback: the destination's libvirtd does not
            answer, or refuses.
        """
        inst_base = libvirt_utils.get_instance_path(instance)
        try:
            if self._is_path_shared_with(dest, inst_base):
                return False
            remote.create_dir(dest, inst_base)
            return True
        except libvirt.libvirtError as e:
            raise nova_exception.InstanceFaultRollback(
                nova_exception.ResizeError(reason=_(
                    'cannot make the instance directory on %(dest)s through '
                    'its libvirtd (%(uri)s): %(error)s') % {
                        'dest': dest,
                        'uri': self._live_migration_uri(dest),
                        'error': e})) from e

    def _migrate_pool_disks_here(
            self, stock: compat.StockCall, instance: objects.Instance,
            dest: str, timeout: int, retry_interval: int, dest_pools: bool,
            remote: remote_storage.LibvirtRemoteFilesystem,
            made: bool) -> str:
        pool = self._instance_pool(instance)
        pool_dir = pool_specs.pool_target(pool)
        inst_base = libvirt_utils.get_instance_path(instance)
        inst_base_resize = inst_base + '_resize'
        # Each volume in its recorded format, never the one libvirt probes
        # in the bytes of a raw volume (the guest's).
        decision = self._resolver.decision_for(instance)
        vols = [(v.name(), decision.volume_format(
                    v.name()[len(instance.uuid) + 1:]))
                for v in self._pools.volumes(pool, instance.uuid + '_')
                if not v.name().endswith('.rescue')]
        staged: list[str] = []

        def stage() -> None:
            # Stock has checked the move and stopped the guest: its volumes
            # no longer change, and go where stock's rename takes them.
            staged.extend(pool_dir_mod.stage_out(
                pool, instance, inst_base, [name for name, _fmt in vols]))

        # Stock copies a disk.info with scp/rsync itself; this one goes
        # through libvirt below (a pool instance's is a legacy left-over).
        kept = disk_info_file.hide(inst_base)
        try:
            with after_power_off.armed(stage):
                disk_info = jsonutils.loads(
                    super().migrate_disk_and_power_off(*stock.args,
                                                       **stock.kwargs))
        except Exception:
            with excutils.save_and_reraise_exception():
                # Stock refused before stopping the guest (nothing staged),
                # or put the instance directory back in place.
                disk_info_file.unhide(inst_base, kept)
                pool_dir_mod.stage_in(pool, instance, inst_base, staged)
                _unmake(remote, dest, inst_base, made)
        target_dir = pool_dir if dest_pools else inst_base
        shared_pool = self._is_path_shared_with(dest, target_dir)
        shared_dir = self._is_path_shared_with(dest, inst_base)
        copies = [(os.path.join(inst_base_resize, name), os.path.join(
            target_dir, name if dest_pools else name[len(instance.uuid) + 1:]),
            shared_pool) for name, _fmt in vols]
        self._send(remote, dest, inst_base, copies, kept, shared_dir,
                   undo=lambda: pool_dir_mod.stage_in(pool, instance,
                                                      inst_base, staged))
        for (name, fmt), (_src, target, _shared) in zip(
                vols, copies, strict=True):
            disk_info.append({'type': fmt, 'path': target, 'volume': name}
                             if dest_pools else
                             {'type': fmt, 'path': target})
        if shared_pool and dest_pools:
            # The copies are in this pool's directory too (same host, or a
            # shared one): make libvirt see them.
            pool.refresh(0)
        return jsonutils.dumps(disk_info)

    def _send(self, remote: remote_storage.LibvirtRemoteFilesystem,
              dest: str, inst_base: str,
              copies: list[tuple[str, str, bool]], kept: str | None,
              shared_dir: bool,
              undo: Callable[[], None] | None = None) -> None:
        """Send the disks (and a hidden ``disk.info``) from ``_resize`` to
        the destination; on a failure, put this host back as before the
        move (stock's clean-up, then ``undo``) and roll the move back."""
        inst_base_resize = inst_base + '_resize'
        if kept:
            copies = copies + [(os.path.join(inst_base_resize, kept),
                                os.path.join(inst_base, DISK_INFO),
                                shared_dir)]
        try:
            remote_storage.send(remote, dest, copies)
        except Exception as e:
            self._cleanup_remote_migration(
                dest, inst_base, inst_base_resize, shared_dir)
            disk_info_file.unhide(inst_base, kept)
            if undo is not None:
                undo()
            _raise_rollback(e)
        disk_info_file.unhide(inst_base_resize, kept)

    def power_off(self, *args: Any, **kwargs: Any) -> None:
        super().power_off(*args, **kwargs)
        # Stock's cold move of a pool instance, the guest just stopped.
        after_power_off.fire()

    def _get_instance_disk_info(self, *args: Any, **kwargs: Any) -> Any:
        instance: objects.Instance = compat.driver(
            '_get_instance_disk_info', self, args, kwargs)['instance']
        info = super()._get_instance_disk_info(*args, **kwargs)
        if withheld_disks.active():
            # A move through libvirt (_migrate_files): copied there.
            return withheld_disks.answer(info)
        if remote_filesystem.current() is None:
            return info
        # During the move of a pool instance: its volumes named by path (a
        # guest live-migrated here, until its next start) are copied by
        # _migrate_pool_disks_here, through libvirt, not by stock.
        return [i for i in info if not os.path.basename(
            i['path']).startswith(instance.uuid + '_')]

    #: The destination's libvirtd during a cold move in this thread
    #: (:mod:`.remote_storage`), stock's (SSH or rsync) otherwise.
    _remotefs = remote_filesystem.RemoteFilesystemAttribute()
