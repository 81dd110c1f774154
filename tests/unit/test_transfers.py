"""ColdMove: which remote filesystem a cold move uses, thread by
thread (Nova 34's nova-compute runs each request in a native thread).

Stock's ``migrate_disk_and_power_off`` is a stand-in that records what it
sees; no copy is made (tests/real/test_cold_moves_libvirt makes them).
"""

import threading
from unittest import mock

import pytest
from nova import exception as nova_exception
from nova import objects
from nova.virt.libvirt import utils as libvirt_utils
from nova.virt.libvirt.volume import remotefs

from nova_imgtype.virt.libvirt import cold_move
from nova_imgtype.virt.libvirt import remote_storage
from nova_imgtype_testing import drivers
from tests.unit.test_driver import STOCK
from tests.unit.test_driver import _instance
from tests.unit.test_driver import make_driver  # noqa: F401 - fixture

REACH = mock.patch.object(cold_move.ColdMove, 'reach_destination')


def test_a_move_in_one_thread_leaves_other_threads_on_stocks_remotefs(
        make_driver):  # noqa: F811
    drv = make_driver(images_type='qcow2')
    inside = threading.Event()
    release = threading.Event()
    seen = {}

    def stock(self, context, instance, dest, *args, **kwargs):
        seen['mover'] = self._remotefs
        inside.set()
        release.wait(10)
        return '[]'

    inst = _instance()
    inst.flavor = objects.Flavor(extra_specs={})
    with mock.patch.object(STOCK, 'migrate_disk_and_power_off', stock), \
            REACH, \
            mock.patch.object(drv, '_is_path_shared_with',
                              return_value=True), \
            mock.patch.object(objects.Instance, 'image_meta',
                              objects.ImageMeta.from_dict({})):
        mover = threading.Thread(target=drivers.send_files,
                                 args=(drv, inst, 'dest'))
        mover.start()
        assert inside.wait(10)
        # Another request, in another thread, while the move runs.
        other = []
        t = threading.Thread(target=lambda: other.append(drv._remotefs))
        t.start()
        t.join()
        release.set()
        mover.join(10)
    assert isinstance(seen['mover'], remote_storage.LibvirtRemoteFilesystem)
    assert isinstance(other[0], remotefs.RemoteFilesystem)
    assert isinstance(drv._remotefs, remotefs.RemoteFilesystem)


def test_a_vtpm_instance_moves_the_stock_way(make_driver):  # noqa: F811
    drv = make_driver(images_type='qcow2')
    inst = _instance()
    inst.flavor = objects.Flavor(extra_specs={'hw:tpm_version': '2.0',
                                              'hw:tpm_model': 'tpm-crb'})
    seen = {}

    def stock(self, context, instance, dest, *args, **kwargs):
        seen['remotefs'] = self._remotefs
        return '[{"path": "/x/disk"}]'

    with mock.patch.object(STOCK, 'migrate_disk_and_power_off', stock), \
            REACH as reach, \
            mock.patch.object(objects.Instance, 'image_meta',
                              objects.ImageMeta.from_dict({})):
        assert drivers.send_files(drv, inst, 'dest') == \
            '[{"path": "/x/disk"}]'
    # Stock's SSH copies its TPM state; nothing of the libvirt path ran.
    assert isinstance(seen['remotefs'], remotefs.RemoteFilesystem)
    reach.assert_not_called()


def _refused_by_stock(self, context, instance, dest, *args, **kwargs):
    # Stock's own refusal, before it keeps the directory as _resize.
    raise nova_exception.InstanceFaultRollback(
        nova_exception.ResizeError(reason='Unable to resize disk down.'))


@pytest.mark.parametrize('made', [True, False])
def test_a_refused_move_removes_the_directory_it_made_there(
        make_driver, made):  # noqa: F811
    drv = make_driver(images_type='qcow2')
    inst = _instance()
    inst.flavor = objects.Flavor(extra_specs={})
    inst_base = libvirt_utils.get_instance_path(inst)
    with mock.patch.object(STOCK, 'migrate_disk_and_power_off',
                           _refused_by_stock), \
            mock.patch.object(cold_move.ColdMove, 'reach_destination',
                              lambda move: setattr(move, 'made', made)), \
            mock.patch.object(remote_storage.LibvirtRemoteFilesystem,
                              'remove_dir') as remove_dir, \
            mock.patch.object(objects.Instance, 'image_meta',
                              objects.ImageMeta.from_dict({})):
        with pytest.raises(nova_exception.InstanceFaultRollback):
            drivers.send_files(drv, inst, 'dest')
    if made:
        remove_dir.assert_called_once_with('dest', inst_base)
    else:
        # Shared with the destination: nothing was made there.
        remove_dir.assert_not_called()
