"""PoolSnapshots alone: no driver; stock's steps and the image API are a
recording fake, the root volume a fake that writes its snapshot file."""

import uuid
from unittest import mock

import nova.conf
import pytest
from nova import objects
from nova.compute import task_states

from nova_imgtype.virt.libvirt import pool_snapshots
from nova_imgtype.virt.libvirt import resolver as resolver_mod

CONF = nova.conf.CONF
objects.register_all()


class _Disk:
    volume_name = 'u_disk'
    volume_format = 'qcow2'

    def __init__(self, calls, fail=False):
        self._calls = calls
        self._fail = fail

    def snapshot_extract(self, target, out_format):
        self._calls.append(('extract', out_format))
        if self._fail:
            raise OSError('copy failed')
        with open(target, 'wb') as f:
            f.write(b'snapshot data')


@pytest.fixture
def snapshots(conf, tmp_path):
    conf.config(group='libvirt', images_type='qcow2',
                snapshots_directory=str(tmp_path))
    calls = []
    stock = mock.Mock()
    stock.guest.return_value = 'guest'
    stock.power_state.return_value = 1
    stock.image_api.get.return_value = {'name': 'snap'}
    stock.create_snapshot_metadata.return_value = {'meta': 1}
    stock.suspend_guest_for_snapshot.side_effect = (
        lambda *a: calls.append(('suspend',)))
    stock.resume_guest_after_snapshot.side_effect = (
        lambda *a: calls.append(('resume',)))
    stock.image_api.update.side_effect = (
        lambda ctx, image_id, meta, f: calls.append(('upload', f.read())))
    backend = mock.Mock()
    made = pool_snapshots.PoolSnapshots(
        resolver_mod.BackendResolver(CONF), backend, stock, CONF)
    return made, backend, stock, calls


def _instance(**sysmeta):
    return objects.Instance(uuid=str(uuid.uuid4()), system_metadata=sysmeta,
                            image_ref=str(uuid.uuid4()))


@pytest.mark.parametrize('storage,applies', [
    ('pools', True), ('legacy', False)])
def test_only_an_instance_on_pools_is_snapshotted_here(snapshots, storage,
                                                       applies):
    made = snapshots[0]
    inst = _instance(imgtype_backend='qcow2', imgtype_storage=storage)
    assert made.applies(inst) is applies


def test_the_guest_is_suspended_around_the_copy_then_uploaded(snapshots):
    made, backend, stock, calls = snapshots
    backend.by_name.return_value = _Disk(calls)
    states = []
    made.take(None, _instance(imgtype_backend='qcow2',
                              imgtype_storage='pools'), 'img',
              lambda **kw: states.append(kw['task_state']))
    assert calls == [('suspend',), ('extract', 'qcow2'), ('resume',),
                     ('upload', b'snapshot data')]
    assert states == [task_states.IMAGE_PENDING_UPLOAD,
                      task_states.IMAGE_UPLOADING]
    # Stock's own metadata, in the volume's recorded format.
    assert stock.create_snapshot_metadata.call_args[0][2:] == (
        'qcow2', 'snap')


def test_a_failed_copy_resumes_the_guest_and_uploads_nothing(snapshots,
                                                             tmp_path):
    made, backend, _stock, calls = snapshots
    backend.by_name.return_value = _Disk(calls, fail=True)
    with pytest.raises(OSError, match='copy failed'):
        made.take(None, _instance(imgtype_backend='qcow2',
                                  imgtype_storage='pools'), 'img',
                  lambda **kw: None)
    assert calls == [('suspend',), ('extract', 'qcow2'), ('resume',)]
    # Its temporary directory is gone too.
    assert list(tmp_path.iterdir()) == []


def test_snapshot_image_format_is_the_operators(snapshots, conf):
    made, backend, stock, calls = snapshots
    conf.config(group='libvirt', snapshot_image_format='raw')
    backend.by_name.return_value = _Disk(calls)
    made.take(None, _instance(imgtype_backend='qcow2',
                              imgtype_storage='pools'), 'img',
              lambda **kw: None)
    assert ('extract', 'raw') in calls
