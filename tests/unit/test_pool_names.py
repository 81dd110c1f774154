"""An instance landing on a host whose pool of its backend has another name
(issue 12, defect 4: "a revert between hosts with different pools keeps the
destination's pool name; evacuation has the same pool-name problem").

Host pools on libvirt's embedded test driver; stock's methods mocked.
"""

import os
from unittest import mock

from nova.compute import vm_states

from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import resolver as resolver_mod
from tests.unit.test_driver import STOCK
from tests.unit.test_driver import _instance
from tests.unit.test_driver import make_driver  # noqa: F401 - fixture
from tests.unit.test_driver import test_pools  # noqa: F401 - fixture

#: The dir pool of a host whose images_type is lvm: the instance was there.
ELSEWHERE = pool_specs.DISKS_POOL + '-dir'


def _pool_host(make_driver, test_pools):  # noqa: F811
    drv = test_pools(make_driver(images_type='qcow2',
                                 use_storage_pools=True))
    with mock.patch.object(STOCK, 'init_host'):
        drv.init_host('host1')
    return drv


def test_revert_puts_volumes_back_into_this_hosts_pool(
        make_driver, test_pools):  # noqa: F811
    drv = _pool_host(make_driver, test_pools)
    # Recorded by the destination, whose dir pool has another name.
    inst = _instance(imgtype_backend='qcow2', imgtype_storage='pools',
                     imgtype_pool=ELSEWHERE)
    inst.host = 'host1'
    backup = os.path.join(drv._resolver._conf.instances_path,
                          inst.uuid + '_resize')
    os.makedirs(backup)
    with open(os.path.join(backup, '%s_disk' % inst.uuid), 'wb') as f:
        f.write(b'the source volume, kept for a revert')
    with mock.patch.object(STOCK, 'finish_revert_migration'), \
            mock.patch('nova.virt.libvirt.utils.get_instance_path',
                       return_value=backup[:-len('_resize')]):
        drv.finish_revert_migration(None, inst, None, None)
    got = drv._resolver.recorded(inst)
    assert (got.storage, got.pool) == (resolver_mod.POOLS,
                                       pool_specs.DISKS_POOL)
    inst.save.assert_called()
    disks = drv._pools.get(pool_specs.DISKS_POOL)
    target = pool_specs.pool_target(disks)
    with open(os.path.join(target, '%s_disk' % inst.uuid), 'rb') as f:
        assert f.read() == b'the source volume, kept for a revert'


def test_evacuated_instance_uses_this_hosts_pool(
        make_driver, test_pools):  # noqa: F811
    drv = _pool_host(make_driver, test_pools)
    inst = _instance(vm_state=vm_states.ACTIVE, imgtype_backend='qcow2',
                     imgtype_storage='pools', imgtype_pool=ELSEWHERE)
    seen = []
    with mock.patch.object(
            STOCK, 'spawn',
            side_effect=lambda *a, **k: seen.append(
                drv.image_backend.by_name(inst, 'disk').pool_name)):
        drv.spawn(None, inst, mock.Mock(), [], None, {})
    assert seen == [pool_specs.DISKS_POOL]
    assert drv._resolver.recorded(inst).pool == pool_specs.DISKS_POOL


def test_rebuild_keeps_a_recorded_pool_this_host_has(
        make_driver, test_pools):  # noqa: F811
    drv = _pool_host(make_driver, test_pools)
    drv._pools.ensure(pool_specs.PoolSpec(ELSEWHERE, 'dir', os.path.join(
        drv._resolver._conf.instances_path, 'other-disks')))
    inst = _instance(vm_state=vm_states.ACTIVE, imgtype_backend='qcow2',
                     imgtype_storage='pools', imgtype_pool=ELSEWHERE)
    with mock.patch.object(STOCK, 'spawn'):
        drv.spawn(None, inst, mock.Mock(), [], None, {})
    assert drv._resolver.recorded(inst).pool == ELSEWHERE


def test_init_host_records_where_an_earlier_releases_pool_is(
        make_driver, test_pools):  # noqa: F811
    """A pool instance recorded by pool name only (an earlier release) gets
    its pool's storage recorded at the start of its host, when that host's
    pool of the name holds its root volume; one whose volume is not there
    keeps its record as it was."""
    from nova import objects

    drv = test_pools(make_driver(images_type='qcow2',
                                 use_storage_pools=True))
    with mock.patch.object(STOCK, 'init_host'):
        drv.init_host('host1')
    disks = drv._pools.get(pool_specs.DISKS_POOL)
    here = _instance(imgtype_backend='qcow2', imgtype_storage='pools',
                     imgtype_pool=pool_specs.DISKS_POOL)
    drv._pools.create_empty(disks, pool_specs.volume_name(here.uuid, 'disk'),
                            'qcow2', 1024 * 1024)
    elsewhere = _instance(imgtype_backend='qcow2', imgtype_storage='pools',
                          imgtype_pool=pool_specs.DISKS_POOL)
    with mock.patch.object(STOCK, 'init_host'), \
            mock.patch.object(objects.InstanceList, 'get_by_host',
                              return_value=[here, elsewhere]):
        drv.init_host('host1')
    assert here.system_metadata['imgtype_pool_location'] == (
        'dir:%s' % pool_specs.pool_target(disks))
    here.save.assert_called()
    assert drv._resolver.recorded(here).pool == pool_specs.DISKS_POOL
    assert 'imgtype_pool_location' not in elsewhere.system_metadata
    elsewhere.save.assert_not_called()
