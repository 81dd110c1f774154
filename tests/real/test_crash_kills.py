"""Real: the move of a legacy instance into the pool, its nova-compute
killed (SIGKILL, in a process of its own) at each step, then the driver
started again (issue 12: "crash injection at every step of a transition").

Real: the kill, the files (qcow2 with data, made by qemu-img), the pool on
the throwaway libvirtd. The record the killed process saves goes to a file
(no Nova DB runs here); the restarted driver reads it, as nova-compute
reads its instances' system metadata from the DB.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from unittest import mock

import pytest
from nova import objects
from nova.virt.libvirt import driver as stock_driver

from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import resolver as resolver_mod
from nova_imgtype_testing import libvirtd as real
from tests.real.test_libvirt_storage import _boot_disk
from tests.real.test_libvirt_storage import pool_driver  # noqa: F401
from tests.real.test_native_images import conf  # noqa: F401
from tests.real.test_native_images import driver  # noqa: F401
from tests.real.test_native_images import glance  # noqa: F401

SCRIPT = os.path.join(os.path.dirname(__file__), 'scripts',
                      'move_then_die.py')
NAMES = ('disk', 'disk.local')
LEGACY = {'imgtype_backend': 'qcow2', 'imgtype_storage': 'legacy',
          'imgtype_native_formats': 'qcow2'}


def _legacy_instance(instances_path):
    inst_uuid = str(uuid.uuid4())
    inst_dir = os.path.join(instances_path, inst_uuid)
    os.makedirs(inst_dir)
    data = {}
    for name in NAMES:
        path = os.path.join(inst_dir, name)
        real.make_image(path, 'qcow2', 4 * 1024 * 1024)
        with open(path, 'ab') as f:
            f.write(name.encode() * 1000)
        with open(path, 'rb') as f:
            data[name] = f.read()
    # Stock's record of the files' formats.
    with open(os.path.join(inst_dir, 'disk.info'), 'w') as f:
        json.dump({os.path.join(inst_dir, n): 'qcow2' for n in NAMES}, f)
    return inst_uuid, inst_dir, data


@pytest.mark.parametrize('die_at,record_saved', [
    ('save', False),        # the new record not saved: still legacy
    ('rename-0', True),     # saved, nothing moved yet
    ('rename-1', True),     # saved, one file moved
])
def test_killed_at_each_step_then_started_again(
        pool_driver, libvirt_uri, tmp_path, die_at,  # noqa: F811
        record_saved):
    instances_path = pool_driver._resolver._conf.instances_path
    inst_uuid, inst_dir, data = _legacy_instance(instances_path)
    record = str(tmp_path / 'record.json')
    proc = subprocess.run(
        [sys.executable, SCRIPT, libvirt_uri, instances_path, inst_uuid,
         die_at, record], capture_output=True, text=True, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr

    sysmeta = dict(LEGACY)
    if os.path.exists(record):
        with open(record) as f:
            sysmeta = json.load(f)
    assert (sysmeta['imgtype_storage'] == 'pools') is record_saved
    inst = objects.Instance(uuid=inst_uuid, host='host1',
                            system_metadata=sysmeta)
    inst.save = mock.Mock()

    # nova-compute starts again.
    with mock.patch.object(stock_driver.LibvirtDriver, 'init_host'), \
            mock.patch.object(objects.InstanceList, 'get_by_host',
                              return_value=[inst]):
        pool_driver.init_host('host1')

    pool = pool_driver._pools.get(pool_specs.DISKS_POOL)
    target = pool_specs.pool_target(pool)
    if record_saved:
        # The move is finished: every disk is a volume, with its data.
        assert pool_driver._resolver.recorded(inst).storage == \
            resolver_mod.POOLS
        for name in NAMES:
            vol = pool_specs.volume_name(inst_uuid, name)
            assert vol in pool.listVolumes()
            with open(os.path.join(target, vol), 'rb') as f:
                assert f.read() == data[name]
            assert not os.path.exists(os.path.join(inst_dir, name))
    else:
        # Nothing moved: the legacy files, as they were.
        for name in NAMES:
            with open(os.path.join(inst_dir, name), 'rb') as f:
                assert f.read() == data[name]
        assert not [v for v in pool.listVolumes()
                    if v.startswith(inst_uuid)]


COLD_SCRIPT = os.path.join(os.path.dirname(__file__), 'scripts',
                           'cold_move_then_die.py')


@pytest.mark.parametrize('die_at', ['stage-1', 'stock', 'copy'])
def test_cold_move_killed_at_each_step_then_reverted_at_start(
        pool_driver, glance, libvirt_uri, tmp_path, die_at):  # noqa: F811
    """The cold move of a pool instance (through libvirt) killed: between
    the volumes staged out, once stock kept the directory, in the middle
    of the stream. Started again, nova-compute reverts the move (stock's
    ``_init_instance`` calls ``finish_revert_migration`` for an instance
    left in ``resize_migrating``): every volume back in the pool with its
    data."""
    image_id = str(uuid.uuid4())
    src = str(tmp_path / 'img.qcow2')
    real.make_image(src, 'qcow2', 16 * 1024 * 1024)
    glance[image_id] = (src, 'qcow2')
    inst, disk = _boot_disk(pool_driver, image_id, 'qcow2')
    inst.host = 'host1'
    inst.save = mock.Mock()
    pool = pool_driver._pools.get(pool_specs.DISKS_POOL)
    target = pool_specs.pool_target(pool)
    local = os.path.join(target,
                         pool_specs.volume_name(inst.uuid, 'disk.local'))
    real.make_image(local, 'qcow2', 8 * 1024 * 1024)
    pool.refresh(0)
    data = {}
    for path in (disk.path, local):
        with open(path, 'ab') as f:
            f.write(b'instance data ' * 500)
        with open(path, 'rb') as f:
            data[os.path.basename(path)] = f.read()
    inst_base = os.path.join(pool_driver._resolver._conf.instances_path,
                             inst.uuid)
    os.makedirs(inst_base)
    with open(os.path.join(inst_base, 'disk.info'), 'w') as f:
        f.write('{}')

    proc = subprocess.run(
        [sys.executable, COLD_SCRIPT, libvirt_uri,
         pool_driver._resolver._conf.instances_path, inst.uuid,
         json.dumps(dict(inst.system_metadata)), die_at],
        capture_output=True, text=True, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr

    def stock_revert(self, context, instance, *args, **kwargs):
        # What stock does with the directory it kept.
        if os.path.isdir(inst_base + '_resize'):
            shutil.rmtree(inst_base, ignore_errors=True)
            os.rename(inst_base + '_resize', inst_base)

    with mock.patch.object(stock_driver.LibvirtDriver,
                           'finish_revert_migration', stock_revert):
        pool_driver.finish_revert_migration(None, inst, [], mock.Mock())

    pool.refresh(0)
    for name, content in data.items():
        assert name in pool.listVolumes()
        with open(os.path.join(target, name), 'rb') as f:
            assert f.read() == content
    assert sorted(os.listdir(inst_base)) == ['disk.info']
    assert not os.path.exists(inst_base + '_resize')
