"""Real: template image handlers through the driver's image backends.

Real: the driver's per-instance backends making qcow2 overlays, qemu-img,
files, oslo.concurrency's external locks, a tmpfs that really fills up,
os-brick's local connector (a file stands for the attached device). Fake:
the image service (IMAGE_API.get/download serve a local file; a download
can be slowed down or cut off) and Cinder's API (attachments recorded in a
dict: no Cinder runs here).
"""

import hashlib
import os
import subprocess
import time
import uuid
from concurrent import futures

import pytest
from nova import context as nova_context
from nova import exception
from nova import objects
from nova.virt.libvirt import imagecache as nova_imagecache
from nova.virt.libvirt import utils as libvirt_utils

from nova_imgtype.virt.libvirt.template_handlers import downloading
from nova_imgtype.virt.libvirt.template_handlers import volume_linking
from nova_imgtype_testing import glance as glance_data
from nova_imgtype_testing import libvirtd as real
from nova_imgtype_testing.cinder import Cinder
from tests.real.test_native_images import MiB
from tests.real.test_native_images import conf  # noqa: F401
from tests.real.test_native_images import driver  # noqa: F401

objects.register_all()
VOLUME_ID = '9d0c5b8e-1f2a-4e3b-8c7d-6a5f4e3d2c1b'
SIZE = 32 * MiB


class ImageService:
    """One image, served from a local file, hashed as Glance does."""

    def __init__(self, path, fmt, locations=()):
        self.path, self.image_id = path, str(uuid.uuid4())
        with open(path, 'rb') as f:
            digest = hashlib.sha512(f.read()).hexdigest()
        self.meta = {'id': self.image_id, 'disk_format': fmt,
                     'container_format': 'bare', 'os_hash_algo': 'sha512',
                     'os_hash_value': digest, 'locations': list(locations)}
        self.downloads = 0
        self.cut_after = None
        self.delay = 0.0

    def get(self, context, image_id, include_locations=False):
        return dict(self.meta)

    def download(self, context, image_id, data=None, trusted_certs=None):
        # As Nova's download over glanceclient: chunks verified as read.
        self.downloads += 1
        read = 0
        for chunk in glance_data.chunks(self.path, self.meta, MiB):
            time.sleep(self.delay)
            read += len(chunk)
            if self.cut_after is not None and read > self.cut_after:
                raise OSError('connection reset by peer')
            data.write(chunk)


@pytest.fixture
def serve(monkeypatch):
    def serve(service):
        for module in (downloading, volume_linking):
            monkeypatch.setattr(module.IMAGE_API, 'get', service.get)
        monkeypatch.setattr(downloading.IMAGE_API, 'download',
                            service.download)
        return service
    return serve


@pytest.fixture
def brick_in_process():
    from os_brick import privileged
    privileged.default.set_client_mode(False)
    yield
    privileged.default.set_client_mode(True)


def _instance(drv, image_id, fmt):
    inst = objects.Instance(
        uuid=str(uuid.uuid4()), image_ref=image_id, task_state=None,
        vm_state='building', trusted_certs=None, migration_context=None,
        system_metadata={'image_disk_format': fmt})
    drv._resolver.record(inst, drv._resolver.decide(fmt))
    return inst


def _root_disk(drv, inst, image_id):
    """What _create_image does for the root disk of an image-backed boot."""
    disk = drv.image_backend.by_name(inst, 'disk')
    drv._try_fetch_image_cache(
        disk, libvirt_utils.fetch_image, nova_context.get_admin_context(),
        nova_imagecache.get_cache_fname(image_id), image_id, inst, 64 * MiB)
    return disk


def _base(config):
    return os.path.join(config.conf.instances_path, '_base')


def test_16_concurrent_builds_download_once(driver, conf,  # noqa: F811
                                            serve, tmp_path):
    src = str(tmp_path / 'img.qcow2')
    real.make_image(src, 'qcow2', SIZE, compressed=True)
    svc = serve(ImageService(src, 'qcow2'))
    svc.delay = 0.01                   # builds overlap the download
    drv = driver(images_type='qcow2', images_type_mapping='qcow2:qcow2',
                 use_storage_pools=False)
    insts = [_instance(drv, svc.image_id, 'qcow2') for _ in range(16)]
    # As nova-compute builds: each in a native thread of its own.
    with futures.ThreadPoolExecutor(16) as pool:
        disks = list(pool.map(lambda i: _root_disk(drv, i, svc.image_id),
                              insts))
    assert svc.downloads == 1
    backing = {real.qemu_img_info(d.path)['full-backing-filename']
               for d in disks}
    assert len(backing) == 1
    assert os.listdir(_base(conf)) == [os.path.basename(backing.pop())]


@pytest.mark.parametrize('kind', ['cut', 'hash', 'full'])
def test_failed_downloads_leave_the_cache_clean(driver, conf,  # noqa: F811
                                                serve, tmp_path, kind):
    src = str(tmp_path / 'img.raw')
    if kind == 'full':
        # Data to fill the 4 MiB below (zeros would be left as holes).
        with open(src, 'wb') as f:
            f.write(os.urandom(SIZE))
    else:
        real.make_image(src, 'raw', SIZE)
    svc = serve(ImageService(src, 'raw'))
    base = _base(conf)
    os.makedirs(base)
    if kind == 'cut':
        svc.cut_after = SIZE // 2
    elif kind == 'hash':
        svc.meta['os_hash_value'] = hashlib.sha512(b'other').hexdigest()
    else:
        # A real full disk: the cache on a 4 MiB tmpfs.
        subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=4m', 'tmpfs',
                        base], check=True)
    try:
        drv = driver(images_type='qcow2', use_storage_pools=False)
        inst = _instance(drv, svc.image_id, 'raw')
        with pytest.raises((exception.NovaException, IOError)) as e:
            _root_disk(drv, inst, svc.image_id)
        assert {'cut': 'connection reset',
                'hash': 'Corrupt image download. Hash was',
                'full': 'No space left'}[kind] in str(e.value)
        assert os.listdir(base) == []
    finally:
        if kind == 'full':
            subprocess.run(['umount', base], check=True)


def test_a_converted_template_is_flushed_by_qemu_img(
        conf, serve, tmp_path, monkeypatch):  # noqa: F811
    """Issue 15: the handler does not fsync a download it converts
    (``downloading.prepare``); the template is qemu-img's output, flushed
    by qemu-img itself as it closes it. This watches, with strace, the real
    ``qemu-img convert`` that Nova's ``convert_image`` runs (with the cache
    mode Nova picks for this file system) flush the file that becomes the
    template, so that a qemu-img which stopped doing so shows up here."""
    from nova.privsep import qemu as privsep_qemu
    from oslo_concurrency import processutils

    src = str(tmp_path / 'img.qcow2')
    real.make_image(src, 'qcow2', SIZE, compressed=True)
    svc = serve(ImageService(src, 'qcow2'))
    conf.config(force_raw_images=True)
    base = tmp_path / '_base'
    base.mkdir()
    trace = str(tmp_path / 'trace')
    execute = processutils.execute
    converts = []

    def traced(*cmd, **kwargs):
        if cmd[:2] == ('qemu-img', 'convert'):
            converts.append(cmd)
            cmd = ('strace', '-f', '-y', '-e', 'trace=fsync,fdatasync',
                   '-o', trace) + cmd
        return execute(*cmd, **kwargs)

    monkeypatch.setattr(privsep_qemu.processutils, 'execute', traced)
    target = str(base / 'tmpl')
    downloading.DownloadingTemplateImageHandler().fetch_image(
        None, svc.image_id, target)

    assert len(converts) == 1
    assert real.qemu_img_info(target)['format'] == 'raw'
    with open(trace) as f:
        flushed = [line for line in f
                   if '<%s.converted>) = 0' % target in line]
    assert flushed, 'qemu-img convert did not flush %s.converted' % target
    assert os.listdir(base) == ['tmpl']


def test_linked_template_backs_the_disk_without_a_copy(
        driver, conf, serve, tmp_path, brick_in_process):  # noqa: F811
    # The attached volume holds the image as Glance's cinder store wrote
    # it: here a file, connected by os-brick's local connector.
    device = str(tmp_path / 'volume')
    chunks = real.make_image(device, 'qcow2', SIZE)
    svc = serve(ImageService(device, 'qcow2', locations=[
        {'url': 'cinder://%s' % VOLUME_ID, 'metadata': {}}]))
    conf.config(template_image_handler='volume-based-linking',
                group='image_cache')
    drv = driver(images_type='qcow2', images_type_mapping='qcow2:qcow2',
                 use_storage_pools=False)
    cinder = drv._template_handler.volume_api = Cinder(device)
    inst = _instance(drv, svc.image_id, 'qcow2')
    disk = _root_disk(drv, inst, svc.image_id)

    assert svc.downloads == 0
    chain = real.qemu_img_info(disk.path, backing_chain=True)
    template = chain[-1]['filename']
    assert os.path.realpath(template) == device      # ends at the device
    assert os.path.islink(template)
    # The cache holds no copy of the data: nothing but the link, which
    # takes at most one file system block (for a long target path).
    entries = [os.path.join(_base(conf), f) for f in os.listdir(_base(conf))
               if f != volume_linking.STATE_DIR]
    assert entries == [template]
    assert os.lstat(template).st_blocks * 512 <= 4096 < SIZE
    digest = real.sha256_of_guest_data(disk.path, 'qcow2')
    assert digest == real.sha256_of_chunks(64 * MiB, chunks)

    # A restart: the link is gone (say the host rebooted), init() brings
    # it back from what was recorded; the disk reads the same data.
    os.unlink(template)
    restarted = driver(images_type='qcow2', use_storage_pools=False,
                       images_type_mapping='qcow2:qcow2')
    restarted._template_handler.volume_api = cinder
    restarted._template_handler.init(_base(conf))
    assert os.path.realpath(template) == device
    assert real.sha256_of_guest_data(disk.path, 'qcow2') == digest

    # Unused: remove_image() disconnects and deletes the attachment.
    assert len(cinder.attachments) == 1
    assert set(cinder.attachments) == cinder.read_only
    restarted._template_handler.remove_image(template)
    assert cinder.attachments == {}
    assert not os.path.lexists(template)
    assert os.path.exists(device)                    # the volume's data
