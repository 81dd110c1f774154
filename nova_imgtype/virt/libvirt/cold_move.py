"""One cold move (resize, cold migration) of an instance from this host,
its disks sent through the destination's libvirtd instead of SSH.

Stock's ``migrate_disk_and_power_off`` does the move (its checks before
the guest is touched, the power off, the instance directory kept as
``<instance>_resize`` for a revert, its clean-up on failure) with the
destination's libvirtd as its remote filesystem; a :class:`ColdMove`
withholds the disks from stock's SSH copy and sends them itself, as
sparse libvirt streams (:mod:`.remote_storage`). Its state is the move's:
the destination's remote filesystem, whether it made the instance
directory there, the ``disk.info`` it kept out of stock's copy, the
volumes it staged out of the pool. A failure puts this host back as it
was before the move, and rolls the move back.
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
from nova.virt.libvirt import utils as libvirt_utils
from oslo_log import log as logging
from oslo_serialization import jsonutils
from oslo_utils import excutils

from nova_imgtype import exception
from nova_imgtype import record as record_mod
from nova_imgtype.stock import after_power_off
from nova_imgtype.stock import disk_info_file
from nova_imgtype.stock import driver_steps
from nova_imgtype.stock import remote_filesystem
from nova_imgtype.stock import withheld_disks
from nova_imgtype.virt.libvirt import pool_dir as pool_dir_mod
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import pools as pools_mod
from nova_imgtype.virt.libvirt import remote_storage

LOG = logging.getLogger(__name__)

DISK_INFO = disk_info_file.DISK_INFO
#: Stock's name of the swap disk, which no cold move copies.
SWAP = 'disk.swap'

#: Stock's ``migrate_disk_and_power_off``, with the arguments it was
#: called with: its disk info (JSON).
StockMove = Callable[[], str]

#: (source, target on the destination, whether the target's directory is
#: shared with this host) of each copy.
Copy = tuple[str, str, bool]


def _raise_rollback(e: Exception) -> NoReturn:
    """After the source is as before the move: a failed copy rolls the
    move back (the instance keeps its host and disks, and may be moved
    again); anything else is raised as it is."""
    if isinstance(e, exception.DiskCopyFailed):
        raise nova_exception.InstanceFaultRollback(
            nova_exception.ResizeError(reason=str(e))) from e
    raise e


class ColdMove:
    """The cold move of ``instance`` to ``dest``.

    :param instance: the instance moving.
    :param dest: the destination host (stock's ``dest``: its address).
    :param stock: stock's steps of the driver (the destination's URI,
        whether a path is shared with it, stock's clean-up).
    """

    def __init__(self, instance: objects.Instance, dest: str,
                 stock: driver_steps.StockSteps) -> None:
        self.instance = instance
        self.dest = dest
        self._stock = stock
        self.remote = remote_storage.LibvirtRemoteFilesystem(
            stock.live_migration_uri)
        self.inst_base = libvirt_utils.get_instance_path(instance)
        self.inst_base_resize = self.inst_base + '_resize'
        #: Whether this move made the instance directory there.
        self.made = False
        #: The ``disk.info`` kept out of stock's SSH copy (its hidden name).
        self.kept: str | None = None
        #: The volumes moved out of the pool into the instance directory.
        self.staged: list[str] = []

    def reach_destination(self) -> None:
        """Make the instance directory on the destination through its
        libvirtd before anything is touched here (stock makes it before it
        powers off; a move of pool disks powers off first, to stage the
        volumes); :attr:`made` says whether it was made (not shared).

        :raises InstanceFaultRollback: the destination's libvirtd does not
            answer, or refuses.
        """
        try:
            if self._stock.is_path_shared_with(self.dest, self.inst_base):
                return
            self.remote.create_dir(self.dest, self.inst_base)
            self.made = True
        except libvirt.libvirtError as e:
            raise nova_exception.InstanceFaultRollback(
                nova_exception.ResizeError(reason=_(
                    'cannot make the instance directory on %(dest)s through '
                    'its libvirtd (%(uri)s): %(error)s') % {
                        'dest': self.dest,
                        'uri': self._stock.live_migration_uri(self.dest),
                        'error': e})) from e

    def send_files(self, stock_move: StockMove) -> str:
        """Stock's move of the disk files of the instance directory.

        Stock does it all with the destination's libvirtd as its remote
        filesystem, but copies nothing: the disks it found are withheld
        from it (:mod:`~nova_imgtype.stock.withheld_disks`) and copied here
        from ``_resize`` to the same paths there, swap excepted (stock
        makes it anew). An instance with a vTPM, whose state stock copies
        with SSH, moves the stock way.

        :returns: stock's disk info.
        """
        instance = self.instance
        if hardware.get_vtpm_constraint(instance.flavor, instance.image_meta):
            return stock_move()
        with (remote_filesystem.using(self.remote),
              withheld_disks.withholding() as withheld):
            self.reach_destination()
            self.kept = disk_info_file.hide(self.inst_base)
            try:
                stock_move()
            except Exception:
                with excutils.save_and_reraise_exception():
                    disk_info_file.unhide(self.inst_base, self.kept)
                    self._unmake()
            shared = self._stock.is_path_shared_with(self.dest,
                                                     self.inst_base)
            copies = [(os.path.join(self.inst_base_resize,
                                    os.path.basename(i['path'])),
                       i['path'], shared) for i in withheld
                      if os.path.basename(i['path']) != SWAP]
            self._send(copies, shared)
            return jsonutils.dumps(withheld)

    def send_pool_disks(self, stock_move: StockMove,
                        pools: pools_mod.StoragePools, pool: Any,
                        decision: record_mod.BackendDecision,
                        dest_pools: bool = True) -> str:
        """Stock's move, for disks on volumes of the dir pool ``pool``.

        Stock's part runs first, with its checks before the guest is
        touched (a resize down is refused with the guest running). Once
        stock has stopped the guest, the volume files are moved (renamed,
        same filesystem) into the instance directory, which stock then
        keeps as ``<instance>_resize`` for a revert, as it does for legacy
        disks. Every remote operation of stock's and every copy goes
        through the destination's libvirtd: each volume to the same pool
        path there (a local ``cp`` when the pool directory is shared with
        the destination). A destination without storage pools
        (``dest_pools`` False) gets each volume as the file stock would
        have there (``<instance>/disk``, ...).

        :param decision: the instance's record: each volume's format.
        :returns: stock's disk info, with the volumes.
        """
        instance = self.instance
        with remote_filesystem.using(self.remote):
            self.reach_destination()
            pool_dir = pool_specs.pool_target(pool)
            # Each volume in its recorded format, never the one libvirt
            # probes in the bytes of a raw volume (the guest's).
            vols = [(v.name(), decision.volume_format(
                        v.name()[len(instance.uuid) + 1:]))
                    for v in pools.volumes(pool, instance.uuid + '_')
                    if not v.name().endswith('.rescue')]

            def stage() -> None:
                # Stock has checked the move and stopped the guest: its
                # volumes no longer change, and go where stock's rename
                # takes them.
                self.staged.extend(pool_dir_mod.stage_out(
                    pool, instance, self.inst_base,
                    [name for name, _fmt in vols]))

            def stage_in() -> None:
                pool_dir_mod.stage_in(pool, instance, self.inst_base,
                                      self.staged)

            # Stock copies a disk.info with scp/rsync itself; this one goes
            # through libvirt (a pool instance's is a legacy left-over).
            self.kept = disk_info_file.hide(self.inst_base)
            try:
                with after_power_off.armed(stage):
                    disk_info = jsonutils.loads(stock_move())
            except Exception:
                with excutils.save_and_reraise_exception():
                    # Stock refused before stopping the guest (nothing
                    # staged), or put the instance directory back.
                    disk_info_file.unhide(self.inst_base, self.kept)
                    stage_in()
                    self._unmake()
            # Stock's rule: no swap disk is copied (the guest is off; the
            # destination makes it anew). Staged out with the others, it
            # goes back into the pool on a revert.
            sent = [(name, fmt) for name, fmt in vols
                    if name[len(instance.uuid) + 1:] != SWAP]
            target_dir = pool_dir if dest_pools else self.inst_base
            shared_pool = self._stock.is_path_shared_with(self.dest,
                                                          target_dir)
            shared_dir = self._stock.is_path_shared_with(self.dest,
                                                         self.inst_base)
            copies = [(os.path.join(self.inst_base_resize, name),
                       os.path.join(target_dir, name if dest_pools
                                    else name[len(instance.uuid) + 1:]),
                       shared_pool) for name, _fmt in sent]
            self._send(copies, shared_dir, undo=stage_in)
            for (name, fmt), (_src, target, _shared) in zip(
                    sent, copies, strict=True):
                disk_info.append({'type': fmt, 'path': target,
                                  'volume': name}
                                 if dest_pools else
                                 {'type': fmt, 'path': target})
            if shared_pool and dest_pools:
                # The copies are in this pool's directory too (same host,
                # or a shared one): make libvirt see them.
                pool_specs.refresh(pool)
            return jsonutils.dumps(disk_info)

    def _send(self, copies: list[Copy], shared_dir: bool,
              undo: Callable[[], None] | None = None) -> None:
        """Send the disks (and a kept ``disk.info``) from ``_resize`` to
        the destination; on a failure, put this host back as before the
        move (stock's clean-up, then ``undo``) and roll the move back."""
        if self.kept:
            copies = copies + [(os.path.join(self.inst_base_resize,
                                             self.kept),
                                os.path.join(self.inst_base, DISK_INFO),
                                shared_dir)]
        try:
            remote_storage.send(self.remote, self.dest, copies)
        except Exception as e:
            self._stock.cleanup_remote_migration(
                self.dest, self.inst_base, self.inst_base_resize,
                shared_dir)
            disk_info_file.unhide(self.inst_base, self.kept)
            if undo is not None:
                undo()
            _raise_rollback(e)
        disk_info_file.unhide(self.inst_base_resize, self.kept)

    def _unmake(self) -> None:
        """Remove the directory :meth:`reach_destination` made on the
        destination, after stock's part of the move failed: when stock
        refused it before keeping the instance directory as ``_resize`` (a
        resize down, an lvm host), nothing else would (after, stock's
        ``_cleanup_remote_migration`` did already: this finds nothing)."""
        if not self.made:
            return
        try:
            self.remote.remove_dir(self.dest, self.inst_base)
        except libvirt.libvirtError as e:
            LOG.warning('Could not remove %(dir)s on %(dest)s: %(e)s',
                        {'dir': self.inst_base, 'dest': self.dest, 'e': e})
