"""ColdMove and ColdMoves alone: no driver; stock's steps a fake, the
instance directory a temporary one, the copies through libvirt mocked
(tests/real/test_cold_moves_libvirt makes them)."""

import json
import os
import uuid
from unittest import mock

import libvirt
import nova.conf
import pytest
from nova import exception as nova_exception
from nova import objects

from nova_imgtype import exception
from nova_imgtype.virt.libvirt import cold_move
from nova_imgtype.virt.libvirt import cold_moves
from nova_imgtype.virt.libvirt import remote_storage
from nova_imgtype.virt.libvirt import resolver as resolver_mod

CONF = nova.conf.CONF
objects.register_all()


@pytest.fixture
def stock():
    steps = mock.Mock()
    steps.live_migration_uri.side_effect = lambda dest: 'qemu+x://%s' % dest
    steps.is_path_shared_with.return_value = False
    return steps


@pytest.fixture
def instance(conf, tmp_path):
    conf.config(instances_path=str(tmp_path))
    inst = objects.Instance(uuid=str(uuid.uuid4()), system_metadata={},
                            flavor=objects.Flavor(extra_specs={}),
                            image_ref=str(uuid.uuid4()))
    os.makedirs(tmp_path / inst.uuid)
    inst.save = mock.Mock()
    return inst


def test_a_shared_instance_directory_is_not_made_there(instance, stock):
    stock.is_path_shared_with.return_value = True
    move = cold_move.ColdMove(instance, 'dest', stock)
    with mock.patch.object(remote_storage.LibvirtRemoteFilesystem,
                           'create_dir') as create_dir:
        move.reach_destination()
    create_dir.assert_not_called()
    assert move.made is False


def test_an_unreachable_destination_rolls_back_naming_it(instance, stock):
    move = cold_move.ColdMove(instance, 'dest', stock)
    with mock.patch.object(remote_storage.LibvirtRemoteFilesystem,
                           'create_dir',
                           side_effect=libvirt.libvirtError('refused')):
        with pytest.raises(nova_exception.InstanceFaultRollback) as e:
            move.reach_destination()
    assert 'qemu+x://dest' in str(e.value.inner_exception)
    assert move.made is False


def _stock_move(instance, tmp_path, disk_info):
    """Stock's move as far as the disks go: the directory kept as
    _resize, the disks it lists."""
    def move():
        inst_base = str(tmp_path / instance.uuid)
        os.rename(inst_base, inst_base + '_resize')
        return json.dumps(disk_info)
    return move


def test_a_failed_copy_puts_the_source_back_and_rolls_back(instance, stock,
                                                           tmp_path):
    inst_base = str(tmp_path / instance.uuid)
    with open(os.path.join(inst_base, 'disk.info'), 'w') as f:
        f.write('{}')
    move = cold_move.ColdMove(instance, 'dest', stock)
    failed = exception.DiskCopyFailed(src='disk', host='dest',
                                      target='disk', reason='gone')
    with mock.patch.object(remote_storage.LibvirtRemoteFilesystem,
                           'create_dir'), \
            mock.patch.object(remote_storage, 'send', side_effect=failed):
        with pytest.raises(nova_exception.InstanceFaultRollback,
                           match='gone'):
            move.send_files(_stock_move(instance, tmp_path, []))
    # Stock's own clean-up ran, with what the move found.
    stock.cleanup_remote_migration.assert_called_once_with(
        'dest', inst_base, inst_base + '_resize', False)
    assert move.made is True


def test_the_disks_stock_lists_are_withheld_from_it_and_sent(instance,
                                                             stock,
                                                             tmp_path):
    inst_base = str(tmp_path / instance.uuid)
    listed = [{'path': os.path.join(inst_base, 'disk'), 'type': 'qcow2'},
              {'path': os.path.join(inst_base, 'disk.swap'), 'type': 'raw'}]
    sent = []

    def stock_move():
        # What the driver's _get_instance_disk_info gives stock within
        # the move: nothing to copy; the plugin gets stock's list.
        from nova_imgtype.stock import withheld_disks
        assert withheld_disks.answer(listed) == []
        os.rename(inst_base, inst_base + '_resize')
        return '[]'

    with mock.patch.object(remote_storage.LibvirtRemoteFilesystem,
                           'create_dir'), \
            mock.patch.object(remote_storage, 'send',
                              lambda remote, dest, copies: sent.extend(
                                  copies)):
        out = cold_move.ColdMove(instance, 'dest', stock).send_files(
            stock_move)
    assert json.loads(out) == listed
    # Swap is made anew there, as stock does.
    assert sent == [(os.path.join(inst_base + '_resize', 'disk'),
                     os.path.join(inst_base, 'disk'), False)]


@pytest.fixture
def moves(conf):
    conf.config(group='libvirt', images_type='qcow2',
                use_storage_pools=False)
    conf.config(host='host1')
    return cold_moves.ColdMoves(resolver_mod.BackendResolver(CONF),
                                mock.Mock(), mock.Mock(), CONF)


def test_an_lvm_instance_is_refused_before_stock_moves(moves, instance):
    instance.system_metadata = {'imgtype_backend': 'lvm',
                                'imgtype_storage': 'legacy'}
    stock_move = mock.Mock()
    with pytest.raises(nova_exception.InstanceFaultRollback,
                       match='LVM'):
        moves.migrate(None, instance, 'dest', False, stock_move)
    stock_move.assert_not_called()


@pytest.mark.parametrize('backend,named', [
    # A raw file of a qcow2 instance is recorded raw (stock would convert
    # it after opening it with its Qcow2 class); a qcow2 file of a flat
    # instance qcow2.
    ('qcow2', 'disk.local=raw'),
    ('flat', 'disk=qcow2'),
])
def test_stock_converts_no_disk_the_record_names(
        moves, instance, tmp_path, backend, named):
    instance.system_metadata = {'imgtype_backend': backend,
                                'imgtype_storage': 'legacy'}
    inst_base = tmp_path / instance.uuid
    infos = []
    for name, fmt in (('disk', 'qcow2'), ('disk.local', 'raw')):
        (inst_base / name).write_bytes(b'')
        infos.append({'path': str(inst_base / name), 'type': fmt})
    out = moves.finish(instance, json.dumps(infos), False)
    assert [os.path.basename(i['path']) for i in json.loads(out)] == ['disk']
    assert instance.system_metadata['imgtype_disk_formats'] == named
    with open(inst_base / 'disk.info') as f:
        assert json.load(f) == {str(inst_base / 'disk'): 'qcow2',
                                str(inst_base / 'disk.local'): 'raw'}


def test_a_pool_instance_arriving_on_a_host_without_pools_is_files(
        moves, instance):
    instance.system_metadata = {'imgtype_backend': 'qcow2',
                                'imgtype_storage': 'pools',
                                'imgtype_pool': 'nova-disks-pool'}
    moves.finish(instance, '[]', False)
    recorded = moves._resolver.recorded(instance)
    assert (recorded.backend, recorded.storage) == ('qcow2',
                                                    resolver_mod.LEGACY)
    instance.save.assert_called()
