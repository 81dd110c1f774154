"""Moves toward a compute that runs no nova-imgtype (issue 12: "a forced
destination (host named by an admin) that lacks it is refused before
anything is touched").

Such a compute reports no ``CUSTOM_IMGTYPE_BACKEND_*`` trait. It would
treat an instance's disks as its own ``images_type``: a pool instance's
volumes ignored and a fresh root disk built from the image, the source's
copy deleted on confirm. The scheduler's ``instance_backend`` request
filter never picks it; these are the source's checks for what bypasses
the scheduler (a forced live migration, microversions 2.30 to 2.67) or a
scheduler without nova-imgtype's request filters.

Placement and the database are mocked (what they answer is the test's
input); stock's methods behind our overrides are mocked and asserted not
called when the move is refused.
"""

from unittest import mock

import pytest
from nova import exception as nova_exception
from nova import objects

from nova_imgtype.virt.libvirt import cold_move
from tests.unit.test_driver import STOCK
from tests.unit.test_driver import _instance
from tests.unit.test_driver import _placement_traits
from tests.unit.test_driver import compute_node  # noqa: F401 - fixture
from tests.unit.test_driver import make_driver  # noqa: F401 - fixture

STOCK_TRAITS = ('COMPUTE_IMAGE_TYPE_QCOW2', 'COMPUTE_IMAGE_TYPE_RAW')
PLUGIN_TRAITS = STOCK_TRAITS + ('CUSTOM_IMGTYPE_BACKEND_QCOW2',)


@pytest.mark.parametrize('storage', ['legacy', 'pools'])
def test_cold_move_to_a_stock_compute_is_refused_before_anything(
        make_driver, compute_node, storage):  # noqa: F811
    drv = make_driver(images_type='qcow2')
    inst = _instance(imgtype_backend='qcow2', imgtype_storage=storage)
    with _placement_traits(*STOCK_TRAITS), \
            mock.patch.object(STOCK, 'power_off') as power_off, \
            mock.patch.object(STOCK, 'migrate_disk_and_power_off') as stock:
        with pytest.raises(nova_exception.InstanceFaultRollback) as e:
            drv.migrate_disk_and_power_off(None, inst, '192.0.2.2', None,
                                           None)
    stock.assert_not_called()
    power_off.assert_not_called()
    reason = str(e.value.inner_exception)
    assert 'host2' in reason and 'nova-imgtype' in reason, reason
    assert 'qcow2' in reason


def test_an_instance_without_a_record_moves_as_in_stock(
        make_driver, compute_node):  # noqa: F811
    drv = make_driver(images_type='qcow2')
    inst = _instance()
    with _placement_traits(*STOCK_TRAITS) as client, \
            mock.patch.object(cold_move.ColdMove, 'send_files',
                              return_value='[]') as moved:
        drv.migrate_disk_and_power_off(None, inst, '192.0.2.2', None, None)
    moved.assert_called_once()
    client.return_value.get_provider_traits.assert_not_called()


def _live_migration(dest='host2'):
    return mock.patch.object(
        objects.MigrationList, 'get_by_filters',
        return_value=[objects.Migration(dest_compute=dest,
                                        status='accepted')])


def _nodes(*uuids):
    return mock.patch.object(
        objects.ComputeNodeList, 'get_all_by_host',
        return_value=[objects.ComputeNode(uuid=u) for u in uuids])


def test_forced_live_migration_to_a_stock_compute_is_refused(make_driver):  # noqa: F811
    drv = make_driver(images_type='qcow2')
    inst = _instance(imgtype_backend='qcow2', imgtype_storage='legacy')
    with _live_migration() as migrations, \
            _nodes('cn-2') as nodes, _placement_traits(*STOCK_TRAITS), \
            mock.patch.object(STOCK, 'check_can_live_migrate_source') as lv:
        with pytest.raises(nova_exception.MigrationPreCheckError) as e:
            drv.check_can_live_migrate_source('ctxt', inst, mock.Mock())
    lv.assert_not_called()
    # The conductor's migration record, still 'accepted' while it checks.
    migrations.assert_called_once_with('ctxt', {
        'instance_uuid': inst.uuid, 'migration_type': 'live-migration',
        'status': ['accepted', 'queued', 'preparing']})
    nodes.assert_called_once_with('ctxt', 'host2')
    assert 'host2' in str(e.value) and 'nova-imgtype' in str(e.value)


def test_live_migration_to_a_compute_with_the_plugin_goes_on(make_driver):  # noqa: F811
    drv = make_driver(images_type='qcow2')
    inst = _instance(imgtype_backend='qcow2', imgtype_storage='legacy')
    with _live_migration(), _nodes('cn-2'), \
            _placement_traits(*PLUGIN_TRAITS) as client, \
            mock.patch.object(STOCK, 'check_can_live_migrate_source',
                              return_value='checked') as lv:
        assert drv.check_can_live_migrate_source(
            'ctxt', inst, mock.Mock()) == 'checked'
    lv.assert_called_once()
    client.return_value.get_provider_traits.assert_called_once_with(
        'ctxt', 'cn-2')


def test_live_migration_of_an_instance_without_a_record(make_driver):  # noqa: F811
    drv = make_driver(images_type='qcow2')
    with _live_migration() as migrations, \
            mock.patch.object(STOCK, 'check_can_live_migrate_source',
                              return_value='checked'):
        assert drv.check_can_live_migrate_source(
            'ctxt', _instance(), mock.Mock()) == 'checked'
    migrations.assert_not_called()
