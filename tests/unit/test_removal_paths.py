"""Removal paths (issue 12, defect 6): stock's cleanup always runs, one
failure never stops the image cache pass, and errors name what failed."""

import logging
import os
import time
from unittest import mock

import pytest

from nova_imgtype import exception
from nova_imgtype.virt.libvirt import imagecache
from tests.unit.test_driver import STOCK
from tests.unit.test_driver import _instance
from tests.unit.test_driver import make_driver  # noqa: F401 - fixture


@pytest.mark.parametrize('sysmeta,failing', [
    ({'imgtype_backend': 'qcow2', 'imgtype_storage': 'pools'},
     '_disks.delete_pool_volumes'),
    ({'imgtype_backend': 'lvm', 'imgtype_storage': 'legacy'},
     '_cleanup_lvm'),
])
def test_stock_cleanup_runs_when_our_disks_cannot_be_removed(
        make_driver, sysmeta, failing):  # noqa: F811
    drv = make_driver(images_type='qcow2')
    inst = _instance(**sysmeta)
    error = exception.StorageUnavailable(pool='nova-disks-pool',
                                         reason='libvirtd is down')
    with mock.patch.object(STOCK, '_cleanup') as stock, \
            mock.patch.object(
                drv._disks if '.' in failing else drv,
                failing.rpartition('.')[2], side_effect=error):
        with pytest.raises(exception.StorageUnavailable,
                           match='nova-disks-pool.*libvirtd is down'):
            drv._cleanup(None, inst, None, cleanup_instance_dir=True,
                         cleanup_instance_disks=True)
    # VIFs, volume connections, the instance directory and the domain.
    stock.assert_called_once()
    assert stock.call_args.kwargs['cleanup_instance_dir'] is True


def test_pool_volumes_go_after_the_domain(make_driver):  # noqa: F811
    drv = make_driver(images_type='qcow2')
    inst = _instance(imgtype_backend='qcow2', imgtype_storage='pools')
    calls = []
    def stock(*args, **kwargs):
        calls.append('stock')

    with mock.patch.object(STOCK, '_cleanup', side_effect=stock), \
            mock.patch.object(drv._disks, 'delete_pool_volumes',
                              side_effect=lambda i: calls.append('volumes')):
        drv._cleanup(None, inst, None, cleanup_instance_disks=True)
        drv._cleanup(None, inst, None, cleanup_instance_disks=False)
    assert calls == ['stock', 'volumes', 'stock']


def test_one_template_that_cannot_go_does_not_stop_the_pass(
        conf, tmp_path, caplog):
    conf.config(group='image_cache',
                remove_unused_original_minimum_age_seconds=0)
    conf.config(group='oslo_concurrency', lock_path=str(tmp_path / 'locks'))
    handler = mock.Mock()
    handler.remove_image.side_effect = [OSError(13, 'Permission denied'),
                                        None]
    manager = imagecache.ImageCacheManager(set, handler)
    files = [str(tmp_path / name) for name in ('a' * 40, 'b' * 40)]
    for path in files:
        with open(path, 'w'):
            pass
        os.utime(path, (time.time() - 10, time.time() - 10))
        manager.originals.append(path)
    with caplog.at_level(logging.ERROR):
        for path in files:
            manager._remove_base_file(path)
    assert [c.args[0] for c in handler.remove_image.call_args_list] == files
    assert 'Failed to remove template %s' % files[0] in caplog.text
    assert 'Permission denied' in caplog.text
