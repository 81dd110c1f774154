"""A move of legacy files into a dir pool killed half-way (issue 12,
defect 4: "``_move_to_pools`` renames files before the new state is
recorded and saved"; now ``InstanceDisks.move_to_pools``).

The kill is a ``BaseException`` raised from the second rename: nothing of
the driver's own clean-up runs, as when the process dies. Then nova-compute
starts again (``init_host``) and finishes the move. Pools on libvirt's
embedded test driver; real files made by qemu-img.
"""

import json
import os
import subprocess
from unittest import mock

import pytest
from nova import objects

from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import resolver as resolver_mod
from tests.unit.test_driver import STOCK
from tests.unit.test_driver import _instance
from tests.unit.test_driver import make_driver  # noqa: F401 - fixture
from tests.unit.test_driver import test_pools  # noqa: F401 - fixture

NAMES = ('disk', 'disk.local')


class Killed(BaseException):
    """The process dies here."""


def _legacy(drv):
    inst = _instance(imgtype_backend='qcow2', imgtype_storage='legacy',
                     imgtype_native_formats='qcow2')
    inst.host = 'host1'
    inst_dir = os.path.join(drv._resolver._conf.instances_path, inst.uuid)
    os.makedirs(inst_dir)
    for name in NAMES:
        subprocess.run(['qemu-img', 'create', '-q', '-f', 'qcow2',
                        os.path.join(inst_dir, name), '1M'], check=True)
    # Stock's record of the files' formats.
    with open(os.path.join(inst_dir, 'disk.info'), 'w') as f:
        json.dump({os.path.join(inst_dir, n): 'qcow2' for n in NAMES}, f)
    return inst, inst_dir


def _start(drv, instances):
    with mock.patch.object(STOCK, 'init_host'), \
            mock.patch.object(objects.InstanceList, 'get_by_host',
                              return_value=instances):
        drv.init_host('host1')


@pytest.fixture
def drv(make_driver, test_pools):  # noqa: F811
    drv = test_pools(make_driver(images_type='qcow2',
                                 use_storage_pools=True))
    _start(drv, [])
    return drv


def test_a_move_killed_half_way_is_finished_at_the_next_start(drv):
    inst, inst_dir = _legacy(drv)
    real_rename = os.rename
    calls = []

    def rename(src, dest):
        calls.append(src)
        if len(calls) == 2:
            raise Killed()
        real_rename(src, dest)

    with mock.patch('os.rename', side_effect=rename):
        with pytest.raises(Killed):
            drv._disks.move_to_pools(inst)
    # What the crash left: the record says pools (it was saved first), one
    # file moved, one not.
    assert drv._resolver.recorded(inst).storage == resolver_mod.POOLS
    inst.save.assert_called()
    target = pool_specs.pool_target(drv._pools.get(pool_specs.DISKS_POOL))
    assert os.path.exists(os.path.join(target, '%s_disk' % inst.uuid))
    assert os.path.exists(os.path.join(inst_dir, 'disk.local'))

    _start(drv, [inst])

    # (The test driver's pools do not scan their directory: the files are
    # looked at.)
    for name in NAMES:
        assert os.path.exists(os.path.join(
            target, pool_specs.volume_name(inst.uuid, name)))
        assert not os.path.exists(os.path.join(inst_dir, name))


def test_a_failed_move_puts_files_and_record_back(drv):
    inst, inst_dir = _legacy(drv)
    target = pool_specs.pool_target(drv._pools.get(pool_specs.DISKS_POOL))
    # A volume of the second name is already there: refused, nothing lost.
    subprocess.run(['qemu-img', 'create', '-q', '-f', 'qcow2', os.path.join(
        target, '%s_disk.local' % inst.uuid), '1M'], check=True)
    with pytest.raises(Exception, match='disk.local'):
        drv._disks.move_to_pools(inst)
    assert drv._resolver.recorded(inst).storage == resolver_mod.LEGACY
    for name in NAMES:
        assert os.path.exists(os.path.join(inst_dir, name))
    assert not os.path.exists(os.path.join(target, '%s_disk' % inst.uuid))


def test_a_cold_move_interrupted_while_staging_reverts_into_the_pool(drv):
    """Issue 12, defect 4: "volumes staged out of the pool for a move sit
    in ``<instance>/`` after a crash where the revert path does not look".
    nova-compute restarted during the move calls finish_revert_migration;
    one volume was staged out, the other not yet."""
    inst = _instance(imgtype_backend='qcow2', imgtype_storage='pools',
                     imgtype_pool=pool_specs.DISKS_POOL)
    inst_dir = os.path.join(drv._resolver._conf.instances_path, inst.uuid)
    os.makedirs(inst_dir)
    target = pool_specs.pool_target(drv._pools.get(pool_specs.DISKS_POOL))
    staged = os.path.join(inst_dir, '%s_disk' % inst.uuid)
    kept = os.path.join(target, '%s_disk.local' % inst.uuid)
    for path, data in ((staged, b'root'), (kept, b'ephemeral')):
        with open(path, 'wb') as f:
            f.write(data)
    with mock.patch.object(STOCK, 'finish_revert_migration') as stock:
        drv.finish_revert_migration(None, inst, None, None)
    stock.assert_called_once()
    for name, data in (('disk', b'root'), ('disk.local', b'ephemeral')):
        with open(os.path.join(target, '%s_%s' % (inst.uuid, name)),
                  'rb') as f:
            assert f.read() == data
    assert not os.path.exists(staged)
