"""InstanceDisks alone: no driver, pools on libvirt's embedded test
driver, the instance's record as a resolver reads it."""

import os
import uuid

import nova.conf
import pytest
from nova import objects

from nova_imgtype import exception
from nova_imgtype import record as record_mod
from nova_imgtype.virt.libvirt import imagebackend
from nova_imgtype.virt.libvirt import instance_disks
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import pools
from nova_imgtype.virt.libvirt import resolver as resolver_mod

CONF = nova.conf.CONF
objects.register_all()


@pytest.fixture
def disks(conf, test_conn):
    conf.config(group='libvirt', images_type='qcow2',
                use_storage_pools=True)
    storage = pools.StoragePools(lambda: test_conn)
    resolver = resolver_mod.BackendResolver(CONF)
    backend = imagebackend.Backend(True, resolver.decision_for, CONF,
                                   pools=storage)
    for spec in pool_specs.default_specs(CONF.instances_path):
        storage.ensure(spec, autostart=False)
    return instance_disks.InstanceDisks(resolver, storage, backend, CONF)


def _pool_instance(pool=pool_specs.DISKS_POOL, location=''):
    sysmeta = {'imgtype_backend': 'qcow2', 'imgtype_storage': 'pools',
               'imgtype_pool': pool}
    if location:
        sysmeta[record_mod.POOL_LOCATION] = location
    return objects.Instance(uuid=str(uuid.uuid4()), system_metadata=sysmeta,
                            image_ref='img')


def _volumes(disks, inst, names):
    pool = disks.pools.get(pool_specs.DISKS_POOL)
    for name in names:
        disks.pools.create_empty(pool, pool_specs.volume_name(inst.uuid, name),
                                 'raw', 1 << 20)
    return pool


def test_an_instances_volumes_go_and_no_other(disks):
    mine, other = _pool_instance(), _pool_instance()
    pool = _volumes(disks, mine, ('disk', 'disk.rescue'))
    _volumes(disks, other, ('disk',))
    disks.delete_pool_volumes(mine, suffix='.rescue')
    assert sorted(v.name() for v in disks.pools.volumes(pool)) == sorted(
        [pool_specs.volume_name(mine.uuid, 'disk'),
         pool_specs.volume_name(other.uuid, 'disk')])
    disks.delete_pool_volumes(mine)
    assert [v.name() for v in disks.pools.volumes(pool)] == [
        pool_specs.volume_name(other.uuid, 'disk')]


def test_a_pool_that_is_gone_deletes_nothing(disks):
    # "Not found" never means "delete": nothing else is looked for.
    gone = _pool_instance(pool='no-such-pool')
    disks.delete_pool_volumes(gone)


def test_disks_in_a_ceph_pool_this_host_does_not_reach_are_not_here(disks):
    decision = disks._resolver.decision_for(_pool_instance(
        pool='vms-elsewhere', location='rbd:vms@192.0.2.1:6789'))
    with pytest.raises(exception.StorageUnavailable, match='192.0.2.1'):
        disks.pools_here(decision)


def test_a_dir_pool_of_another_name_elsewhere_is_this_hosts_pool(disks):
    decision = disks._resolver.decision_for(_pool_instance(
        pool='their-pool', location='dir:/elsewhere/disks'))
    here = disks.pools_here(decision)
    assert here.pool == pool_specs.DISKS_POOL


def test_templates_in_use_need_no_libvirt_when_no_volume_is_there(disks):
    class Unreachable:
        def dir_pool_at(self, directory):
            raise AssertionError('libvirt asked')

    disks.pools = Unreachable()
    assert disks.pool_backing_paths() == set()


def test_volumes_with_no_pool_over_them_keep_every_template(disks,
                                                            test_conn):
    # Files in <instances_path>/disks, and no pool: nothing can be said of
    # their templates, and the image cache manager removes nothing.
    for pool in test_conn.listAllStoragePools(0):
        if pool.name() == pool_specs.DISKS_POOL:
            pool.destroy()
            pool.undefine()
    directory = pool_specs.dir_disks_location(CONF)
    os.makedirs(directory, exist_ok=True)
    open(os.path.join(directory, str(uuid.uuid4()) + '_disk'), 'w').close()
    with pytest.raises(exception.StorageUnavailable, match=directory):
        disks.pool_backing_paths()
