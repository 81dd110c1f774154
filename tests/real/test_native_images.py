"""Real: images cached natively or converted, with real qemu-img and files,
and the resulting instance disk booted by the throwaway libvirtd.

Fake: only the image service. ``IMAGE_API.get``/``download`` serve a real
file made by qemu-img; everything after the download (format inspection,
qemu-img, stock and native caching, overlays, the domain) is real.
"""

import json
import os
import shutil
import uuid

import nova.conf
import pytest
from nova import context as nova_context
from nova import exception as nova_exception
from nova import objects
from nova.tests import fixtures as nova_fixtures
from nova.virt import fake
from nova.virt import images
from nova.virt.libvirt import imagecache as nova_imagecache
from nova.virt.libvirt import utils as libvirt_utils
from oslo_concurrency import processutils
from oslo_config import fixture as config_fixture

from nova_imgtype.virt.libvirt import driver as imgtype_driver
from nova_imgtype.virt.libvirt import imagecache
from nova_imgtype.virt.libvirt.template_handlers import downloading
from nova_imgtype_testing import libvirtd as real

CONF = nova.conf.CONF
objects.register_all()
MiB = 1024 * 1024


@pytest.fixture
def conf(tmp_path):
    fix = config_fixture.Config(CONF)
    fix.setUp()
    fix.config(instances_path=str(tmp_path / 'instances'), host='real1',
               force_raw_images=True, use_cow_images=True)
    fix.config(lock_path=str(tmp_path / 'locks'),
               group='oslo_concurrency')
    os.makedirs(tmp_path / 'instances')
    yield fix
    fix.cleanUp()


@pytest.fixture
def glance(monkeypatch):
    """{image_id: (path, disk_format)} served as the image service would."""
    served = {}

    def get(context, image_id, *args, **kwargs):
        path, fmt = served[image_id]
        return {'id': image_id, 'disk_format': fmt,
                'container_format': 'bare', 'size': os.path.getsize(path)}

    def download(context, image_id, data=None, dest_path=None,
                 trusted_certs=None):
        if data is not None:
            with open(served[image_id][0], 'rb') as f:
                shutil.copyfileobj(f, data)
        else:
            shutil.copyfile(served[image_id][0], dest_path)

    # Stock's fetch (kernel, ramdisk) and the downloading handler (every
    # template) each have their image API.
    for api in (images.IMAGE_API, downloading.IMAGE_API):
        monkeypatch.setattr(api, 'get', get)
        monkeypatch.setattr(api, 'download', download)
    return served


@pytest.fixture
def driver(conf):
    # The driver only builds disks here; its libvirt module is not used.
    # Privileged helpers (qemu-img convert) run in-process: we are root.
    fix = nova_fixtures.LibvirtFixture()
    fix.setUp()
    privsep = nova_fixtures.PrivsepFixture()
    privsep.setUp()

    def make(**libvirt_flags):
        # Image files, as stock makes them, unless a test asks for pools
        # (and gives the driver a connection to a real libvirtd).
        libvirt_flags.setdefault('use_storage_pools', False)
        conf.config(group='libvirt', **libvirt_flags)
        return imgtype_driver.LibvirtDriver(fake.FakeVirtAPI(), False)

    yield make
    privsep.cleanUp()
    fix.cleanUp()


def _instance(decision, image_id, disk_format):
    inst = objects.Instance(
        uuid=str(uuid.uuid4()), image_ref=image_id, task_state=None,
        vm_state='building', trusted_certs=None, migration_context=None,
        system_metadata={'image_disk_format': disk_format})
    if decision is not None:
        imgtype_driver.resolver_mod.BackendResolver.record(inst, decision)
    return inst


def _make_root_disk(drv, inst, image_id):
    """What _create_image does for the root disk of an image-backed boot."""
    backend = drv.image_backend.by_name(inst, 'disk')
    drv._try_fetch_image_cache(
        backend, libvirt_utils.fetch_image,
        nova_context.get_admin_context(),
        nova_imagecache.get_cache_fname(image_id), image_id, inst,
        64 * MiB)
    return backend


def _base_dir():
    return os.path.join(CONF.instances_path, '_base')


def _cache_files():
    base = _base_dir()
    return sorted(os.listdir(base)) if os.path.exists(base) else []


@pytest.fixture
def qcow2_image(tmp_path, glance):
    image_id = str(uuid.uuid4())
    path = str(tmp_path / 'cloud.qcow2')
    real.make_image(path, 'qcow2', 64 * MiB, compressed=True)
    glance[image_id] = (path, 'qcow2')
    return image_id, path


def test_mapped_qcow2_is_cached_natively_and_boots(
        driver, qcow2_image, libvirt_conn, kvm_available):
    image_id, image_path = qcow2_image
    drv = driver(images_type='flat', images_type_mapping='qcow2:qcow2')
    decision = drv._resolver.decide('qcow2')
    inst = _instance(decision, image_id, 'qcow2')

    disk = _make_root_disk(drv, inst, image_id)

    native = os.path.join(_base_dir(),
                          imagecache.native_cache_fname(image_id, 'qcow2'))
    assert _cache_files() == [os.path.basename(native)]
    assert real.qemu_img_info(native)['format'] == 'qcow2'
    # Not converted: the cached file is the image, byte for byte.
    assert os.path.getsize(native) == os.path.getsize(image_path)
    chain = real.qemu_img_info(disk.path, backing_chain=True)
    assert chain[0]['format'] == 'qcow2'
    assert chain[0]['full-backing-filename'] == native
    assert chain[1]['format'] == 'qcow2'
    assert (real.sha256_of_guest_data(disk.path, 'qcow2') ==
            real.sha256_of_guest_data(image_path, 'qcow2'))

    dom = real.start_domain(
        libvirt_conn, 'native-' + inst.uuid[:8],
        ["<disk type='file' device='disk'><driver name='qemu' type='qcow2'/>"
         "<source file='%s'/><target dev='vda' bus='virtio'/></disk>"
         % disk.path], kvm=kvm_available)
    try:
        assert dom.isActive()
    finally:
        real.destroy_domain(dom)


def test_unmapped_qcow2_is_converted_as_stock(driver, qcow2_image):
    image_id, image_path = qcow2_image
    drv = driver(images_type='qcow2', images_type_mapping='raw:flat')
    inst = _instance(drv._resolver.decide('qcow2'), image_id, 'qcow2')

    disk = _make_root_disk(drv, inst, image_id)

    stock = os.path.join(_base_dir(),
                         nova_imagecache.get_cache_fname(image_id))
    assert _cache_files() == [os.path.basename(stock)]
    assert real.qemu_img_info(stock)['format'] == 'raw'
    chain = real.qemu_img_info(disk.path, backing_chain=True)
    assert chain[0]['full-backing-filename'] == stock
    assert chain[1]['format'] == 'raw'
    assert (real.sha256_of_guest_data(disk.path, 'qcow2') ==
            real.sha256_of_guest_data(image_path, 'qcow2'))


def test_native_and_converted_never_share_a_cache_file(driver, qcow2_image):
    image_id, _ = qcow2_image
    drv = driver(images_type='qcow2', images_type_mapping='qcow2:qcow2')
    native_inst = _instance(drv._resolver.decide('qcow2'), image_id, 'qcow2')
    _make_root_disk(drv, native_inst, image_id)
    # After a config change, a new instance of the same image is converted.
    drv = driver(images_type='qcow2', images_type_mapping='')
    stock_inst = _instance(drv._resolver.decide('qcow2'), image_id, 'qcow2')
    _make_root_disk(drv, stock_inst, image_id)
    files = _cache_files()
    assert len(files) == 2
    formats = {f: real.qemu_img_info(os.path.join(_base_dir(), f))['format']
               for f in files}
    assert sorted(formats.values()) == ['qcow2', 'raw']


@pytest.mark.parametrize('mapping', ['qcow2:qcow2', ''])
@pytest.mark.parametrize('kind', ['backing-file', 'data-file'])
def test_unsafe_qcow2_rejected_and_cache_left_clean(driver, glance, tmp_path,
                                                    mapping, kind):
    image_id = str(uuid.uuid4())
    path = str(tmp_path / 'unsafe.qcow2')
    if kind == 'backing-file':
        base = str(tmp_path / 'secret.raw')
        real.make_image(base, 'raw', 16 * MiB)
        real.make_image(path, 'qcow2', 16 * MiB, backing_file=base,
                        backing_fmt='raw')
    else:
        real.make_image(path, 'qcow2', 16 * MiB,
                        data_file=str(tmp_path / 'data.raw'))
    glance[image_id] = (path, 'qcow2')
    drv = driver(images_type='qcow2', images_type_mapping=mapping)
    inst = _instance(drv._resolver.decide('qcow2'), image_id, 'qcow2')

    with pytest.raises(nova_exception.ImageUnacceptable):
        _make_root_disk(drv, inst, image_id)

    assert _cache_files() == []
    assert not os.path.exists(os.path.join(CONF.instances_path, inst.uuid,
                                           'disk'))


def test_precaching_keeps_what_a_boot_uses(driver, qcow2_image):
    """Image pre-caching (aggregates API 2.81) caches the template a boot
    on this host would use: the native file where the mapping keeps the
    format, stock's converted raw file elsewhere."""
    image_id, _path = qcow2_image
    ctx = nova_context.get_admin_context()
    native = imagecache.native_cache_fname(image_id, 'qcow2')

    drv = driver(images_type='flat', images_type_mapping='qcow2:qcow2')
    assert drv.cache_image(ctx, image_id) is True
    assert _cache_files() == [native]
    assert real.qemu_img_info(os.path.join(_base_dir(), native))[
        'format'] == 'qcow2'
    assert drv.cache_image(ctx, image_id) is False      # already there
    # A boot uses the pre-cached template: an overlay on it, nothing new.
    inst = _instance(drv._resolver.decide('qcow2'), image_id, 'qcow2')
    disk = _make_root_disk(drv, inst, image_id)
    assert real.qemu_img_info(disk.path)['full-backing-filename'] == (
        os.path.join(_base_dir(), native))
    assert _cache_files() == [native]

    # A host converting qcow2 (no mapping, force_raw_images) caches raw.
    shutil.rmtree(_base_dir())
    drv = driver(images_type='flat', images_type_mapping='')
    assert drv.cache_image(ctx, image_id) is True
    stock_name = nova_imagecache.get_cache_fname(image_id)
    assert _cache_files() == [stock_name]
    assert real.qemu_img_info(os.path.join(_base_dir(), stock_name))[
        'format'] == 'raw'


@pytest.mark.parametrize('fmt', ['qcow2', 'raw'])
def test_an_overlay_on_a_cached_template_runs_qemu_img_create_alone(
        driver, glance, tmp_path, processes, fmt):
    # Stock runs qemu-img info three times for an overlay on a cached
    # template (its size twice, its backing format and checks once); the
    # inspector that makes stock's safety check reads all of it here. The
    # overlay is the one stock makes on the same template.
    image_id = str(uuid.uuid4())
    src = str(tmp_path / ('img.' + fmt))
    real.make_image(src, fmt, 32 * MiB)
    if fmt == 'qcow2':
        # A template of another cluster size than qemu-img's default: the
        # overlay inherits it, as stock's does.
        bigger = src + '.64k'
        real.qemu_img('convert', '-q', '-O', 'qcow2', '-o',
                      'cluster_size=131072', src, bigger)
        os.rename(bigger, src)
    glance[image_id] = (src, fmt)
    drv = driver(images_type='qcow2', images_type_mapping='%s:qcow2' % fmt
                 if fmt == 'qcow2' else '')
    _make_root_disk(drv, _instance(drv._resolver.decide(fmt), image_id, fmt),
                    image_id)
    processes.start()
    disk = _make_root_disk(
        drv, _instance(drv._resolver.decide(fmt), image_id, fmt), image_id)
    processes.stop()
    assert [r.split()[:2] for r in processes] == [['qemu-img', 'create']], (
        processes)
    template = real.qemu_img_info(disk.path)['full-backing-filename']
    # Nova's inspector read the template for the first disk, for stock's
    # safety check (its reading of the size kept for stock's size check):
    # the template unchanged since, it is not read again; the new overlay
    # not at all (its header alone gives its size).
    assert template and processes.inspected == []
    stocks = str(tmp_path / 'stocks')
    libvirt_utils.create_image(stocks, 'qcow2', 64 * MiB,
                               backing_file=template)
    ours, theirs = (real.qemu_img_info(p) for p in (disk.path, stocks))
    for key in ('format', 'virtual-size', 'cluster-size',
                'backing-filename', 'backing-filename-format',
                'format-specific'):
        assert ours.get(key) == theirs.get(key), key
    if fmt == 'qcow2':
        assert ours['cluster-size'] == 131072


def test_an_unsafe_cached_template_is_refused_as_stock_refuses_it(
        driver, qcow2_image, tmp_path):
    # A template that turned unsafe in the cache (a backing file) fails
    # stock's safety check before any overlay is made on it.
    image_id, _ = qcow2_image
    drv = driver(images_type='qcow2', images_type_mapping='qcow2:qcow2')
    _make_root_disk(drv, _instance(drv._resolver.decide('qcow2'), image_id,
                                   'qcow2'), image_id)
    template = os.path.join(_base_dir(),
                            imagecache.native_cache_fname(image_id, 'qcow2'))
    other = str(tmp_path / 'other')
    real.qemu_img('create', '-q', '-f', 'qcow2', other, '64M')
    real.qemu_img('rebase', '-q', '-u', '-F', 'qcow2', '-b', other, template)
    inst = _instance(drv._resolver.decide('qcow2'), image_id, 'qcow2')
    with pytest.raises(nova_exception.InvalidDiskInfo,
                       match='safety check'):
        _make_root_disk(drv, inst, image_id)
    assert not os.path.exists(libvirt_utils.get_instance_path(inst) +
                              '/disk')


def _flat_instances(driver, glance, tmp_path, fmt, image_size, count):
    """A Flat driver, an image of ``fmt`` served, and ``count`` instances
    of it with their directories made (as _create_image makes them)."""
    image_id = str(uuid.uuid4())
    src = str(tmp_path / ('img.' + fmt))
    real.make_image(src, fmt, image_size)
    glance[image_id] = (src, fmt)
    drv = driver(images_type='flat', images_type_mapping='')
    insts = [_instance(drv._resolver.decide(fmt), image_id, fmt)
             for _ in range(count)]
    for inst in insts:
        os.makedirs(libvirt_utils.get_instance_path(inst))
    return drv, image_id, insts


@pytest.mark.parametrize('fmt', ['raw', 'qcow2'])
def test_a_flat_disk_of_its_templates_size_is_not_resized(
        driver, glance, tmp_path, processes, fmt):
    # Issue 15: the flavor's root disk is the image's size. Stock's resize
    # (disk.extend) runs qemu-img info on the copy to find that out and
    # leaves it, and its correct_format runs one more for the disk's format
    # (kept in disk.info): both are read here.
    drv, image_id, (inst,) = _flat_instances(driver, glance, tmp_path, fmt,
                                             64 * MiB, 1)
    processes.start()
    disk = _make_root_disk(drv, inst, image_id)
    processes.stop()
    on_disk = [r for r in processes if disk.path in r and 'qemu-img' in r]
    assert on_disk == []
    info = real.qemu_img_info(disk.path)
    assert (info['format'], info['virtual-size']) == ('raw', 64 * MiB)
    assert disk.driver_format == 'raw'
    with open(disk.disk_info_path) as f:
        assert json.load(f) == {disk.path: 'raw'}


@pytest.mark.parametrize('fmt', ['raw', 'qcow2'])
def test_a_flat_disk_from_a_cached_template_reads_its_sizes_here(
        driver, glance, tmp_path, processes, fmt):
    # Stock's Flat asks qemu-img info for the template's size twice
    # (verify_base_size, Image.cache); both are read in this process. The
    # rest is stock's: its copy and its resize (disk.extend), and its disk
    # is the same.
    drv, image_id, insts = _flat_instances(driver, glance, tmp_path, fmt,
                                           32 * MiB, 2)
    _make_root_disk(drv, insts[0], image_id)
    processes.start()
    disk = _make_root_disk(drv, insts[1], image_id)
    processes.stop()
    (template,) = _cache_files()
    assert [r for r in processes if 'qemu-img info' in r]
    assert not [r for r in processes
                if 'qemu-img info' in r and template in r], processes
    info = real.qemu_img_info(disk.path)
    assert (info['format'], info['virtual-size']) == ('raw', 64 * MiB)


@pytest.mark.parametrize('fmt', ['raw', 'qcow2'])
def test_a_flat_disk_is_copied_without_a_fork(driver, glance, tmp_path,
                                              processes, monkeypatch, fmt):
    # Issue 15: stock copies the template with ``cp -r`` through oslo's
    # processutils, which forks nova-compute for it; the plugin runs the
    # same command without a fork (spawn.execute), and makes the same disk.
    drv, image_id, insts = _flat_instances(driver, glance, tmp_path, fmt,
                                           64 * MiB, 2)
    _make_root_disk(drv, insts[0], image_id)
    (name,) = _cache_files()
    template = os.path.join(_base_dir(), name)
    forked = []
    execute = processutils.execute
    monkeypatch.setattr(processutils, 'execute',
                        lambda *a, **k: forked.append(a) or execute(*a, **k))
    processes.start()
    disk = _make_root_disk(drv, insts[1], image_id)
    processes.stop()
    assert processes == ['cp -r %s %s' % (template, disk.path)]
    assert forked == []
    by_stock = str(tmp_path / 'by-stock')
    libvirt_utils.copy_image(template, by_stock)
    with open(disk.path, 'rb') as ours, open(by_stock, 'rb') as theirs:
        assert ours.read() == theirs.read()
    ours_st, stock_st = os.stat(disk.path), os.stat(by_stock)
    assert (ours_st.st_size, ours_st.st_mode, ours_st.st_blocks) == (
        stock_st.st_size, stock_st.st_mode, stock_st.st_blocks)
    assert disk.driver_format == 'raw'


def test_a_flat_disk_too_small_for_its_template_is_not_made(
        driver, glance, tmp_path, processes):
    # Stock checks the flavor's size before it copies: nothing is copied
    # for a flavor smaller than the image, the template stays cached.
    drv, image_id, (inst,) = _flat_instances(driver, glance, tmp_path,
                                             'raw', 128 * MiB, 1)
    with pytest.raises(nova_exception.FlavorDiskSmallerThanImage):
        _make_root_disk(drv, inst, image_id)
    assert not os.path.exists(
        os.path.join(libvirt_utils.get_instance_path(inst), 'disk'))
    assert len(_cache_files()) == 1
