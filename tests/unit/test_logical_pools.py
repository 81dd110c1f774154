"""lvm on storage pools: a logical ``nova-disks-pool`` on images_volume_group.

LVM cannot run on these machines (no device-mapper), so these tests use
libvirt's embedded test driver (``test:///default``), which keeps logical
pools and their volumes in memory: they check the pool definitions, the
volume XML, naming, the flow of the driver and the records, not data. The
test driver's ``createXMLFrom`` only clones within one pool, so the copy
from the image cache pool into the logical pool is asserted as a call
(``StoragePools.copy``); tests/real checks ``createXMLFrom`` for real on
dir pools.
"""

import uuid
from unittest import mock

import pytest
from lxml import etree
from nova import objects
from nova.tests import fixtures as nova_fixtures
from nova.virt import fake
from nova.virt.libvirt import driver as stock_driver

from nova_imgtype import exception
from nova_imgtype.virt.libvirt import driver as imgtype_driver
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import pools
from nova_imgtype.virt.libvirt import storage
from nova_imgtype_testing import drivers

STOCK = stock_driver.LibvirtDriver
VG = 'nova-vg'


@pytest.fixture
def drv(conf, test_conn):
    conf.config(group='libvirt', images_type='lvm', images_volume_group=VG,
                use_storage_pools=True, images_type_mapping='qcow2:qcow2')
    fix = nova_fixtures.LibvirtFixture()
    fix.setUp()
    driver = imgtype_driver.LibvirtDriver(fake.FakeVirtAPI(), False)
    drivers.use_pools(driver, pools.StoragePools(
        lambda: test_conn))
    with mock.patch.object(STOCK, 'init_host'), \
            mock.patch.object(objects.InstanceList, 'get_by_host',
                              return_value=[]):
        driver.init_host('host1')
    yield driver
    fix.cleanUp()


def _instance(**sysmeta):
    inst = objects.Instance(uuid=str(uuid.uuid4()), system_metadata=sysmeta,
                            task_state=None)
    inst.save = mock.Mock()
    return inst


def _pool_xml(pool):
    return etree.fromstring(pool.XMLDesc(0))


def test_host_gets_a_logical_pool_and_a_dir_pool_for_the_mapping(drv, conf):
    logical = drv._pools.get(pool_specs.DISKS_POOL)
    xml = _pool_xml(logical)
    assert xml.get('type') == 'logical'
    assert xml.findtext('source/name') == VG
    assert xml.find('source/format').get('type') == 'lvm2'
    assert xml.findtext('target/path') == '/dev/' + VG
    # qcow2:qcow2 needs files: the extra dir pool, named by its type.
    extra = drv._pools.get(pool_specs.DISKS_POOL + '-dir')
    assert _pool_xml(extra).findtext('target/path') == (
        conf.conf.instances_path + '/disks')
    assert logical.autostart() and extra.autostart()


def test_new_instances_record_the_pool_of_their_backend(drv):
    lvm = drv._resolver.decide('raw')
    assert (lvm.backend, lvm.storage, lvm.pool) == ('lvm', 'pools',
                                                    pool_specs.DISKS_POOL)
    qcow2 = drv._resolver.decide('qcow2')
    assert (qcow2.backend, qcow2.pool) == ('qcow2',
                                           pool_specs.DISKS_POOL + '-dir')


def test_lvm_disk_is_a_whole_logical_volume_copied_from_the_template(
        drv, tmp_path):
    inst = _instance()
    drv._resolver.record(inst, drv._resolver.decide('raw'))
    disk = drv.image_backend.by_name(inst, 'disk')
    assert isinstance(disk, storage.LibvirtStorage)
    assert disk.path == '/dev/%s/%s_disk' % (VG, inst.uuid)
    base_pool = drv._pools.get(pool_specs.BASE_POOL)
    base = tmp_path / '_base' / 'tmpl'
    base.write_bytes(b'\0' * 1024)
    template = base_pool.createXML(
        '<volume><name>tmpl</name><capacity>1048576</capacity></volume>', 0)
    with mock.patch.object(pools.StoragePools, 'refresh'), \
            mock.patch.object(pools.StoragePools, 'copy') as copy, \
            mock.patch('nova.virt.images.get_image_format',
                       return_value=mock.MagicMock(
                           __str__=lambda _: 'raw')), \
            mock.patch('nova.virt.libvirt.imagebackend.'
                       '_update_utime_ignore_eacces'), \
            mock.patch.object(disk, 'verify_base_size'):
        disk.create_image(mock.Mock(), str(base), 2 * 1024 ** 3)
    (pool, name, source, source_format, fmt, capacity), kw = copy.call_args
    assert source_format == 'raw'     # as Nova's inspector read it
    assert pool.name() == pool_specs.DISKS_POOL
    assert name == '%s_disk' % inst.uuid
    assert source.name() == template.name()
    # No format element (an LV is raw) and allocated whole (a thin
    # logical volume would be an LVM snapshot).
    assert (fmt, capacity, kw['preallocate']) == ('', 2 * 1024 ** 3, True)


def test_volume_xml_of_a_whole_logical_volume(drv):
    logical = drv._pools.get(pool_specs.DISKS_POOL)
    xml = pool_specs._volume_xml('u_disk', '', 4096, preallocate=True)
    vol = logical.createXML(xml, 0)
    parsed = etree.fromstring(vol.XMLDesc(0))
    assert parsed.findtext('capacity') == parsed.findtext('allocation')
    assert etree.fromstring(xml).find('target/format') is None
    assert vol.path() == '/dev/%s/u_disk' % VG


def test_guest_disk_is_a_volume_of_the_logical_pool(drv):
    inst = _instance()
    drv._resolver.record(inst, drv._resolver.decide('raw'))
    drv._pools.get(pool_specs.DISKS_POOL).createXML(
        pool_specs._volume_xml(inst.uuid + '_disk', '', 4096,
                               preallocate=True), 0)
    disk = drv.image_backend.by_name(
        inst, 'disk', disk_info_mapping={'bus': 'virtio', 'dev': 'vda',
                                         'type': 'disk'})
    cfg = disk.libvirt_info('none', {})
    xml = etree.fromstring(cfg.to_xml())
    assert xml.get('type') == 'volume'
    assert dict(xml.find('source').attrib) == {
        'pool': pool_specs.DISKS_POOL, 'volume': inst.uuid + '_disk'}
    assert xml.find('driver').get('type') == 'raw'


def test_legacy_lvm_instance_is_taken_over_without_moving_data(drv):
    # Stock's Lvm backend made {uuid}_disk in the same volume group: the
    # logical pool lists it, nothing moves.
    inst = _instance(imgtype_backend='lvm')
    logical = drv._pools.get(pool_specs.DISKS_POOL)
    lv = logical.createXML(pool_specs._volume_xml(
        inst.uuid + '_disk', '', 4096, preallocate=True), 0)
    assert drv._disks.can_move_to_pools(inst)
    drv._disks.move_to_pools(inst)
    assert inst.system_metadata['imgtype_storage'] == 'pools'
    assert inst.system_metadata['imgtype_pool'] == pool_specs.DISKS_POOL
    assert drv.image_backend.by_name(inst, 'disk').exists()
    assert logical.storageVolLookupByName(inst.uuid + '_disk').key() == (
        lv.key())


def test_cleanup_deletes_the_logical_volumes_of_the_instance(drv):
    inst = _instance()
    other = _instance()
    drv._resolver.record(inst, drv._resolver.decide('raw'))
    logical = drv._pools.get(pool_specs.DISKS_POOL)
    for owner in (inst, other):
        for name in ('disk', 'disk.local'):
            logical.createXML(pool_specs._volume_xml(
                '%s_%s' % (owner.uuid, name), '', 4096, preallocate=True), 0)
    with mock.patch.object(STOCK, '_cleanup'):
        drv._cleanup(None, inst, None, cleanup_instance_disks=True)
    names = [v.name() for v in logical.listAllVolumes(0)]
    assert not [n for n in names if n.startswith(inst.uuid)]
    assert len([n for n in names if n.startswith(other.uuid)]) == 2


def test_logical_pool_on_another_volume_group_is_a_conflict(conf,
                                                            test_conn):
    sp = pools.StoragePools(lambda: test_conn)
    sp.ensure(pool_specs.PoolSpec(pool_specs.DISKS_POOL, 'logical',
                                  '/dev/other', source='other'))
    conf.config(group='libvirt', images_type='lvm', images_volume_group=VG)
    with pytest.raises(exception.PoolConflict) as e:
        sp.ensure(pool_specs.disks_pool_spec(conf.conf, 'lvm'))
    assert 'volume group other' in str(e.value)
    assert 'volume group %s' % VG in str(e.value)
