"""The driver's per-instance overrides.

libvirt is Nova's fakelibvirt (``LibvirtFixture``); where a test is about
what our override decides, the stock method it delegates to is mocked and
the test asserts what it was called with.
"""

import os
import uuid
from unittest import mock

import nova.conf
import os_traits
import pytest
from nova import exception as nova_exception
from nova import objects
from nova.compute import provider_tree
from nova.compute import vm_states
from nova.tests import fixtures as nova_fixtures
from nova.virt import fake
from nova.virt.libvirt import driver as stock_driver
from nova.virt.libvirt import imagecache as nova_imagecache
from nova.virt.libvirt import utils as libvirt_utils
from oslo_serialization import jsonutils

from nova_imgtype import exception
from nova_imgtype import record as record_mod
from nova_imgtype import traits
from nova_imgtype.virt.libvirt import cold_move
from nova_imgtype.virt.libvirt import driver as imgtype_driver
from nova_imgtype.virt.libvirt import imagecache
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype_testing import drivers

CONF = nova.conf.CONF
objects.register_all()
STOCK = stock_driver.LibvirtDriver
IMAGE_ID = '7f0b2b8e-6f0c-4d7e-9b1a-2f1f4b3c9d10'


@pytest.fixture
def make_driver(conf):
    fix = nova_fixtures.LibvirtFixture()
    fix.setUp()

    def make(**libvirt_flags):
        conf.config(group='libvirt', **libvirt_flags)
        return imgtype_driver.LibvirtDriver(fake.FakeVirtAPI(), False)

    yield make
    fix.cleanUp()


def _instance(vm_state=vm_states.ACTIVE, **sysmeta):
    inst = objects.Instance(uuid=str(uuid.uuid4()), system_metadata=sysmeta,
                            image_ref=IMAGE_ID, task_state=None,
                            vm_state=vm_state,
                            migration_context=objects.MigrationContext(
                                migration_id=7))
    inst.save = mock.Mock()
    return inst


def test_stock_loader_finds_the_driver(make_driver):
    from nova.virt import driver as virt_driver
    with mock.patch.object(CONF, 'compute_driver', 'imgtype.LibvirtDriver'):
        drv = virt_driver.load_compute_driver(fake.FakeVirtAPI())
    assert isinstance(drv, imgtype_driver.LibvirtDriver)


def test_capabilities_follow_the_mapping(make_driver, conf):
    conf.config(force_raw_images=False)
    drv = make_driver(images_type='rbd', use_storage_pools=False)
    assert drv.capabilities['supports_image_type_qcow2'] is False
    drv = make_driver(images_type='rbd', images_type_mapping='qcow2:qcow2')
    assert drv.capabilities['supports_image_type_qcow2'] is True
    assert drv.capabilities['supports_image_type_raw'] is True
    assert drv.capabilities['supports_image_type_vmdk'] is False


def test_stats_list_the_image_type_traits_placement_gets(make_driver, conf):
    """What the compute node's stats tell ImageTypeSupportFilter is what
    placement gets: stock's COMPUTE_IMAGE_TYPE_* (from the capabilities,
    the exclude list applied) and our native traits; stock's own stats
    kept."""
    conf.config(force_raw_images=True)
    conf.config(image_type_exclude_list=['iso'], group='compute')
    drv = make_driver(images_type='flat', use_storage_pools=False,
                      images_type_mapping='qcow2:qcow2')
    with mock.patch.object(STOCK, 'get_available_resource',
                           return_value={'stats': {'uptime': '1 day'},
                                         'vcpus': 2}):
        resources = drv.get_available_resource('host1')
    assert resources['vcpus'] == 2
    assert resources['stats']['uptime'] == '1 day'
    listed = traits.from_stats(resources['stats'])
    tree = provider_tree.ProviderTree()
    tree.new_root('host1', uuid.uuid4())
    with mock.patch.object(STOCK, 'update_provider_tree'):
        drv.update_provider_tree(tree, 'host1')
    in_placement = set(tree.data('host1').traits) | {
        t for t, ok in drv.capabilities_as_traits().items() if ok}
    assert listed == {t for t in in_placement if traits.is_image_type(t)}
    assert {'COMPUTE_IMAGE_TYPE_QCOW2', 'COMPUTE_IMAGE_TYPE_VMDK',
            'CUSTOM_IMGTYPE_NATIVE_QCOW2'} <= listed
    assert 'COMPUTE_IMAGE_TYPE_ISO' not in listed             # excluded
    assert 'CUSTOM_IMGTYPE_NATIVE_VMDK' not in listed         # converted


def test_native_traits_follow_the_config_of_the_start(make_driver, conf):
    conf.config(force_raw_images=True)
    conf.config(image_type_exclude_list=['iso'], group='compute')
    drv = make_driver(images_type='flat', use_storage_pools=False,
                      images_type_mapping='qcow2:qcow2')
    tree = provider_tree.ProviderTree()
    tree.new_root('host1', uuid.uuid4())
    with mock.patch.object(STOCK, 'update_provider_tree'):
        drv.update_provider_tree(tree, 'host1')
    traits = tree.data('host1').traits
    assert {'CUSTOM_IMGTYPE_NATIVE_QCOW2', 'CUSTOM_IMGTYPE_NATIVE_RAW'} <= (
        traits)
    assert 'CUSTOM_IMGTYPE_NATIVE_VMDK' not in traits     # converted
    assert 'CUSTOM_IMGTYPE_NATIVE_ISO' not in traits      # excluded
    # A config change is seen at the next start, not in between.
    conf.config(images_type_mapping='', group='libvirt')
    with mock.patch.object(STOCK, 'update_provider_tree'):
        drv.update_provider_tree(tree, 'host1')
    assert 'CUSTOM_IMGTYPE_NATIVE_QCOW2' in tree.data('host1').traits
    drv = make_driver(images_type='flat', use_storage_pools=False)
    with mock.patch.object(STOCK, 'update_provider_tree'):
        drv.update_provider_tree(tree, 'host1')
    assert 'CUSTOM_IMGTYPE_NATIVE_QCOW2' not in tree.data('host1').traits
    assert 'CUSTOM_IMGTYPE_NATIVE_RAW' in tree.data('host1').traits


def test_init_host_refuses_a_backend_the_host_cannot_serve(make_driver):
    drv = make_driver(images_type_mapping='raw:lvm', images_volume_group=None)
    with mock.patch.object(STOCK, 'init_host') as stock_init:
        with pytest.raises(exception.InvalidImagesTypeMapping,
                           match="'raw:lvm'.*images_volume_group"):
            drv.init_host('host1')
    stock_init.assert_not_called()


def test_driver_refuses_to_load_with_malformed_mapping(make_driver, conf):
    conf.load_raw_values(group='libvirt', images_type_mapping='raw:lvm:x')
    with pytest.raises(ValueError, match="'raw:lvm:x'"):
        make_driver()


def test_spawn_records_backend_then_spawns(make_driver):
    drv = make_driver(images_type='flat', images_type_mapping='qcow2:qcow2')
    inst = _instance()
    meta = objects.ImageMeta.from_dict({'disk_format': 'qcow2'})
    with mock.patch.object(STOCK, 'spawn') as stock_spawn:
        stock_spawn.side_effect = lambda *a, **k: (
            inst.save.assert_called_once_with())
        drv.spawn(None, inst, meta, [], None, {})
    stock_spawn.assert_called_once()
    assert inst.system_metadata['imgtype_backend'] == 'qcow2'
    assert inst.system_metadata['imgtype_native_formats'] == 'qcow2'


def test_a_build_recorded_before_spawn_is_not_saved_again(
        make_driver, test_pools):
    # Issue 15: prepare_for_spawn records the decision, which the compute
    # manager saves with the instance before spawn: spawn makes the same
    # decision and has nothing to save (one conductor round trip less).
    drv = test_pools(make_driver(images_type='flat',
                                 images_type_mapping='qcow2:qcow2'))
    inst = _instance(vm_state=vm_states.BUILDING, image_disk_format='qcow2')
    with mock.patch.object(STOCK, 'prepare_for_spawn') as stock_prepare:
        drv.prepare_for_spawn(inst)
    stock_prepare.assert_called_once_with(inst)
    assert inst.system_metadata['imgtype_backend'] == 'qcow2'
    assert inst.system_metadata['imgtype_image_ref'] == IMAGE_ID
    assert 'system_metadata' in inst.obj_what_changed()
    inst.obj_reset_changes()                  # the manager's save
    meta = objects.ImageMeta.from_dict({'disk_format': 'qcow2'})
    with mock.patch.object(STOCK, 'spawn') as stock_spawn:
        drv.spawn(None, inst, meta, [], None, {})
    stock_spawn.assert_called_once()
    inst.save.assert_not_called()
    assert drv._resolver.recorded(inst) == drv._resolver.decide('qcow2')


def test_a_build_whose_root_disk_is_a_volume_is_saved_in_spawn(
        make_driver, test_pools):
    # The image's format was recorded before the block devices were known;
    # the root disk is a volume: spawn records images_type and saves it
    # before stock's spawn makes any disk.
    drv = test_pools(make_driver(images_type='flat',
                                 images_type_mapping='qcow2:qcow2'))
    inst = _instance(vm_state=vm_states.BUILDING, image_disk_format='qcow2')
    with mock.patch.object(STOCK, 'prepare_for_spawn'):
        drv.prepare_for_spawn(inst)
    inst.obj_reset_changes()
    meta = objects.ImageMeta.from_dict({'disk_format': 'qcow2'})
    with mock.patch.object(STOCK, 'spawn') as stock_spawn, \
            mock.patch.object(drv, '_is_booted_from_volume',
                              return_value=True):
        stock_spawn.side_effect = lambda *a, **k: (
            inst.save.assert_called_once_with())
        drv.spawn(None, inst, meta, [], None, {})
    stock_spawn.assert_called_once()
    assert inst.system_metadata['imgtype_backend'] == 'flat'


def test_prepare_for_spawn_records_nothing_outside_a_build(make_driver):
    drv = make_driver(images_type='flat', images_type_mapping='qcow2:qcow2')
    inst = _instance(image_disk_format='qcow2')
    with mock.patch.object(STOCK, 'prepare_for_spawn') as stock_prepare:
        drv.prepare_for_spawn(inst)
    stock_prepare.assert_called_once_with(inst)
    assert 'imgtype_backend' not in inst.system_metadata


def test_spawn_boot_from_volume_records_images_type(make_driver):
    drv = make_driver(images_type='flat', images_type_mapping='qcow2:qcow2')
    inst = _instance()
    meta = objects.ImageMeta.from_dict({'disk_format': 'qcow2'})
    bdi = {'block_device_mapping': [{'boot_index': 0,
                                     'mount_device': '/dev/vda'}]}
    with mock.patch.object(STOCK, 'spawn'), \
            mock.patch.object(drv, '_is_booted_from_volume',
                              return_value=True):
        drv.spawn(None, inst, meta, [], None, {}, block_device_info=bdi)
    assert inst.system_metadata['imgtype_backend'] == 'flat'
    assert inst.system_metadata['imgtype_native_formats'] == ''


def test_rescheduled_build_decides_again_on_the_new_host(make_driver):
    """Issue 12, defect 3: the first host recorded its decision (a pool of
    its own, lvm) before the build failed there; this host has no volume
    group and no such pool, and decides for itself."""
    drv = make_driver(images_type='flat', images_type_mapping='qcow2:qcow2',
                      use_storage_pools=False, images_volume_group=None)
    inst = _instance(vm_state=vm_states.BUILDING, imgtype_backend='lvm',
                     imgtype_native_formats='raw', imgtype_storage='pools',
                     imgtype_pool='nova-disks-pool-logical')
    meta = objects.ImageMeta.from_dict({'disk_format': 'qcow2'})
    with mock.patch.object(STOCK, 'spawn') as stock_spawn:
        drv.spawn(None, inst, meta, [], None, {})
    stock_spawn.assert_called_once()
    assert drv._resolver.recorded(inst) == drv._resolver.decide('qcow2')
    assert 'imgtype_pool' not in inst.system_metadata
    inst.save.assert_called_once_with()


def test_rebuild_keeps_record_and_refuses_unserved_backend(make_driver):
    drv = make_driver(images_type='qcow2', images_volume_group=None)
    inst = _instance(imgtype_backend='lvm', imgtype_native_formats='raw')
    meta = objects.ImageMeta.from_dict({'disk_format': 'raw'})
    with mock.patch.object(STOCK, 'spawn') as stock_spawn:
        with pytest.raises(exception.BackendNotServedByHost,
                           match='images_volume_group'):
            drv.spawn(None, inst, meta, [], None, {})
    stock_spawn.assert_not_called()
    assert inst.system_metadata['imgtype_backend'] == 'lvm'


def test_rebuild_of_unserved_storage_is_refused_before_destroying(
        make_driver):
    """Issue 29: a pool instance rebuilt after use_storage_pools was turned
    off. Stock's rebuild destroys the disks first; spawn then refused the
    instance (ERROR, no disks). Refused before stock's rebuild starts."""
    drv = make_driver(images_type='qcow2', use_storage_pools=False)
    inst = _instance(imgtype_backend='qcow2', imgtype_storage='pools',
                     imgtype_pool='nova-disks-pool',
                     imgtype_native_formats='qcow2')
    meta = objects.ImageMeta.from_dict({'disk_format': 'qcow2'})
    with mock.patch.object(STOCK, 'destroy') as destroy, \
            mock.patch.object(STOCK, 'spawn') as spawn:
        with pytest.raises(nova_exception.InstanceFaultRollback) as e:
            drv.rebuild(None, inst, meta, [], None, {}, [], None, None)
    assert isinstance(e.value.inner_exception,
                      exception.BackendNotServedByHost)
    assert 'use_storage_pools' in str(e.value.inner_exception)
    destroy.assert_not_called()
    spawn.assert_not_called()
    assert inst.system_metadata['imgtype_storage'] == 'pools'


def test_rebuild_of_served_storage_is_stocks(make_driver):
    drv = make_driver(images_type='qcow2', use_storage_pools=True)
    inst = _instance(imgtype_backend='qcow2', imgtype_storage='pools',
                     imgtype_pool='nova-disks-pool',
                     imgtype_native_formats='qcow2')
    meta = objects.ImageMeta.from_dict({'disk_format': 'qcow2'})
    with pytest.raises(NotImplementedError):
        drv.rebuild(None, inst, meta, [], None, {}, [], None, None)


@pytest.mark.parametrize('sysmeta,fmt,native', [
    ({'imgtype_backend': 'qcow2', 'imgtype_native_formats': 'qcow2'},
     'qcow2', True),
    ({'imgtype_backend': 'qcow2', 'imgtype_native_formats': ''},
     'qcow2', False),                  # unmapped: stock conversion
    ({}, 'qcow2', False),              # legacy instance
    ({'imgtype_backend': 'flat', 'imgtype_native_formats': 'raw'},
     'raw', False),                    # raw is the same bytes: stock file
])
def test_fetch_goes_native_only_for_native_formats(make_driver, sysmeta,
                                                   fmt, native):
    drv = make_driver(images_type='qcow2')
    inst = _instance(image_disk_format=fmt, **sysmeta)
    stock_name = nova_imagecache.get_cache_fname(IMAGE_ID)
    with mock.patch.object(STOCK, '_try_fetch_image_cache') as stock, \
            mock.patch.object(drv._template_handler,
                              'fetch_image') as fetch_image:
        drv._try_fetch_image_cache(mock.sentinel.image,
                                   libvirt_utils.fetch_image, None,
                                   stock_name, IMAGE_ID, inst, 1)
        (_, fetch_func, _, filename, *_), _ = stock.call_args
        fetch_func(None, '/target', IMAGE_ID)
    # Every template comes through the handler; native ones unconverted
    # under their own name.
    if native:
        assert filename == imagecache.native_cache_fname(IMAGE_ID, fmt)
        fetch_image.assert_called_once_with(None, IMAGE_ID, '/target', fmt,
                                            None)
    else:
        assert filename == stock_name
        fetch_image.assert_called_once_with(None, IMAGE_ID, '/target', None,
                                            None)


def test_fetch_of_a_native_backing_file_name_stays_native(make_driver):
    """Block migration names the base after the disk's backing file."""
    drv = make_driver(images_type='qcow2')
    inst = _instance(imgtype_backend='qcow2',
                     imgtype_native_formats='qcow2')
    name = imagecache.native_cache_fname(IMAGE_ID, 'qcow2')
    with mock.patch.object(STOCK, '_try_fetch_image_cache') as stock:
        drv._try_fetch_image_cache(mock.sentinel.image,
                                   libvirt_utils.fetch_image, None, name,
                                   IMAGE_ID, inst, 1)
    (_, fetch_func, _, filename, *_), _ = stock.call_args
    assert filename == name and fetch_func is not libvirt_utils.fetch_image


@pytest.mark.parametrize('name', [
    # Another image's cache name, or any name a guest wrote as the backing
    # file of its disk: a live block migration's destination would fetch
    # this instance's image under it.
    nova_imagecache.get_cache_fname('another-image'),
    'anything-the-guest-chose'])
def test_an_image_is_fetched_under_its_own_cache_name_only(make_driver,
                                                           name):
    """Issue 27, 1."""
    drv = make_driver(images_type='qcow2')
    inst = _instance(imgtype_backend='qcow2', imgtype_native_formats='')
    with mock.patch.object(STOCK, '_try_fetch_image_cache') as stock, \
            pytest.raises(nova_exception.InvalidDiskInfo,
                          match='%s is not a cache name of image %s' % (
                              name, IMAGE_ID)):
        drv._try_fetch_image_cache(mock.sentinel.image,
                                   libvirt_utils.fetch_image, None, name,
                                   IMAGE_ID, inst, 1)
    assert not stock.called


def test_the_root_template_is_recorded_and_followed(make_driver):
    """Issue 27: the template each disk was made from is recorded; a move's
    destination fetches the instance's image under that name only."""
    drv = make_driver(images_type='qcow2')
    inst = _instance(imgtype_backend='qcow2', imgtype_native_formats='qcow2',
                     image_disk_format='qcow2')
    native = imagecache.native_cache_fname(IMAGE_ID, 'qcow2')
    stock_name = nova_imagecache.get_cache_fname(IMAGE_ID)
    with mock.patch.object(STOCK, '_try_fetch_image_cache') as stock:
        drv._try_fetch_image_cache(mock.sentinel.image,
                                   libvirt_utils.fetch_image, None,
                                   stock_name, IMAGE_ID, inst, 1)
    assert stock.call_args[0][3] == native
    assert record_mod.template(inst.system_metadata) == (IMAGE_ID, native)
    # The same name again (a move's destination): fetched.
    with mock.patch.object(STOCK, '_try_fetch_image_cache') as stock:
        drv._try_fetch_image_cache(mock.sentinel.image,
                                   libvirt_utils.fetch_image, None,
                                   native, IMAGE_ID, inst, 1)
    assert stock.called
    # Another cache name of the same image, as a disk's backing file may
    # say (here the converted one): refused, the record kept.
    with mock.patch.object(STOCK, '_try_fetch_image_cache') as stock, \
            pytest.raises(nova_exception.InvalidDiskInfo,
                          match='not the one .* made from, %s' % native):
        drv._try_fetch_image_cache(mock.sentinel.image,
                                   libvirt_utils.fetch_image, None,
                                   stock_name + '_qcow2x', IMAGE_ID, inst, 1)
    assert not stock.called
    assert record_mod.template(inst.system_metadata) == (IMAGE_ID, native)


def test_a_rescue_image_is_not_recorded_as_the_root_template(make_driver):
    drv = make_driver(images_type='qcow2')
    inst = _instance(imgtype_backend='qcow2', imgtype_native_formats='')
    rescue = str(uuid.uuid4())
    with mock.patch.object(STOCK, '_try_fetch_image_cache'):
        drv._try_fetch_image_cache(
            mock.sentinel.image, libvirt_utils.fetch_image, None,
            nova_imagecache.get_cache_fname(rescue), rescue, inst, 1)
    assert record_mod.template(inst.system_metadata) is None
    # A rebuild to another image records the new image's template.
    inst.system_metadata[record_mod.TEMPLATE] = '%s:%s' % (
        rescue, nova_imagecache.get_cache_fname(rescue))
    with mock.patch.object(STOCK, '_try_fetch_image_cache'):
        drv._try_fetch_image_cache(
            mock.sentinel.image, libvirt_utils.fetch_image, None,
            nova_imagecache.get_cache_fname(IMAGE_ID), IMAGE_ID, inst, 1)
    assert record_mod.template(inst.system_metadata) == (
        IMAGE_ID, nova_imagecache.get_cache_fname(IMAGE_ID))


@pytest.mark.parametrize('backend,cleaner', [('lvm', '_cleanup_lvm'),
                                             ('rbd', '_cleanup_rbd')])
def test_cleanup_removes_disks_of_the_instance_backend(make_driver, backend,
                                                       cleaner):
    drv = make_driver(images_type='qcow2')
    inst = _instance(imgtype_backend=backend)
    with mock.patch.object(STOCK, '_cleanup') as stock, \
            mock.patch.object(drv, cleaner) as clean:
        drv._cleanup(None, inst, None, cleanup_instance_disks=True)
    clean.assert_called_once()
    stock.assert_called_once()
    with mock.patch.object(STOCK, '_cleanup'), \
            mock.patch.object(drv, cleaner) as clean:
        drv._cleanup(None, inst, None, cleanup_instance_disks=False)
    clean.assert_not_called()


def test_provider_tree_gets_backend_traits_and_loses_stale_ones(
        make_driver):
    drv = make_driver(images_type='qcow2', images_volume_group=None)
    tree = provider_tree.ProviderTree()
    tree.new_root('host1', uuid.uuid4())
    stale = os_traits.normalize_name('IMGTYPE_BACKEND_lvm')
    tree.add_traits('host1', stale, 'CUSTOM_OTHER')
    with mock.patch.object(STOCK, 'update_provider_tree'):
        drv.update_provider_tree(tree, 'host1')
    traits = tree.data('host1').traits
    assert 'CUSTOM_IMGTYPE_BACKEND_QCOW2' in traits
    assert 'CUSTOM_IMGTYPE_BACKEND_FLAT' in traits
    assert stale not in traits            # no volume group any more
    assert 'CUSTOM_OTHER' in traits       # not ours: kept


def test_rbd_is_served_only_where_a_ceph_conf_names_monitors(
        make_driver, tmp_path):
    # images_rbd_pool defaults to 'rbd' everywhere: that alone is no Ceph.
    missing = str(tmp_path / 'ceph.conf')
    drv = make_driver(images_type='qcow2', images_rbd_ceph_conf=missing)
    assert 'rbd' not in drv._host_traits.served_backends()
    assert 'CUSTOM_IMGTYPE_BACKEND_RBD' not in drv._host_traits.custom_traits
    with pytest.raises(exception.InvalidImagesTypeMapping,
                       match='no Ceph monitor in %s' % missing):
        make_driver(images_type='qcow2', images_rbd_ceph_conf=missing,
                    images_type_mapping='raw:rbd')._resolver.check_host()

    with open(missing, 'w') as f:
        f.write('[global]\nmon_host = [v2:10.0.0.1:3300,v1:10.0.0.1:6789]\n')
    drv = make_driver(images_type='qcow2', images_rbd_ceph_conf=missing)
    assert 'rbd' in drv._host_traits.served_backends()
    assert 'CUSTOM_IMGTYPE_BACKEND_RBD' in drv._host_traits.custom_traits


def _placement_traits(*traits):
    client = mock.Mock()
    client.get_provider_traits.return_value = mock.Mock(traits=set(traits))
    return mock.patch('nova.scheduler.client.report.'
                      'report_client_singleton', return_value=client)


@pytest.fixture
def compute_node():
    migration = mock.Mock(dest_compute='host2', dest_node='node2')
    with mock.patch.object(objects.Migration, 'get_by_id',
                           return_value=migration), \
            mock.patch.object(objects.ComputeNode, 'get_by_host_and_nodename',
                              return_value=mock.Mock(uuid='cn-uuid')) as gn:
        yield gn


def test_cold_move_refused_before_anything_when_dest_lacks_backend(
        make_driver, compute_node):
    drv = make_driver(images_type='qcow2')
    inst = _instance(imgtype_backend='qcow2')
    with _placement_traits('CUSTOM_IMGTYPE_BACKEND_FLAT'), \
            mock.patch.object(STOCK, 'migrate_disk_and_power_off') as stock:
        with pytest.raises(nova_exception.InstanceFaultRollback) as e:
            drv.migrate_disk_and_power_off(None, inst, '192.0.2.2', None, None)
    stock.assert_not_called()
    compute_node.assert_called_once_with(None, 'host2', 'node2')
    assert 'host2' in str(e.value.inner_exception)
    assert 'qcow2' in str(e.value.inner_exception)


def test_cold_move_goes_on(make_driver, compute_node):
    # (A destination running no nova-imgtype: test_stock_destinations.)
    drv = make_driver(images_type='qcow2')
    inst = _instance(imgtype_backend='qcow2')
    # (How the files go: tests/real/test_cold_moves_libvirt.)
    with _placement_traits('CUSTOM_IMGTYPE_BACKEND_QCOW2'), \
            mock.patch.object(cold_move.ColdMove, 'send_files') as moved:
        drv.migrate_disk_and_power_off(None, inst, '192.0.2.2', None, None)
    moved.assert_called_once()


def test_lvm_instance_is_not_migrated_on_a_non_lvm_host(make_driver):
    drv = make_driver(images_type='qcow2')
    inst = _instance(imgtype_backend='lvm')
    with mock.patch.object(STOCK, 'migrate_disk_and_power_off') as stock:
        with pytest.raises(nova_exception.InstanceFaultRollback):
            drv.migrate_disk_and_power_off(None, inst, '192.0.2.2', None, None)
    stock.assert_not_called()


def test_live_migration_destination_reports_instance_backend(make_driver):
    drv = make_driver(images_type='rbd')
    inst = _instance(imgtype_backend='qcow2')
    data = objects.LibvirtLiveMigrateData(image_type='rbd')
    with mock.patch.object(STOCK, 'check_can_live_migrate_destination',
                           return_value=data):
        result = drv.check_can_live_migrate_destination(None, inst, {}, {})
    assert result.image_type == 'qcow2'


def test_live_migration_refused_by_destination_that_cannot_serve(
        make_driver):
    drv = make_driver(images_type='qcow2', images_rbd_pool='')
    inst = _instance(imgtype_backend='rbd')
    with mock.patch.object(STOCK,
                           'check_can_live_migrate_destination') as stock:
        with pytest.raises(nova_exception.MigrationPreCheckError,
                           match='images_rbd_pool'):
            drv.check_can_live_migrate_destination(None, inst, {}, {})
    stock.assert_not_called()


def test_shared_block_storage_is_judged_per_instance(make_driver):
    drv = make_driver(images_type='qcow2')
    rbd_inst = _instance(imgtype_backend='rbd')
    dest = objects.LibvirtLiveMigrateData(
        image_type='rbd', is_shared_instance_path=False,
        is_volume_backed=False)
    assert drv._is_shared_block_storage(rbd_inst, dest) is True
    qcow2_inst = _instance(imgtype_backend='qcow2')
    dest.image_type = 'qcow2'
    assert drv._is_shared_block_storage(qcow2_inst, dest) is False


@pytest.fixture
def test_pools(make_driver, test_conn):
    """Storage pools on libvirt's embedded test driver (fakelibvirt, the
    driver's own connection, has no pool API)."""
    from nova_imgtype.virt.libvirt import pools

    def attach(drv):
        drivers.use_pools(drv, pools.StoragePools(
            lambda: test_conn))
        return drv

    # init_host counts this host's legacy instances in Nova's DB.
    with mock.patch.object(objects.InstanceList, 'get_by_host',
                           return_value=[]):
        yield attach


def test_init_host_ensures_the_pools(make_driver, test_pools):
    drv = test_pools(make_driver(use_storage_pools=True))
    with mock.patch.object(STOCK, 'init_host'):
        drv.init_host('host1')
    for name in (pool_specs.BASE_POOL, pool_specs.DISKS_POOL):
        pool = drv._pools.get(name)
        assert pool.isActive() and pool.autostart()
    target = pool_specs.pool_target(drv._pools.get(pool_specs.BASE_POOL))
    assert target == os.path.join(CONF.instances_path, '_base')


def test_init_host_counts_legacy_instances(make_driver, test_pools,
                                           caplog):
    drv = test_pools(make_driver(use_storage_pools=True))
    legacy = _instance()                                   # no record
    on_pools = _instance(imgtype_backend='qcow2', imgtype_storage='pools')
    on_lvm = _instance(imgtype_backend='lvm')              # pools can't
    with mock.patch.object(STOCK, 'init_host'), \
            mock.patch.object(objects.InstanceList, 'get_by_host',
                              return_value=[legacy, on_pools, on_lvm]):
        drv.init_host('host1')
    assert '1 instance(s) on this host still use legacy' in caplog.text
    assert legacy.uuid in caplog.text and on_lvm.uuid not in caplog.text


def test_init_host_refuses_a_conflicting_pool(make_driver, test_pools,
                                              tmp_path):
    drv = test_pools(make_driver(use_storage_pools=True))
    drv._pools.ensure(pool_specs.PoolSpec(pool_specs.DISKS_POOL, 'dir',
                                     str(tmp_path / 'elsewhere')))
    with mock.patch.object(STOCK, 'init_host'):
        with pytest.raises(exception.PoolConflict,
                           match=pool_specs.DISKS_POOL):
            drv.init_host('host1')


def test_pool_instance_disks_are_volumes_and_go_with_it(make_driver,
                                                        test_pools):
    from nova_imgtype.virt.libvirt import storage
    drv = test_pools(make_driver(use_storage_pools=True))
    with mock.patch.object(STOCK, 'init_host'):
        drv.init_host('host1')
    inst = _instance(imgtype_backend='qcow2', imgtype_storage='pools')
    other = _instance(imgtype_backend='qcow2', imgtype_storage='pools')
    disk = drv.image_backend.by_name(inst, 'disk')
    assert isinstance(disk, storage.LibvirtStorage)
    disks = drv._pools.get(pool_specs.DISKS_POOL)
    for i in (inst, other):
        for name in ('disk', 'disk.rescue'):
            drv._pools.create_cow(disks, pool_specs.volume_name(i.uuid, name),
                                  '/t', 'raw', 1 << 20)
    with mock.patch.object(STOCK, 'unrescue'):
        drv.unrescue(None, inst)
    assert not drv._pools.find_volume(
        disks, pool_specs.volume_name(inst.uuid, 'disk.rescue'))
    assert disk.exists()
    with mock.patch.object(STOCK, '_cleanup'):
        drv._cleanup(None, inst, None, cleanup_instance_disks=True)
    assert not disk.exists()
    assert len(list(drv._pools.volumes(disks, other.uuid))) == 2


def test_pool_instances_on_dir_pools_may_live_migrate(make_driver,
                                                      test_pools):
    drv = test_pools(make_driver(use_storage_pools=True))
    with mock.patch.object(STOCK, 'init_host'):
        drv.init_host('host1')
    inst = _instance(imgtype_backend='qcow2', imgtype_storage='pools')
    with mock.patch.object(STOCK, 'check_can_live_migrate_source',
                           return_value='checked') as lv, \
            mock.patch.object(objects.MigrationList, 'get_by_filters',
                              return_value=[]):
        assert drv.check_can_live_migrate_source(None, inst, None) == \
            'checked'
    lv.assert_called_once()


@pytest.mark.parametrize('dest_traits,outcome', [
    # The backend on pools there: volumes to its pool.
    (('CUSTOM_IMGTYPE_BACKEND_QCOW2',
      'CUSTOM_IMGTYPE_BACKEND_LIBVIRT_STORAGE'), True),
    # The backend without pools: the volumes go as its files.
    (('CUSTOM_IMGTYPE_BACKEND_QCOW2',), False),
    # Not the backend: refused before anything is touched.
    (('CUSTOM_IMGTYPE_BACKEND_FLAT',
      'CUSTOM_IMGTYPE_BACKEND_LIBVIRT_STORAGE'), 'refused'),
])
def test_pool_instance_cold_move_by_what_the_destination_serves(
        make_driver, compute_node, dest_traits, outcome):
    drv = make_driver(images_type='qcow2')
    inst = _instance(imgtype_backend='qcow2', imgtype_storage='pools')
    with _placement_traits(*dest_traits):
        if outcome == 'refused':
            with pytest.raises(nova_exception.InstanceFaultRollback) as e:
                drv._cold.check_destination(None, inst)
            assert 'backend qcow2' in str(e.value.inner_exception)
        else:
            assert drv._cold.check_destination(None, inst) is outcome


@pytest.mark.parametrize('pools_on,recorded,expected', [
    (True, 'legacy', 'pools'),      # transition: new disks go to the pool
    (False, 'pools', 'legacy'),     # a host without pools makes files
    (True, 'pools', 'pools'),
])
def test_unshelve_makes_disks_where_the_host_keeps_them(
        make_driver, test_pools, pools_on, recorded, expected):
    drv = test_pools(make_driver(images_type='qcow2',
                                 use_storage_pools=pools_on))
    if pools_on:
        with mock.patch.object(STOCK, 'init_host'):
            drv.init_host('host1')
    inst = _instance(vm_state=vm_states.SHELVED_OFFLOADED,
                     imgtype_backend='qcow2', imgtype_native_formats='qcow2',
                     imgtype_storage=recorded)
    meta = objects.ImageMeta.from_dict({'disk_format': 'qcow2'})
    with mock.patch.object(STOCK, 'spawn') as stock_spawn:
        drv.spawn(None, inst, meta, [], None, {})
    stock_spawn.assert_called_once()
    assert inst.system_metadata['imgtype_storage'] == expected
    assert inst.system_metadata['imgtype_backend'] == 'qcow2'
    assert inst.system_metadata['imgtype_native_formats'] == 'qcow2'


def test_rebuild_keeps_the_storage_of_the_instance(make_driver):
    drv = make_driver(images_type='qcow2', use_storage_pools=True)
    inst = _instance(imgtype_backend='qcow2', imgtype_storage='legacy')
    meta = objects.ImageMeta.from_dict({'disk_format': 'qcow2'})
    with mock.patch.object(STOCK, 'spawn'):
        drv.spawn(None, inst, meta, [], None, {})
    assert inst.system_metadata['imgtype_storage'] == 'legacy'


@pytest.mark.parametrize('sysmeta,converted', [
    # Recorded flat: its raw files stay raw, as its guest XML says (issue
    # 33, 1: stock converted them to qcow2 under a raw XML).
    ({'imgtype_backend': 'flat', 'imgtype_storage': 'legacy'}, False),
    # Recorded qcow2: its raw files are recorded raw (issue 54), and the
    # image backend gives them to QEMU as raw: nothing to convert.
    ({'imgtype_backend': 'qcow2', 'imgtype_storage': 'legacy'}, False),
    # Not recorded: stock's behaviour.
    ({}, True)])
def test_a_cold_move_converts_only_what_the_record_says(
        make_driver, tmp_path, sysmeta, converted):
    drv = make_driver(images_type='qcow2', use_storage_pools=False)
    inst = _instance(**sysmeta)
    disks = []
    for name in ('disk', 'disk.local'):
        (tmp_path / name).write_bytes(b'')
        disks.append({'type': 'raw', 'path': str(tmp_path / name)})
    with mock.patch.object(STOCK, 'finish_migration') as stock:
        drv.finish_migration(None, mock.Mock(), inst, jsonutils.dumps(disks),
                             None, None, False, {})
    handed = jsonutils.loads(stock.call_args[0][3])
    assert handed == (disks if converted else [])


@pytest.mark.parametrize('mapping,disk_format,local', [
    ('qcow2:qcow2', 'qcow2', True),     # local disks: a file
    ('qcow2:qcow2', 'raw', False),      # rbd: stock's, in Ceph
])
def test_a_build_records_where_its_config_drive_is_made(
        make_driver, mapping, disk_format, local):
    drv = make_driver(images_type='rbd', images_type_mapping=mapping,
                      use_storage_pools=False)
    inst = _instance(vm_state=vm_states.BUILDING)
    meta = objects.ImageMeta.from_dict({'disk_format': disk_format})
    with mock.patch.object(STOCK, 'spawn'):
        drv.spawn(None, inst, meta, [], None, {})
    assert (inst.system_metadata.get('imgtype_config_drive') ==
            ('local' if local else None))


def test_an_evacuation_of_an_instance_recorded_before_records_its_drive(
        make_driver):
    # Recorded by an earlier release: its config drive, made anew on the
    # destination, is a file there, recorded before stock makes it.
    drv = make_driver(images_type='rbd', images_type_mapping='qcow2:qcow2',
                      use_storage_pools=False)
    inst = _instance(imgtype_backend='qcow2', imgtype_storage='legacy',
                     imgtype_native_formats='qcow2')
    meta = objects.ImageMeta.from_dict({'disk_format': 'qcow2'})
    with mock.patch.object(STOCK, 'spawn') as stock_spawn:
        stock_spawn.side_effect = lambda *a, **k: (
            inst.save.assert_called_once_with())
        drv.spawn(None, inst, meta, [], None, {})
    assert inst.system_metadata['imgtype_config_drive'] == 'local'
    assert inst.system_metadata['imgtype_backend'] == 'qcow2'


@pytest.mark.parametrize('sysmeta,kept', [
    # Local files (qcow2:qcow2 on an rbd host): its disks are in the
    # directory.
    ({'imgtype_backend': 'qcow2', 'imgtype_storage': 'legacy'}, True),
    # In Ceph: stock's rule, the directory holds no disk.
    ({'imgtype_backend': 'rbd', 'imgtype_storage': 'legacy'}, False),
    # Not recorded: stock's (images_type, rbd).
    ({}, False)])
def test_rbd_hosts_directory_workaround_keeps_local_disks(
        make_driver, conf, sysmeta, kept):
    # A hard reboot (or an evacuation's, a reverted resize's clean-up)
    # keeps the disks: stock's cleanup(destroy_disks=False). With
    # ensure_libvirt_rbd_instance_dir_cleanup it removed the instance
    # directory on an rbd host, whatever the instance's disks.
    conf.config(ensure_libvirt_rbd_instance_dir_cleanup=True,
                group='workarounds')
    drv = make_driver(images_type='rbd', images_type_mapping='qcow2:qcow2',
                      use_storage_pools=False)
    inst = _instance(**sysmeta)
    with mock.patch.object(STOCK, '_cleanup') as stock:
        drv.cleanup(None, inst, [], destroy_disks=False)
    assert stock.call_args.kwargs['cleanup_instance_dir'] is (not kept)
    assert stock.call_args.kwargs['cleanup_instance_disks'] is False
