"""An unshelved qcow2 instance that keeps its image natively is rebased
onto the native template of its original image (issue 29, found by the
ceph gate profile's tempest run: ``test_unshelve_to_specific_host`` and
``test_shelve_paused_server`` failed on a ``qcow2:qcow2`` host without
pools with ``DiskNotFound: _base/<sha1>``, where stock looks for the
original image's template; the plugin keeps it as ``<sha1>_qcow2``).

Stock's steps (its fetch, its ``qemu-img rebase``) mocked; the driver's
choice of template is what is checked.
"""

import os
import uuid
from unittest import mock

import pytest
from nova import exception as nova_exception
from nova.compute import vm_states
from nova.image import glance
from nova.virt.libvirt import imagebackend
from nova.virt.libvirt import imagecache as nova_imagecache
from nova.virt.libvirt import utils as libvirt_utils

from tests.unit.test_driver import STOCK
from tests.unit.test_driver import _instance
from tests.unit.test_driver import make_driver  # noqa: F401 - fixture

ORIGINAL = str(uuid.uuid4())


def _unshelved(drv):
    inst = _instance(vm_state=vm_states.SHELVED_OFFLOADED,
                     imgtype_backend='qcow2', imgtype_native_formats='qcow2',
                     image_base_image_ref=ORIGINAL)
    backend = mock.Mock(spec=imagebackend.Qcow2)
    backend.path = '/instances/%s/disk' % inst.uuid
    return inst, backend


@pytest.mark.parametrize('disk_format,native', [('qcow2', True),
                                                ('raw', False)])
def test_an_unshelved_native_instance_is_rebased_onto_its_native_template(
        make_driver, disk_format, native):  # noqa: F811
    drv = make_driver(images_type='qcow2', images_type_mapping='qcow2:qcow2')
    inst, backend = _unshelved(drv)
    with mock.patch.object(glance.API, 'get',
                           return_value={'disk_format': disk_format}), \
            mock.patch.object(drv, '_try_fetch_image_cache') as fetch, \
            mock.patch.object(STOCK, '_rebase_with_qemu_img') as rebase, \
            mock.patch.object(STOCK, '_rebase_original_qcow2_image') as stock:
        drv._rebase_original_qcow2_image(None, inst, backend)
    if not native:
        # A raw image is the same file either way: stock's own name.
        stock.assert_called_once_with(None, inst, backend)
        rebase.assert_not_called()
        return
    stock.assert_not_called()
    fetch.assert_called_once_with(
        backend, libvirt_utils.fetch_image, None,
        nova_imagecache.get_cache_fname(ORIGINAL), ORIGINAL, inst, None)
    rebase.assert_called_once_with(backend.path, os.path.join(
        drv.image_cache_manager.cache_dir,
        nova_imagecache.get_cache_fname(ORIGINAL) + '_qcow2'))


def test_an_original_image_gone_is_stocks_case(make_driver):  # noqa: F811
    drv = make_driver(images_type='qcow2', images_type_mapping='qcow2:qcow2')
    inst, backend = _unshelved(drv)
    with mock.patch.object(glance.API, 'get', side_effect=(
            nova_exception.ImageNotFound(image_id=ORIGINAL))), \
            mock.patch.object(STOCK, '_rebase_original_qcow2_image') as stock:
        drv._rebase_original_qcow2_image(None, inst, backend)
    # Stock flattens the disk (its own fetch finds no image either).
    stock.assert_called_once_with(None, inst, backend)
