"""Real: LibvirtStorage through the driver's per-instance backend, on the
throwaway libvirtd: real pools, files, qemu-img, and a domain booted from
the disk XML the backend generates.

Fake: the image service (a local file served by IMAGE_API.get/download)
and the driver's own libvirt connection for domains (LibvirtFixture); the
storage pools use the real daemon.
"""

import os
import uuid

import libvirt
import nova.conf
import pytest
from lxml import etree
from nova import context as nova_context
from nova import exception as nova_exception
from nova import objects
from nova.virt.libvirt import imagecache as nova_imagecache
from nova.virt.libvirt import utils as libvirt_utils

from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import pools
from nova_imgtype.virt.libvirt import storage
from nova_imgtype_testing import drivers
from nova_imgtype_testing import libvirtd as real
from tests.real.test_native_images import MiB
from tests.real.test_native_images import conf  # noqa: F401
from tests.real.test_native_images import driver  # noqa: F401
from tests.real.test_native_images import glance  # noqa: F401

objects.register_all()


@pytest.fixture
def no_bdms(monkeypatch):
    """Stock's cache manager asks Nova's DB for the instances' block device
    mappings; the real tier runs no Nova DB (and lists no instances)."""
    monkeypatch.setattr(objects.BlockDeviceMappingList,
                        'bdms_by_instance_uuid',
                        classmethod(lambda cls, ctxt, uuids: {}))


@pytest.fixture
def pool_driver(driver, conf, libvirt_conn, libvirt_tmp_path):  # noqa: F811
    conf.config(instances_path=str(libvirt_tmp_path / 'instances'))
    drv = driver(images_type='flat', images_type_mapping='qcow2:qcow2',
                 use_storage_pools=True)
    drivers.use_pools(drv, pools.StoragePools(
        lambda: libvirt_conn))
    made = [drv._pools.ensure(spec) for spec in pool_specs.default_specs(
        conf.conf.instances_path)]
    yield drv
    for pool in made:
        if pool.name() not in libvirt_conn.listDefinedStoragePools() + \
                libvirt_conn.listStoragePools():
            continue                    # undefined by the test
        pool.destroy()
        pool.undefine()


def _boot_disk(drv, image_id, disk_format):
    decision = drv._resolver.decide(disk_format)
    inst = objects.Instance(
        uuid=str(uuid.uuid4()), image_ref=image_id, task_state=None,
        vm_state='building', trusted_certs=None, migration_context=None,
        system_metadata={'image_disk_format': disk_format})
    drv._resolver.record(inst, decision)
    disk = drv.image_backend.by_name(
        inst, 'disk', disk_info_mapping={'bus': 'virtio', 'dev': 'vda',
                                         'type': 'disk'})
    drv._try_fetch_image_cache(
        disk, libvirt_utils.fetch_image, nova_context.get_admin_context(),
        nova_imagecache.get_cache_fname(image_id), image_id, inst,
        64 * MiB)
    return inst, disk


def _guest_xml(disk):
    return disk.libvirt_info('none', {}).to_xml()


def test_qcow2_image_becomes_an_overlay_volume_and_boots(
        pool_driver, glance, tmp_path, libvirt_conn,  # noqa: F811
        kvm_available):
    image_id = str(uuid.uuid4())
    src = str(tmp_path / 'img.qcow2')
    real.make_image(src, 'qcow2', 32 * MiB, compressed=True)
    glance[image_id] = (src, 'qcow2')

    inst, disk = _boot_disk(pool_driver, image_id, 'qcow2')

    assert isinstance(disk, storage.LibvirtStorage)
    assert inst.system_metadata['imgtype_storage'] == 'pools'
    vol = pool_specs.volume_name(inst.uuid, 'disk')
    assert disk.volume_name == vol and disk.exists()
    chain = real.qemu_img_info(disk.path, backing_chain=True)
    assert chain[0]['format'] == 'qcow2'
    assert chain[0]['virtual-size'] == 64 * MiB
    assert chain[1]['format'] == 'qcow2'     # the native template
    assert os.path.dirname(chain[1]['filename']).endswith('_base')
    assert pool_driver._pools.backing_paths(pool_driver._pools.get(
        pool_specs.DISKS_POOL)) == {chain[1]['filename']}

    xml = etree.fromstring(_guest_xml(disk))
    assert xml.get('type') == 'volume'
    assert xml.find('source').attrib == {'pool': pool_specs.DISKS_POOL,
                                         'volume': vol}
    dom = real.start_domain(libvirt_conn, 'ls-' + inst.uuid[:8],
                            [_guest_xml(disk)], kvm=kvm_available)
    try:
        assert dom.isActive()
    finally:
        real.destroy_domain(dom)

    # Resize grows the volume.
    disk.resize_image(128 * MiB)
    assert real.qemu_img_info(disk.path)['virtual-size'] == 128 * MiB

    # Snapshot extraction through a temporary pool: same data, no pool left.
    out = str(tmp_path / 'snap' / 'snap.qcow2')
    os.makedirs(os.path.dirname(out))
    disk.snapshot_extract(out, 'qcow2')
    assert real.qemu_img_info(out)['format'] == 'qcow2'
    snap_head = str(tmp_path / 'snap.raw')
    real.qemu_img('convert', '-O', 'raw', out, snap_head)
    os.truncate(snap_head, 32 * MiB)
    assert (real.sha256_of_guest_data(snap_head, 'raw') ==
            real.sha256_of_guest_data(src, 'qcow2'))
    assert [p.name() for p in libvirt_conn.listAllStoragePools(0)
            if p.name().startswith('nova-snapshot-')] == []

    # Delete leaves no volume and no file; the template stays cached.
    pool_driver._disks.delete_pool_volumes(inst)
    assert not disk.exists()
    assert os.listdir(os.path.join(conf_instances(), 'disks')) == []
    assert os.path.exists(chain[1]['filename'])


def test_a_volume_from_a_cached_template_runs_no_process(
        pool_driver, glance, tmp_path, processes):  # noqa: F811
    # Stock's sizes (verify_base_size, Image.cache) ran qemu-img info twice
    # per volume; libvirt makes the overlay, the sizes are read here.
    image_id = str(uuid.uuid4())
    src = str(tmp_path / 'img.qcow2')
    real.make_image(src, 'qcow2', 32 * MiB, compressed=True)
    glance[image_id] = (src, 'qcow2')
    _boot_disk(pool_driver, image_id, 'qcow2')                 # cold
    processes.start()
    inst, disk = _boot_disk(pool_driver, image_id, 'qcow2')    # warm
    assert processes == []
    # Nova's inspector read the template for the first disk (stock's
    # safety check, whose reading of the size stock's size check took);
    # the template has not changed since, so it is not read again.
    assert processes.inspected == []
    assert real.qemu_img_info(disk.path)['virtual-size'] == 64 * MiB
    # A template that changed is read again.
    (template,) = [os.path.join(conf_instances(), '_base', name)
                   for name in os.listdir(os.path.join(conf_instances(),
                                                       '_base'))
                   if not name.startswith('.')]
    st = os.stat(template)
    os.utime(template, ns=(st.st_atime_ns, st.st_mtime_ns - 10 ** 9))
    del processes[:]
    _boot_disk(pool_driver, image_id, 'qcow2')
    assert processes == [] and processes.inspected == [template]


def test_the_cache_pool_is_refreshed_only_for_a_new_template(
        pool_driver, glance, tmp_path, monkeypatch):  # noqa: F811
    # A refresh re-reads every template of the image cache: the first disk
    # of a template needs one (libvirt has not seen the new file), the next
    # ones do not.
    refreshed = []
    refresh = libvirt.virStoragePool.refresh

    def counting(pool, flags=0):
        refreshed.append(pool.name())
        return refresh(pool, flags)

    monkeypatch.setattr(libvirt.virStoragePool, 'refresh', counting)
    image_id = str(uuid.uuid4())
    src = str(tmp_path / 'img.qcow2')
    real.make_image(src, 'qcow2', 32 * MiB, compressed=True)
    glance[image_id] = (src, 'qcow2')
    _boot_disk(pool_driver, image_id, 'qcow2')
    assert refreshed == [pool_specs.BASE_POOL]
    _inst, disk = _boot_disk(pool_driver, image_id, 'qcow2')
    assert refreshed == [pool_specs.BASE_POOL]
    assert disk.exists()


def test_a_warm_disk_asks_libvirt_only_what_it_does_not_know(
        pool_driver, glance, tmp_path, monkeypatch):  # noqa: F811
    # A pool's definition is read once, and the volume a disk has just
    # been made at its size is not looked up again to be grown.
    calls = []

    def counting(cls, name):
        real_call = getattr(cls, name)

        def call(obj, *args):
            calls.append('%s.%s' % (cls.__name__, name))
            return real_call(obj, *args)
        monkeypatch.setattr(cls, name, call)

    for cls, name in ((libvirt.virStoragePool, 'XMLDesc'),
                      (libvirt.virStorageVol, 'resize'),
                      (libvirt.virStorageVol, 'info')):
        counting(cls, name)
    image_id = str(uuid.uuid4())
    src = str(tmp_path / 'img.qcow2')
    real.make_image(src, 'qcow2', 32 * MiB, compressed=True)
    glance[image_id] = (src, 'qcow2')
    _boot_disk(pool_driver, image_id, 'qcow2')
    calls.clear()
    _inst, disk = _boot_disk(pool_driver, image_id, 'qcow2')
    # The template's capacity, nothing of the pools or the new volume.
    assert calls == ['virStorageVol.info']
    assert real.qemu_img_info(disk.path)['virtual-size'] == 64 * MiB


def test_raw_image_is_copied_into_a_raw_volume(pool_driver, glance,  # noqa
                                               tmp_path, libvirt_conn):
    image_id = str(uuid.uuid4())
    src = str(tmp_path / 'img.raw')
    real.make_image(src, 'raw', 32 * MiB)
    glance[image_id] = (src, 'raw')

    inst, disk = _boot_disk(pool_driver, image_id, 'raw')   # flat: copy

    assert disk.volume_format == 'raw'
    info = real.qemu_img_info(disk.path)
    assert info['format'] == 'raw' and 'backing-filename' not in info
    assert info['virtual-size'] == 64 * MiB
    head = str(tmp_path / 'head.raw')
    real.qemu_img('convert', '-O', 'raw', disk.path, head)
    os.truncate(head, 32 * MiB)
    assert (real.sha256_of_guest_data(head, 'raw') ==
            real.sha256_of_guest_data(src, 'raw'))

    # A snapshot extraction that fails (here: qemu-img cannot write the
    # target format) leaves no pool and no file; the disk is untouched.
    snap_dir = tmp_path / 'snap'
    snap_dir.mkdir()
    with pytest.raises(nova_exception.ImageUnacceptable,
                       match='Unable to convert image to no-such-format'):
        disk.snapshot_extract(str(snap_dir / 'snap'), 'no-such-format')
    assert [p.name() for p in libvirt_conn.listAllStoragePools(0)
            if p.name().startswith('nova-snapshot-')] == []
    assert os.listdir(snap_dir) == []
    assert disk.exists()

    pool_driver._disks.delete_pool_volumes(inst)
    assert not disk.exists()


def conf_instances():
    return nova.conf.CONF.instances_path


def test_cache_manager_keeps_templates_in_use_by_pool_volumes(
        pool_driver, conf, no_bdms):  # noqa: F811
    conf.config(remove_unused_base_images=True,
                remove_unused_original_minimum_age_seconds=0,
                remove_unused_resized_minimum_age_seconds=0,
                group='image_cache')
    base_dir = os.path.join(conf_instances(), '_base')
    used = os.path.join(base_dir, nova_imagecache.get_cache_fname('a'))
    native = used + '_qcow2'
    unused = os.path.join(base_dir, nova_imagecache.get_cache_fname('b'))
    for path, fmt in ((used, 'raw'), (native, 'qcow2'), (unused, 'raw')):
        real.make_image(path, fmt, 8 * MiB)
        os.utime(path, (1, 1))          # old enough to go
    storage_pools = pool_driver._pools
    storage_pools.refresh(pool_specs.BASE_POOL)
    disks = storage_pools.get(pool_specs.DISKS_POOL)
    inst = str(uuid.uuid4())
    storage_pools.create_cow(disks, pool_specs.volume_name(inst, 'disk'), used,
                             'raw', 16 * MiB)
    storage_pools.create_cow(disks, pool_specs.volume_name(inst, 'disk.local'),
                             native, 'qcow2', 16 * MiB)

    pool_driver.manage_image_cache(nova_context.get_admin_context(), [])

    assert os.path.exists(used) and os.path.exists(native)
    assert not os.path.exists(unused)

    # Once nothing uses them, they go by the same rules.
    storage_pools.delete_instance_volumes(disks, inst)
    pool_driver.manage_image_cache(nova_context.get_admin_context(), [])
    assert not os.path.exists(used) and not os.path.exists(native)


@pytest.fixture
def dir_pool_of_another_name(driver, conf, libvirt_conn,  # noqa: F811
                             libvirt_tmp_path):
    """A driver whose dir disks pool is ``nova-disks-pool-dir`` (as on an
    rbd or lvm host with the qcow2:qcow2 mapping), and a configuration
    that no longer names it (mapping dropped): (driver, that pool)."""
    conf.config(instances_path=str(libvirt_tmp_path / 'instances'))
    drv = driver(images_type='flat', use_storage_pools=True)
    drivers.use_pools(drv, pools.StoragePools(
        lambda: libvirt_conn))
    base, disks = pool_specs.default_specs(conf.conf.instances_path)
    specs = [base, pool_specs.PoolSpec(pool_specs.DISKS_POOL + '-dir', 'dir',
                                  disks.target)]
    made = [drv._pools.ensure(spec) for spec in specs]
    yield drv, made[1]
    for spec in specs:   # by name: a test may have undefined one
        try:
            pool = libvirt_conn.storagePoolLookupByName(spec.name)
        except libvirt.libvirtError:
            continue
        if pool.isActive():
            pool.destroy()
        pool.undefine()


def _old_template(name, fmt):
    path = os.path.join(conf_instances(), '_base',
                        nova_imagecache.get_cache_fname(name))
    if fmt == 'qcow2':
        path += '_qcow2'
    real.make_image(path, fmt, 8 * MiB)
    os.utime(path, (1, 1))          # old enough to go
    return path


def test_cache_manager_keeps_templates_of_a_dir_pool_of_any_name(
        dir_pool_of_another_name, conf, no_bdms):  # noqa: F811
    """Issue 29, 10: on an rbd or lvm host, qcow2:qcow2 overlays are in
    the dir pool ``nova-disks-pool-dir``; once the mapping is dropped (or
    ``use_storage_pools`` turned off) the configuration names no such
    pool, and the manager removed the templates the overlays still need.
    The pool is found by its place, ``<instances_path>/disks``."""
    drv, other = dir_pool_of_another_name
    conf.config(remove_unused_base_images=True,
                remove_unused_original_minimum_age_seconds=0,
                remove_unused_resized_minimum_age_seconds=0,
                group='image_cache')
    native = _old_template('n', 'qcow2')
    unused = _old_template('u', 'raw')
    drv._pools.refresh(pool_specs.BASE_POOL)
    inst = str(uuid.uuid4())
    drv._pools.create_cow(other, pool_specs.volume_name(inst, 'disk'), native,
                          'qcow2', 16 * MiB)

    drv.manage_image_cache(nova_context.get_admin_context(), [])

    assert os.path.exists(native)
    assert not os.path.exists(unused)
    drv._pools.delete_instance_volumes(other, inst)


def test_cache_manager_removes_nothing_with_volumes_and_no_pool(
        dir_pool_of_another_name, conf, no_bdms):  # noqa: F811
    """Volumes in ``<instances_path>/disks`` with no pool over it: their
    templates cannot be read from libvirt, and nothing is removed."""
    drv, other = dir_pool_of_another_name
    conf.config(remove_unused_base_images=True,
                remove_unused_original_minimum_age_seconds=0,
                group='image_cache')
    path = _old_template('v', 'raw')
    target = pool_specs.pool_target(other)
    other.destroy()
    other.undefine()
    volume = os.path.join(target, pool_specs.volume_name(str(uuid.uuid4()),
                                                    'disk'))
    real.make_image(volume, 'raw', MiB)
    try:
        with pytest.raises(Exception, match='no storage pool'):
            drv.manage_image_cache(nova_context.get_admin_context(), [])
        assert os.path.exists(path)
    finally:
        os.unlink(volume)


def test_cache_manager_removes_nothing_when_the_pool_cannot_be_read(
        pool_driver, conf, no_bdms):  # noqa: F811
    conf.config(remove_unused_base_images=True,
                remove_unused_original_minimum_age_seconds=0,
                group='image_cache')
    base_dir = os.path.join(conf_instances(), '_base')
    path = os.path.join(base_dir, nova_imagecache.get_cache_fname('c'))
    real.make_image(path, 'raw', 8 * MiB)
    os.utime(path, (1, 1))
    disks = pool_driver._pools.get(pool_specs.DISKS_POOL)
    pool_driver._pools.create_cow(
        disks, pool_specs.volume_name(str(uuid.uuid4()), 'disk'), path, 'raw',
        16 * MiB)
    disks.destroy()   # inactive: its volumes' templates cannot be read
    try:
        with pytest.raises(Exception, match=pool_specs.DISKS_POOL):
            pool_driver.manage_image_cache(nova_context.get_admin_context(),
                                           [])
        assert os.path.exists(path)
    finally:
        pool_driver._pools.ensure(pool_specs.default_specs(conf_instances())[1])
