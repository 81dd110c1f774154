"""Native image cache: fetch without conversion, same safety checks.

The image service is faked (``images.fetch`` copies a local file and the
image metadata is a dict), qemu-img and the format inspector are real.
"""

import os
import shutil
import subprocess

import pytest
from nova import exception
from nova.virt import images

from nova_imgtype.virt.libvirt import imagecache

IMAGE_ID = 'c8b1a2e4-4a8e-4d1e-9f39-6a8d4e0c1b11'


def qemu_img(*args):
    return subprocess.run(('qemu-img',) + args, check=True,
                          capture_output=True, text=True).stdout


@pytest.fixture
def glance(monkeypatch, tmp_path):
    """Serve local files as images: {image_id: (path, disk_format)}."""
    served = {}

    def fetch(context, image_href, path, trusted_certs=None):
        shutil.copyfile(served[image_href][0], path)

    def get(context, image_href):
        return {'id': image_href, 'disk_format': served[image_href][1],
                'container_format': 'bare'}

    monkeypatch.setattr(images, 'fetch', fetch)
    monkeypatch.setattr(imagecache.IMAGE_API, 'get', get)
    return served


def _qcow2(tmp_path, name='img.qcow2', *opts):
    path = str(tmp_path / name)
    qemu_img('create', '-f', 'qcow2', *opts, path, '16M')
    return path


def test_native_fetch_keeps_qcow2(conf, glance, tmp_path):
    glance[IMAGE_ID] = (_qcow2(tmp_path), 'qcow2')
    target = str(tmp_path / 'cache')
    imagecache.fetch_native(None, target, IMAGE_ID, 'qcow2')
    assert images.qemu_img_info(target).file_format == 'qcow2'
    assert not os.path.exists(target + '.part')


def test_native_cache_name_differs_from_stock():
    stock = imagecache.imagecache.get_cache_fname(IMAGE_ID)
    native = imagecache.native_cache_fname(IMAGE_ID, 'qcow2')
    assert native != stock and native.startswith(stock + '_')
    assert imagecache.is_native_cache_fname(native, IMAGE_ID)
    assert not imagecache.is_native_cache_fname(stock, IMAGE_ID)
    # stock's resized-base names are not ours
    assert not imagecache.is_native_cache_fname(stock + '_10737418240',
                                                IMAGE_ID)


@pytest.mark.parametrize('kind', ['backing', 'data-file'])
def test_unsafe_images_are_rejected_and_leave_nothing(conf, glance,
                                                      tmp_path, kind):
    base = _qcow2(tmp_path, 'base.qcow2')
    if kind == 'backing':
        bad = _qcow2(tmp_path, 'bad.qcow2', '-b', base, '-F', 'qcow2')
    else:
        bad = _qcow2(tmp_path, 'bad.qcow2', '-o',
                     'data_file=%s' % (tmp_path / 'data.raw'))
    glance[IMAGE_ID] = (bad, 'qcow2')
    cache = tmp_path / '_base'
    cache.mkdir()
    with pytest.raises(exception.ImageUnacceptable):
        imagecache.fetch_native(None, str(cache / 'x'), IMAGE_ID, 'qcow2')
    assert os.listdir(cache) == []


def test_content_must_match_disk_format(conf, glance, tmp_path):
    raw = tmp_path / 'img.raw'
    raw.write_bytes(b'\0' * 1024 * 1024)
    glance[IMAGE_ID] = (str(raw), 'qcow2')
    with pytest.raises(exception.ImageUnacceptable):
        imagecache.fetch_native(None, str(tmp_path / 'c'), IMAGE_ID,
                                'qcow2')
    assert not os.path.exists(tmp_path / 'c.part')
    assert not os.path.exists(tmp_path / 'c')
