"""The way back to stock's layout killed at each step (issue 54, defect 4:
"an interrupted ``--apply`` leaves a record that says stock's files while
every disk is still a pool volume; a second run says ``ready``").

A kill is a ``BaseException`` raised before the n-th step that changes
something (a save of the record, a file renamed or replaced, a qcow2
conversion, which is cut half way through its copy): nothing of the way
back's own clean-up runs, as when the process dies. The record the next
run reads is the one saved last (Nova's DB), not the one in memory. Then
``prepare-uninstall --apply`` runs again: it must see the move under way
(not say ``ready``), finish it, and leave the record, ``disk.info`` and
the files agreeing, every disk with its data. Pools on libvirt's embedded
test driver; real files, converted by qemu-img.
"""

import functools
import json
import os
import subprocess
import uuid
from unittest import mock

import pytest
from nova import objects
from nova.virt import images

from nova_imgtype import record as record_mod
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import way_back as way_back_mod
from tests.unit.test_crash_safe_moves import Killed
from tests.unit.test_crash_safe_moves import _start
from tests.unit.test_driver import make_driver  # noqa: F401 - fixture
from tests.unit.test_driver import test_pools  # noqa: F401 - fixture

NAMES = ('disk', 'disk.local', 'disk.config')
SIZE = 256 * 1024


class Steps:
    """Counts the steps of a way back; raises :class:`Killed` before the
    one numbered ``kill_at`` (never with None)."""

    def __init__(self, kill_at):
        self.kill_at = kill_at
        self.done = 0

    def step(self):
        if self.done == self.kill_at:
            raise Killed()
        self.done += 1


def _instance(drv, origin):
    """A flat instance (raw disks), on the dir pool or in files (without
    ``disk.info``: its formats are written from the record); each disk's
    data."""
    inst_uuid = str(uuid.uuid4())
    sysmeta = {'imgtype_backend': 'flat', 'imgtype_native_formats': 'raw',
               'imgtype_storage': origin}
    inst_dir = os.path.join(drv._resolver._conf.instances_path, inst_uuid)
    if origin == 'pools':
        sysmeta['imgtype_pool'] = pool_specs.DISKS_POOL
        directory = pool_specs.pool_target(
            drv._pools.get(pool_specs.DISKS_POOL))
    else:
        directory = inst_dir
    os.makedirs(directory, exist_ok=True)
    data = {}
    for i, name in enumerate(NAMES):
        data[name] = bytes([0x41 + i]) * SIZE
        file_name = (pool_specs.volume_name(inst_uuid, name)
                     if origin == 'pools' else name)
        with open(os.path.join(directory, file_name), 'wb') as f:
            f.write(data[name])
    return inst_uuid, sysmeta, data


def _loaded(inst_uuid, saved):
    """The instance as nova-compute (or the command) reads it from the DB:
    the record saved last."""
    inst = objects.Instance(uuid=inst_uuid, display_name='vm',
                            vm_state='stopped', task_state=None,
                            system_metadata=dict(saved))
    inst.save = mock.Mock()
    return inst


def _saved(saved, inst):
    """The instance saved: its record, as the DB has it now."""
    saved.clear()
    saved.update(inst.system_metadata)


def _apply(back, inst, steps, saved):
    """``prepare-uninstall --apply`` on a stopped instance, each step
    counted (and killed at ``steps.kill_at``)."""
    real_rename, real_replace = os.rename, os.replace
    real_convert = images.convert_image

    def rename(src, dest):
        steps.step()
        real_rename(src, dest)

    def replace(src, dest):
        steps.step()
        real_replace(src, dest)

    def convert(src, dest, *args, **kwargs):
        killed = steps.done == steps.kill_at
        real_convert(src, dest, *args, **kwargs)
        if killed:
            # The copy cut short half way.
            with open(dest, 'r+b') as f:
                f.truncate(os.path.getsize(dest) // 2)
        steps.step()

    def save():
        steps.step()
        _saved(saved, inst)

    inst.save = save
    with mock.patch('os.rename', rename), \
            mock.patch('os.replace', replace), \
            mock.patch.object(images, 'convert_image', convert):
        return back.review(inst, stopped=True, apply=True)


def _read_back(path, fmt):
    """The disk's data, read in ``fmt`` (the format QEMU is given)."""
    out = path + '.read-back'
    subprocess.run(['qemu-img', 'convert', '-f', fmt, '-O', 'raw', path,
                    out], check=True)
    try:
        with open(out, 'rb') as f:
            return f.read()
    finally:
        os.unlink(out)


def _check_stock_layout(drv, inst, data, host):
    """Record, disk.info and files agree; every disk with its data."""
    meta = inst.system_metadata
    assert record_mod.WAY_BACK_MOVE not in meta
    assert meta[record_mod.WAY_BACK] == host
    decision = drv._resolver.recorded(inst)
    assert decision.storage == 'legacy'
    target = pool_specs.pool_target(drv._pools.get(pool_specs.DISKS_POOL))
    assert not [n for n in os.listdir(target) if n.startswith(inst.uuid)]
    inst_dir = os.path.join(drv._resolver._conf.instances_path, inst.uuid)
    assert sorted(os.listdir(inst_dir)) == sorted((*NAMES, 'disk.info'))
    with open(os.path.join(inst_dir, 'disk.info')) as f:
        listed = json.load(f)
    formats = {name: decision.volume_format(name) for name in NAMES}
    assert listed == {os.path.join(inst_dir, n): fmt
                      for n, fmt in formats.items()}
    for name in NAMES:
        assert _read_back(os.path.join(inst_dir, name),
                          formats[name]) == data[name], name
    return formats


@pytest.mark.parametrize('images_type,origin,converted', [
    ('qcow2', 'pools', {'disk', 'disk.local'}),
    ('flat', 'pools', set()),
    ('qcow2', 'legacy', {'disk', 'disk.local'}),
])
def test_the_way_back_killed_at_each_step_is_finished_by_the_next_run(
        make_driver, test_pools, images_type, origin,  # noqa: F811
        converted):
    drv = test_pools(make_driver(images_type=images_type,
                                 use_storage_pools=True))
    _start(drv, [])
    back = drv._way_back
    host = back._conf.host

    # A whole run, its steps counted.
    inst_uuid, sysmeta, data = _instance(drv, origin)
    whole = Steps(None)
    saved = dict(sysmeta)
    found = _apply(back, _loaded(inst_uuid, sysmeta), whole, saved)
    assert found.outcome == way_back_mod.MOVED, found
    formats = _check_stock_layout(drv, _loaded(inst_uuid, saved), data,
                                  host)
    assert {n for n, f in formats.items() if f == 'qcow2'} == converted
    assert whole.done > 3

    for kill_at in range(whole.done):
        inst_uuid, sysmeta, data = _instance(drv, origin)
        saved = dict(sysmeta)
        with pytest.raises(Killed):
            _apply(back, _loaded(inst_uuid, sysmeta), Steps(kill_at), saved)

        # nova-compute started meanwhile: it finishes no move into the
        # pool with the files of a way back cut short.
        inst = _loaded(inst_uuid, saved)
        _start(drv, [inst])
        # The next run: never "ready" before the move is done.
        dry = back.review(inst, stopped=True, apply=False)
        assert dry.outcome == way_back_mod.TO_MOVE, (kill_at, dry)
        inst.save.assert_not_called()
        if record_mod.WAY_BACK_MOVE in saved:
            assert 'interrupted' in dry.detail
            assert back.due(inst), kill_at
        if kill_at % 2 and back.due(inst):
            # Finished by nova-compute at the instance's hard reboot.
            inst.save = functools.partial(_saved, saved, inst)
            back.take_back(inst)
        else:
            found = _apply(back, inst, Steps(None), saved)
            assert found.outcome == way_back_mod.MOVED, (kill_at, found)

        inst = _loaded(inst_uuid, saved)
        assert _check_stock_layout(drv, inst, data, host) == formats, kill_at
        assert back.review(inst, stopped=True, apply=False).outcome == (
            way_back_mod.READY), kill_at
        assert not back.due(inst)
