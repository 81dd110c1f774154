"""LiveMoves alone: no driver; a host without storage pools (its disks
are files), the records as the resolver writes them, stock's steps given
as plain functions, Nova's database calls mocked."""

import uuid
from unittest import mock

import nova.conf
import pytest
from nova import exception as nova_exception
from nova import objects
from oslo_serialization import jsonutils

from nova_imgtype.virt.libvirt import live_moves
from nova_imgtype.virt.libvirt import resolver as resolver_mod

CONF = nova.conf.CONF
objects.register_all()


@pytest.fixture
def moves(conf):
    conf.config(group='libvirt', images_type='qcow2',
                use_storage_pools=False)
    conf.config(host='host1')
    resolver = resolver_mod.BackendResolver(CONF)
    return live_moves.LiveMoves(resolver, mock.Mock(), mock.Mock(), CONF)


def _instance(**sysmeta):
    inst = objects.Instance(uuid=str(uuid.uuid4()), system_metadata=sysmeta)
    inst.instance_relative_path = inst.uuid
    inst.save = mock.Mock()
    return inst


def _migrate_data(**kw):
    values = dict(block_migration=True, is_shared_instance_path=False,
                  is_shared_block_storage=False, instance_relative_path='')
    values.update(kw)
    return objects.LibvirtLiveMigrateData(**values)


@pytest.mark.parametrize('kw,copies', [
    ({}, True),
    ({'block_migration': False}, False),
    ({'is_shared_instance_path': True}, False),
    ({'is_shared_block_storage': True}, False),
])
def test_only_a_block_migration_between_unshared_hosts_copies_disks(
        kw, copies):
    assert live_moves.copies_disks(_migrate_data(**kw)) is copies


def test_an_instance_without_a_record_is_stocks_alone(moves):
    inst = _instance()
    stock = mock.Mock(return_value='stock-result')
    assert moves.arrive(inst, _migrate_data(), '[]', stock) == 'stock-result'
    stock.assert_called_once_with('[]')
    assert moves.arrivals == {}
    inst.save.assert_not_called()


def test_an_arrival_is_made_under_the_assumed_decision_and_recorded(moves):
    inst = _instance(imgtype_backend='flat', imgtype_storage='legacy')
    disk_info = jsonutils.dumps([
        {'path': '/src/%s/disk' % inst.uuid, 'type': 'raw',
         'backing_file': '', 'virt_disk_size': 1 << 20}])
    seen = {}

    def stock(info):
        seen['decision'] = moves._resolver.decision_for(inst)
        seen['info'] = jsonutils.loads(info)
        return 'made'

    assert moves.arrive(inst, _migrate_data(), disk_info, stock) == 'made'
    # Files on this host, named where stock makes them here.
    assert seen['decision'].storage == resolver_mod.LEGACY
    assert [i['path'].endswith('/%s/disk' % inst.uuid)
            for i in seen['info']] == [True]
    # This host keeps it, and the source can read where the disks are.
    assert moves.arrivals[inst.uuid] == seen['decision']
    storage, _directory = moves._resolver.recorded_arrival(inst, 'host1')
    assert storage == resolver_mod.LEGACY
    inst.save.assert_called_once()


def test_a_rollback_forgets_the_arrival_and_removes_under_it(moves):
    inst = _instance(imgtype_backend='qcow2', imgtype_storage='legacy')
    moves.arrivals[inst.uuid] = moves._resolver.arrival(
        moves._resolver.recorded(inst))
    fresh = _instance(**dict(inst.system_metadata))
    fresh.uuid = inst.uuid
    seen = []
    with mock.patch.object(objects.Instance, 'get_by_uuid',
                           return_value=fresh):
        moves.roll_back(None, inst, lambda: seen.append(
            moves._resolver.decision_for(inst)))
    assert inst.uuid not in moves.arrivals
    assert [d.storage for d in seen] == [resolver_mod.LEGACY]


def test_a_pool_instance_to_a_host_that_made_nothing_is_refused(moves):
    inst = _instance(imgtype_backend='qcow2', imgtype_storage='pools')
    with mock.patch.object(objects.Instance, 'get_by_uuid',
                           return_value=_instance()):
        with pytest.raises(nova_exception.MigrationError,
                           match='host2 made no disks'):
            moves.guest_for_destination(None, inst, 'host2',
                                        _migrate_data(), mock.Mock())


def test_a_file_instance_to_a_host_that_made_nothing_keeps_its_guest(
        moves):
    inst = _instance(imgtype_backend='qcow2', imgtype_storage='legacy')
    guest = mock.Mock()
    with mock.patch.object(objects.Instance, 'get_by_uuid',
                           return_value=_instance()):
        assert moves.guest_for_destination(
            None, inst, 'host2', _migrate_data(), guest) is guest


@pytest.mark.parametrize('dest_type,shared,expected', [
    ('qcow2', True, True),
    ('qcow2', False, False),     # the backend is not shared storage
    ('rbd', True, False),        # the destination runs another backend
    (None, True, False),         # a destination without nova-imgtype
])
def test_block_storage_is_shared_on_the_same_shared_backend(
        moves, dest_type, shared, expected):
    inst = _instance(imgtype_backend='qcow2', imgtype_storage='legacy')
    data = objects.LibvirtLiveMigrateData()
    if dest_type:
        data.image_type = dest_type
    assert moves.shares_block_storage(inst, data, lambda: shared) is expected


def test_the_destination_names_the_backend_it_serves(moves):
    inst = _instance(imgtype_backend='qcow2', imgtype_storage='legacy')
    assert moves.check_destination(inst) == 'qcow2'


def test_a_backend_this_host_cannot_serve_is_refused_before_anything(
        moves):
    inst = _instance(imgtype_backend='ploop', imgtype_storage='legacy')
    with pytest.raises(nova_exception.MigrationPreCheckError,
                       match='ploop'):
        moves.check_destination(inst)


def test_the_host_records_the_disks_it_made_before_stocks_last_step(moves):
    inst = _instance(imgtype_backend='flat', imgtype_storage='legacy')
    arrival = resolver_mod.BackendDecision('qcow2', (), resolver_mod.LEGACY,
                                           None)
    moves.arrivals[inst.uuid] = arrival
    fresh = _instance(**dict(inst.system_metadata))
    fresh.uuid = inst.uuid
    with mock.patch.object(objects.Instance, 'get_by_uuid',
                           return_value=fresh):
        moves.record_here(None, inst, block_migration=True)
    assert inst.uuid not in moves.arrivals
    recorded = moves._resolver.recorded(inst)
    assert (recorded.backend, recorded.storage) == ('qcow2',
                                                    resolver_mod.LEGACY)
