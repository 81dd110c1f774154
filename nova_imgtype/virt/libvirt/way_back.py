"""The way back to stock's ``libvirt.LibvirtDriver``.

:class:`WayBack` tells, instance by instance, what on this host stock's
driver could not serve once nova-imgtype is gone, and moves what it can
back to stock's layout (``nova-imgtype prepare-uninstall``):

* a disk that is a volume of a dir pool becomes the instance's file again
  (``{uuid}_{name}`` renamed to ``<instances_path>/<uuid>/<name>``, free
  whatever the size, :func:`.pool_dir.release`), its format written in
  ``disk.info`` from the record, where stock's Flat reads it;
* a volume of a logical or rbd pool that stock's ``images_type`` backend
  names the same way (``{uuid}_{name}`` in ``images_volume_group`` or
  ``images_rbd_pool``) stays where it is: only the record changes;
* on a host whose ``images_type`` is qcow2, a disk file of another format
  (a mapped instance's raw disk) is converted to qcow2 as stock's cold
  migration converts a raw one (Nova's ``convert_image``, the recorded
  format named): stock's Qcow2 backend gives QEMU every disk as qcow2.

Every format comes from the instance's record (or stock's ``disk.info``),
never from the bytes of a disk. Before any file moves, the record says
that the move is under way (:data:`~nova_imgtype.record.WAY_BACK_MOVE`:
the disks, those converted, each disk's format); each step is saved before
the next and can be done again, so a move cut short (the process killed)
is finished by the next run, or the next hard reboot, never taken for
done. A move out of the pool that fails puts back the files and the
record. The command moves a
stopped instance at once, while nova-compute is down (it checks). A
running one is marked (:data:`~nova_imgtype.record.WAY_BACK`, this host's
name): nova-compute, still nova-imgtype's, moves it at its next hard
reboot (:meth:`WayBack.take_back`), its guest stopped. A stopped one moved
at once is marked the same way, so that this host never moves either into
a pool again (its next start is a hard reboot). One whose disks stock's
backend here can't serve in any layout (files on an lvm or rbd host,
volumes of a Ceph pool that is not ``images_rbd_pool``) is left: it must
move to a host that keeps nova-imgtype.
"""

from __future__ import annotations

import dataclasses
import os

from nova import objects
from nova.virt import images
from nova.virt.libvirt import utils as libvirt_utils
from oslo_config import cfg
from oslo_log import log as logging
from oslo_utils import excutils

from nova_imgtype import record as record_mod
from nova_imgtype.virt.libvirt import instance_disks as disks_mod
from nova_imgtype.virt.libvirt import pool_dir
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import resolver as resolver_mod

LOG = logging.getLogger(__name__)

#: Stock serves the instance as it is.
READY = 'ready'
#: ``--apply`` would move it back (a dry run's answer).
TO_MOVE = 'to move'
#: Moved back now.
MOVED = 'moved'
#: Running: marked to move back at its next hard reboot.
AT_REBOOT = 'at hard reboot'
#: Something keeps it on nova-imgtype: the reason says what to do.
LEFT = 'left'

#: The steps of a way back, in their order.
TO_FILES = 'disks out of storage pool %s into files'
RECORD_ONLY = 'disks kept where they are: %s'
TO_QCOW2 = '%s converted to qcow2'
FORMATS = 'formats of its files written in disk.info from the record'
UNDER_WAY = 'its interrupted move back to stock\'s %s backend finished'

_MOVE_AWAY = ('move it to a host that keeps nova-imgtype (openstack server '
              'migrate)')


@dataclasses.dataclass(frozen=True)
class Finding:
    """What the way back found (and did) for one instance."""

    uuid: str
    name: str
    vm_state: str
    outcome: str
    detail: str


class _Left(Exception):
    """Stock's driver here cannot serve the instance in any layout."""


class WayBack:
    """The instances of this host, on their way back to stock's driver.

    :param resolver: the instances' records.
    :param disks: their disks on this host's storage pools.
    :param conf: the configuration nova-compute ran with (its
        ``images_type`` is the one stock's driver will use).
    """

    def __init__(self, resolver: resolver_mod.BackendResolver,
                 disks: disks_mod.InstanceDisks,
                 conf: cfg.ConfigOpts) -> None:
        self._resolver = resolver
        self._disks = disks
        self._conf = conf

    def stock_backend(self) -> str:
        """The backend stock's driver gives every instance here."""
        return self._resolver.default_backend()

    def review(self, instance: objects.Instance, stopped: bool,
               apply: bool, running: bool = True) -> Finding:
        """What keeps the instance from stock's driver, and with ``apply``
        the moves that take it back: at once when ``stopped`` (its guest
        not running, no task under way), at its next hard reboot when
        ``running`` (active, no task under way: it is marked); neither (a
        resize to confirm, a rescue, a task under way, an error) is left.
        An instance moved or marked is saved here, before its disks move.
        """
        def finding(outcome: str, detail: str) -> Finding:
            return Finding(instance.uuid, instance.display_name or '',
                           instance.vm_state or '', outcome, detail)

        decision = self._resolver.recorded(instance)
        if decision is None:
            return finding(READY, 'no nova-imgtype record: stock made it')
        try:
            steps = self._steps(instance, decision, self._under_way(instance))
        except _Left as e:
            return finding(LEFT, '%s: %s' % (e, _MOVE_AWAY))
        if not steps:
            return finding(READY, 'stock\'s %s backend serves it as it is'
                           % self.stock_backend())
        what = '; '.join(steps)
        if not apply:
            return finding(TO_MOVE, what)
        if stopped:
            self._move(instance, decision)
            return finding(MOVED, what)
        if not running:
            return finding(LEFT, '%s once it is stopped or running again '
                           '(vm_state %s, task %s): finish what it is doing '
                           'and run again, or %s' % (
                               what, instance.vm_state,
                               instance.task_state or 'none', _MOVE_AWAY))
        if record_mod.set_value(instance, record_mod.WAY_BACK,
                                self._conf.host):
            instance.save()
        return finding(AT_REBOOT, '%s at its next hard reboot (openstack '
                       'server reboot --hard), or stop it and run again, '
                       'or %s' % (what, _MOVE_AWAY))

    def due(self, instance: objects.Instance) -> bool:
        """Whether the instance was marked on this host to move back to
        stock's layout at its next hard reboot, and has not yet."""
        if not record_mod.going_back(instance.system_metadata,
                                     self._conf.host):
            return False        # the usual case: nothing more is read
        if self._under_way(instance) is not None:
            return True
        decision = self._resolver.recorded(instance)
        if decision is None:
            return False
        try:
            return bool(self._steps(instance, decision))
        except _Left:
            return False

    def _under_way(self, instance: objects.Instance
                   ) -> record_mod.WayBackMove | None:
        """The move back to stock's layout that a run on this host began
        and did not finish, or None."""
        if not record_mod.going_back(instance.system_metadata,
                                     self._conf.host):
            return None
        return record_mod.way_back_move(instance.system_metadata)

    def take_back(self, instance: objects.Instance) -> None:
        """Move the instance, its guest stopped, back to stock's layout
        (at the hard reboot of an instance marked by :meth:`review`)."""
        decision = self._resolver.decision_for(instance)
        self._move(instance, decision)

    def _steps(self, instance: objects.Instance,
               decision: record_mod.BackendDecision,
               move: record_mod.WayBackMove | None = None) -> list[str]:
        """The moves that take the instance back, as words (what is left
        of ``move``, one under way).

        :raises _Left: none does.
        """
        if move is not None:
            return self._steps_left(instance, decision, move)
        stock = self.stock_backend()
        files = decision.backend in resolver_mod.FILE_BACKENDS
        steps = []
        if files and stock not in resolver_mod.FILE_BACKENDS:
            raise _Left('its disks are files (backend %s); stock\'s %s '
                        'backend looks for them elsewhere'
                        % (decision.backend, stock))
        if not files and decision.backend != stock:
            raise _Left('its disks are on backend %s; stock serves only %s '
                        'here' % (decision.backend, stock))
        if decision.storage == resolver_mod.POOLS:
            if files:
                steps.append(TO_FILES % decision.pool)
            elif self._stock_names(decision):
                steps.append(RECORD_ONLY % pool_specs.location_key(
                    pool_specs.disks_pool_spec(self._conf, stock)))
            else:
                raise _Left('its disks are volumes of %s, not where stock\'s '
                            '%s backend looks for them' % (
                                decision.pool_location or decision.pool,
                                stock))
        elif files and pool_dir.legacy_formats(
                libvirt_utils.get_instance_path(instance),
                [n for n in self._names(instance, decision)
                 if n not in ('kernel', 'ramdisk')]) is None:
            steps.append(FORMATS)
        if (decision.config_drive == record_mod.LOCAL and
                stock not in resolver_mod.FILE_BACKENDS):
            raise _Left('its config drive is a local file; stock\'s %s '
                        'backend looks for it in its own storage' % stock)
        if files and stock == 'qcow2':
            other = self._not_qcow2(instance, decision)
            if other:
                steps.append(TO_QCOW2 % ', '.join(
                    '%s (%s)' % item for item in other))
        return steps

    @staticmethod
    def _steps_left(instance: objects.Instance,
                    decision: record_mod.BackendDecision,
                    move: record_mod.WayBackMove) -> list[str]:
        """What is left of a move under way, as words (never nothing: its
        last step drops the mark)."""
        steps = [UNDER_WAY % move.target]
        if decision.storage == resolver_mod.POOLS:
            steps.append(TO_FILES % decision.pool)
        instance_dir = libvirt_utils.get_instance_path(instance)
        left = [n for n in move.to_qcow2
                if decision.volume_format(n) != 'qcow2' or
                os.path.exists(_qcow_tmp(os.path.join(instance_dir, n)))]
        if left:
            steps.append(TO_QCOW2 % ', '.join(left))
        steps.append(FORMATS)
        return steps

    def _stock_names(self, decision: record_mod.BackendDecision) -> bool:
        """Whether stock's backend finds the disks of an lvm or rbd pool
        instance where they are: the pool's storage is the one stock's
        backend uses here (``images_volume_group``, ``images_rbd_pool``),
        whose volumes are named as stock names its disks."""
        if not decision.pool_location:
            return False
        here = pool_specs.location_key(pool_specs.disks_pool_spec(
            self._conf, decision.backend))
        return pool_specs.same_storage(here, decision.pool_location)

    def _names(self, instance: objects.Instance,
               decision: record_mod.BackendDecision) -> list[str]:
        """The instance's disk names on this host: its dir pool volumes
        (pool instance), else its legacy files."""
        if decision.storage == resolver_mod.POOLS:
            prefix = instance.uuid + '_'
            directory = pool_specs.pool_target(
                self._disks.instance_pool(instance))
            return [n[len(prefix):] for n in pool_dir.volume_files(directory)
                    if n.startswith(prefix)]
        return pool_dir.legacy_files(
            libvirt_utils.get_instance_path(instance))

    def _formats(self, instance: objects.Instance,
                 decision: record_mod.BackendDecision) -> dict[str, str]:
        """The format of each disk (kernel and ramdisk are not disks):
        stock's ``disk.info`` for a legacy instance's files, where it says,
        else the record's."""
        names = [n for n in self._names(instance, decision)
                 if n not in ('kernel', 'ramdisk')]
        formats = {n: decision.volume_format(n) for n in names}
        if decision.storage != resolver_mod.POOLS:
            recorded = pool_dir.legacy_formats(
                libvirt_utils.get_instance_path(instance), names)
            formats.update(recorded or {})
        return formats

    def _not_qcow2(self, instance: objects.Instance,
                   decision: record_mod.BackendDecision
                   ) -> list[tuple[str, str]]:
        """(name, format) of the disks that are not qcow2 and that stock's
        Qcow2 backend would give QEMU as qcow2 (every one but those stock
        always makes raw: config drive, kernel, ramdisk)."""
        return sorted(
            (n, fmt) for n, fmt in self._formats(instance, decision).items()
            if fmt != 'qcow2' and not n.startswith(record_mod.RAW_DISKS))

    def _move(self, instance: objects.Instance,
              decision: record_mod.BackendDecision) -> None:
        """Take a stopped instance back to stock's layout, or finish the
        move a run cut short began.

        The record says first that the move is under way (the disks, those
        to convert, each disk's format), then each step is saved before
        the next: the disks out of the pool (their ``disk.info`` written
        from the record), stock's files recorded, each conversion to
        qcow2, the mark dropped with the last record. A failure of the
        move out of the pool puts back the files and the record; a later
        failure leaves the mark, and the next run goes on from there.
        """
        instance_dir = libvirt_utils.get_instance_path(instance)
        was_pools = decision.storage == resolver_mod.POOLS
        if decision.backend not in resolver_mod.FILE_BACKENDS:
            # The volumes stay where stock's backend finds them: one save.
            self._resolver.record(instance, self._resolver.with_storage(
                decision, resolver_mod.LEGACY))
            record_mod.set_value(instance, record_mod.WAY_BACK,
                                 self._conf.host)
            instance.save()
            LOG.info('Back in stock\'s layout: %s', '; '.join(
                self._steps_done(decision, ())), instance=instance)
            return
        move = self._under_way(instance)
        if move is None:
            decision, move = self._begin(instance, decision)
        else:
            LOG.warning('Finishing the interrupted move back to stock\'s '
                        'layout (%s)', '; '.join(self._steps_left(
                            instance, decision, move)), instance=instance)
        if decision.storage == resolver_mod.POOLS:
            self._out_of_pool(instance, decision, move, instance_dir)
            decision = self._resolver.with_storage(decision,
                                                   resolver_mod.LEGACY)
            self._resolver.record(instance, decision)
            instance.save()
        for name in move.to_qcow2:
            decision = self._to_qcow2(instance, decision, instance_dir, name)
        if move.to_qcow2:
            # Every disk is qcow2 now but those stock makes raw: the
            # backend's formats, as stock's Qcow2 has them; no image
            # format is used unconverted any more.
            decision = dataclasses.replace(
                decision, backend='qcow2', native_formats=(),
                disk_formats=())
        pool_dir.write_formats(instance_dir, _disk_formats(decision, move))
        self._resolver.record(instance, decision)
        record_mod.set_way_back_move(instance, None)
        instance.save()
        LOG.info('Back in stock\'s layout: %s', '; '.join(self._steps_done(
            dataclasses.replace(decision, storage=resolver_mod.POOLS
                                if was_pools else resolver_mod.LEGACY),
            move.to_qcow2)), instance=instance)

    def _begin(self, instance: objects.Instance,
               decision: record_mod.BackendDecision
               ) -> tuple[record_mod.BackendDecision,
                          record_mod.WayBackMove]:
        """Record and save the move under way, before anything moves: the
        disks, those to convert, and each disk's format in the record
        (where ``disk.info`` said it), which alone says it from then on.
        """
        stock = self.stock_backend()
        to_qcow2 = (tuple(n for n, _f in self._not_qcow2(instance, decision))
                    if stock == 'qcow2' else ())
        for name, fmt in self._formats(instance, decision).items():
            decision = _with_format(decision, name, fmt)
        move = record_mod.WayBackMove(
            stock, tuple(self._names(instance, decision)), to_qcow2)
        self._resolver.record(instance, decision)
        # This host never moves it into a pool again.
        record_mod.set_value(instance, record_mod.WAY_BACK, self._conf.host)
        record_mod.set_way_back_move(instance, move)
        instance.save()
        return decision, move

    def _out_of_pool(self, instance: objects.Instance,
                     decision: record_mod.BackendDecision,
                     move: record_mod.WayBackMove, instance_dir: str) -> None:
        """The instance's volumes renamed out of its dir pool into its
        files (those a cut short run moved are skipped), their formats
        written in ``disk.info``. A failure puts every disk of the move
        back into the pool, the record as it was before the move."""
        pool = self._disks.instance_pool(instance)
        try:
            pool_dir.release(pool, instance, instance_dir)
            pool_dir.write_formats(instance_dir,
                                   _disk_formats(decision, move))
        except Exception:
            with excutils.save_and_reraise_exception():
                target = pool_specs.pool_target(pool)
                back = [n for n in move.disks
                        if os.path.exists(os.path.join(instance_dir, n)) and
                        not os.path.exists(os.path.join(
                            target, pool_specs.volume_name(instance.uuid,
                                                           n)))]
                if back:
                    pool_dir.adopt(pool, instance, instance_dir, back)
                self._resolver.record(instance, decision)
                record_mod.set_value(instance, record_mod.WAY_BACK, None)
                record_mod.set_way_back_move(instance, None)
                instance.save()

    def _to_qcow2(self, instance: objects.Instance,
                  decision: record_mod.BackendDecision, instance_dir: str,
                  name: str) -> record_mod.BackendDecision:
        """Convert disk file ``name`` of its recorded format to qcow2 as
        stock's cold migration does a raw one
        (``LibvirtDriver._disk_raw_to_qcow2``): Nova's ``convert_image``
        (the format named, never probed) into a file beside it, the record
        saved, the copy renamed over the disk. A copy beside a disk still
        recorded in its old format is a cut short conversion's (removed,
        made again); beside one recorded as qcow2, a whole one (renamed).
        """
        path = os.path.join(instance_dir, name)
        tmp = _qcow_tmp(path)
        fmt = decision.volume_format(name)
        if fmt != 'qcow2':
            if os.path.exists(tmp):
                os.unlink(tmp)
            try:
                images.convert_image(path, tmp, fmt, 'qcow2')
                # On disk before the record says it is the disk's.
                fd = os.open(tmp, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except Exception:
                with excutils.save_and_reraise_exception():
                    if os.path.exists(tmp):
                        os.unlink(tmp)
            decision = _with_format(decision, name, 'qcow2')
            self._resolver.record(instance, decision)
            instance.save()
        if os.path.exists(tmp):
            os.rename(tmp, path)
        pool_dir.write_formats(instance_dir, {name: 'qcow2'})
        return decision

    @staticmethod
    def _steps_done(decision: record_mod.BackendDecision,
                    convert: tuple[str, ...]) -> list[str]:
        done = ['recorded as stock\'s files (backend %s)' % decision.backend]
        if decision.storage == resolver_mod.POOLS:
            done.append('left storage pool %s' % decision.pool)
        if convert:
            done.append(TO_QCOW2 % ', '.join(convert))
        return done

    def own_pools(self) -> list[str]:
        """The names of the pools nova-imgtype defined on this host."""
        return [p.name() for p in self._disks.pools.own_pools()]

    def remove_pools(self) -> list[tuple[str, str]]:
        """Undefine the pools nova-imgtype defined on this host, their
        storage kept as it is (files, images and logical volumes stay),
        each but a dir pool that still holds an instance's volume (that
        instance is still on pools: nothing is moved or deleted here).
        The caller removes them only once no instance of this host is
        recorded on pools. (pool name, what was done) for each.
        """
        done = []
        for pool in self._disks.pools.own_pools():
            name = pool.name()
            if pool_specs.pool_type(pool) == 'dir':
                left = pool_dir.volume_files(pool_specs.pool_target(pool))
                if left:
                    done.append((name, 'kept: it holds instance volumes '
                                 '(%s)' % ', '.join(left)))
                    continue
            self._disks.pools.forget(pool)
            LOG.info('Storage pool %s undefined (its storage kept)', name)
            done.append((name, 'undefined, its storage kept'))
        return done


def _qcow_tmp(path: str) -> str:
    """Where a disk file's qcow2 copy is made before it replaces it (the
    name stock's cold migration uses)."""
    return path + '_qcow'


def _with_format(decision: record_mod.BackendDecision, name: str,
                 fmt: str) -> record_mod.BackendDecision:
    """``decision`` with disk ``name`` recorded as ``fmt`` (no entry where
    that is what the record says without one)."""
    formats = dict(decision.disk_formats)
    formats.pop(name, None)
    if dataclasses.replace(decision, disk_formats=tuple(
            sorted(formats.items()))).volume_format(name) != fmt:
        formats[name] = fmt
    return dataclasses.replace(decision,
                               disk_formats=tuple(sorted(formats.items())))


def _disk_formats(decision: record_mod.BackendDecision,
                  move: record_mod.WayBackMove) -> dict[str, str]:
    """The recorded format of each disk of ``move`` (kernel and ramdisk
    are not disks), as stock's ``disk.info`` lists them."""
    return {n: decision.volume_format(n) for n in move.disks
            if n not in ('kernel', 'ramdisk')}
