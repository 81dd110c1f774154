"""Live block migration of instances on pools and files.

The XML and disk-info rewriting is tested on its own; the driver's
overrides on the embedded test driver's pools (``test:///default``), with
the stock method each one delegates to mocked: what is asserted is what our
override made, recorded and handed to stock.
"""

import threading
import uuid
from unittest import mock

import libvirt
import pytest
from lxml import etree
from nova import exception as nova_exception
from nova import objects
from oslo_serialization import jsonutils

from nova_imgtype.stock import migration_xml
from nova_imgtype.virt.libvirt import live_migration as lm
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import remote_storage
from nova_imgtype.virt.libvirt import resolver as resolver_mod
from tests.unit.test_driver import STOCK
from tests.unit.test_driver import _instance
from tests.unit.test_driver import make_driver  # noqa: F401 - fixture
from tests.unit.test_driver import test_pools  # noqa: F401 - fixture

UUID = '0d5e3d55-86a3-4a34-a0b0-5b0b5d7e3c11'
DOMAIN = f'''<domain type='kvm'>
  <name>instance-00000001</name>
  <metadata>
    <nova:instance xmlns:nova="http://openstack.org/xmlns/libvirt/nova/1.1">
      <nova:name>vm</nova:name>
    </nova:instance>
  </metadata>
  <devices>
    <disk type='volume' device='disk'>
      <driver name='qemu' type='qcow2' cache='none'/>
      <source pool='nova-disks-pool' volume='{UUID}_disk' index='2'/>
      <backingStore type='file' index='3'>
        <format type='qcow2'/>
        <source file='/i/_base/abc_qcow2'/>
      </backingStore>
      <target dev='vda' bus='virtio'/>
    </disk>
    <disk type='file' device='disk'>
      <driver name='qemu' type='raw'/>
      <source file='/i/{UUID}/disk.local'/>
      <target dev='vdb' bus='virtio'/>
    </disk>
    <disk type='file' device='cdrom'>
      <driver name='qemu' type='raw'/>
      <source file='/i/{UUID}/disk.config'/>
      <target dev='hda' bus='ide'/>
      <readonly/>
    </disk>
    <disk type='block' device='disk'>
      <driver name='qemu' type='raw'/>
      <source dev='/dev/sdx'/>
      <target dev='vdc' bus='virtio'/>
      <serial>cinder-volume</serial>
    </disk>
    <disk type='volume' device='disk'>
      <driver name='qemu' type='raw'/>
      <source pool='nova-disks-pool' volume='another-instance_disk'/>
      <target dev='vdd' bus='virtio'/>
    </disk>
  </devices>
</domain>'''


def _disks_by_target(xml):
    root = etree.fromstring(xml)
    return {d.find('target').get('dev'): d
            for d in root.findall('./devices/disk')}


def test_local_disks_are_the_instances_own_writable_disks():
    disks = lm.local_disks(DOMAIN, UUID, '/i/' + UUID)
    assert disks == [
        lm.LocalDisk('vda', 'disk', 'volume', 'nova-disks-pool'),
        lm.LocalDisk('vdb', 'disk.local', 'file',
                     path='/i/%s/disk.local' % UUID)]


def test_the_read_only_config_drive_is_found_apart():
    assert lm.config_drive(DOMAIN, UUID, '/i/' + UUID) == lm.LocalDisk(
        'hda', 'disk.config', 'file', path='/i/%s/disk.config' % UUID)
    # A pool instance's drive is a volume of its pool.
    pooled = DOMAIN.replace(
        "<disk type='file' device='cdrom'>\n      <driver name='qemu' "
        "type='raw'/>\n      <source file='/i/%s/disk.config'/>" % UUID,
        "<disk type='volume' device='cdrom'>\n      <driver name='qemu' "
        "type='raw'/>\n      <source pool='p' volume='%s_disk.config'/>"
        % UUID)
    assert pooled != DOMAIN
    assert lm.config_drive(pooled, UUID, '/i/' + UUID) == lm.LocalDisk(
        'hda', 'disk.config', 'volume', 'p')
    # A vfat drive is writable: libvirt copies it with the other disks.
    vfat = DOMAIN.replace("device='cdrom'", "device='disk'").replace(
        '<readonly/>', '')
    assert lm.config_drive(vfat, UUID, '/i/' + UUID) is None
    assert 'disk.config' in [d.name for d in lm.local_disks(
        vfat, UUID, '/i/' + UUID)]


def test_destination_xml_puts_the_disks_where_a_host_without_pools_has_them():
    disks = lm.local_disks(DOMAIN, UUID, '/i/' + UUID)
    xml = lm.destination_xml(DOMAIN, UUID, disks, resolver_mod.LEGACY,
                             '/j/' + UUID)
    got = _disks_by_target(xml)
    assert got['vda'].get('type') == 'file'
    assert got['vda'].find('source').attrib == {
        'file': '/j/%s/disk' % UUID}
    # libvirt finds the chain of the overlay made there by itself.
    assert got['vda'].find('backingStore') is None
    assert got['vda'].find('driver').get('type') == 'qcow2'
    # <source> stays before <target>, where libvirt writes it.
    assert [c.tag for c in got['vda']] == ['driver', 'source', 'target']
    assert got['vdb'].find('source').get('file') == \
        '/j/%s/disk.local' % UUID
    # What is not the instance's own disk is as it was.
    assert got['hda'].find('source').get('file') == '/i/%s/disk.config' % UUID
    assert got['vdc'].find('source').get('dev') == '/dev/sdx'
    assert got['vdd'].find('source').get('volume') == 'another-instance_disk'
    # Nova's metadata keeps its namespace prefix.
    assert '<nova:name>vm</nova:name>' in xml


def test_destination_xml_names_the_volumes_of_the_destinations_pool():
    disks = lm.local_disks(DOMAIN, UUID, '/i/' + UUID)
    xml = lm.destination_xml(DOMAIN, UUID, disks, resolver_mod.POOLS,
                             '/j/disks')
    got = _disks_by_target(xml)
    for target, name in (('vda', 'disk'), ('vdb', 'disk.local')):
        # By path: libvirt 9.0 copies incrementally only to a disk whose
        # path it finds.
        assert got[target].get('type') == 'file'
        assert got[target].find('source').attrib == {
            'file': '/j/disks/%s_%s' % (UUID, name)}
    # Such a guest, migrated again, still has them as its own disks.
    assert [(d.target, d.name) for d in lm.local_disks(
        xml, UUID, '/j/' + UUID)] == [('vda', 'disk'), ('vdb', 'disk.local')]


def test_an_arrived_guest_is_defined_on_volumes_of_the_pool():
    """Issue 33, 3: the destination XML names the volumes by path for the
    copy; once arrived, the definition names them as volumes of the pool
    again (a cold move lists the stopped guest's disks while it moves the
    volumes out of the pool, and found a path no longer there)."""
    disks = lm.local_disks(DOMAIN, UUID, '/i/' + UUID)
    arrived = lm.destination_xml(DOMAIN, UUID, disks, resolver_mod.POOLS,
                                 '/j/disks')
    defined = lm.persistent_xml(arrived, UUID, 'nova-disks-pool',
                                '/j/disks/')
    got = _disks_by_target(defined)
    for target, name in (('vda', 'disk'), ('vdb', 'disk.local')):
        assert got[target].get('type') == 'volume'
        assert got[target].find('source').attrib == {
            'pool': 'nova-disks-pool', 'volume': '%s_%s' % (UUID, name)}
        assert got[target].find('backingStore') is None
        # The format the guest is given stays the one it ran with.
        assert (got[target].find('driver').get('type') ==
                _disks_by_target(DOMAIN)[target].find('driver').get('type'))
        # <source> where libvirt writes it: after <driver>.
        assert [c.tag for c in got[target]][:2] == ['driver', 'source']
    # What is not a volume of that pool by path stays as it is: another
    # instance's volume, a Cinder volume, a file elsewhere.
    for target in ('vdc', 'vdd'):
        assert (etree.tostring(got[target]) ==
                etree.tostring(_disks_by_target(arrived)[target]))
    assert lm.persistent_xml(arrived, UUID, 'nova-disks-pool',
                             '/elsewhere') == arrived
    # Read again, they are the instance's own disks, as volumes.
    assert [(d.target, d.name, d.source_type) for d in lm.local_disks(
        defined, UUID, '/j/' + UUID)] == [('vda', 'disk', 'volume'),
                                           ('vdb', 'disk.local', 'volume')]


def test_arriving_disk_info_names_the_disks_as_the_destination_does():
    infos = [{'path': '/i/disks/%s_disk' % UUID, 'type': 'qcow2',
              'backing_file': 'abc_qcow2', 'virt_disk_size': 1},
             {'path': '/i/%s/disk.local' % UUID, 'type': 'raw',
              'backing_file': '', 'virt_disk_size': 2}]
    got = lm.arriving_disk_info(infos, UUID, '/j/' + UUID)
    assert [i['path'] for i in got] == ['/j/%s/disk' % UUID,
                                         '/j/%s/disk.local' % UUID]
    assert [i['type'] for i in got] == ['qcow2', 'raw']


def test_retargeted_guest_sends_the_rewritten_xml():
    guest = mock.Mock()
    wrapped = migration_xml.RetargetedGuest(
        guest, lambda xml: xml + '<!--there-->')
    wrapped.migrate('qemu+tcp://h/system', flags=3, destination_xml='<d/>')
    guest.migrate.assert_called_once_with(
        'qemu+tcp://h/system', flags=3, destination_xml='<d/><!--there-->')
    assert wrapped.uuidstr is guest.uuidstr


# -- the resolver -----------------------------------------------------------

@pytest.mark.parametrize('pooled,storage,pool', [
    (True, resolver_mod.POOLS, 'nova-disks-pool'),
    (False, resolver_mod.LEGACY, '')])
def test_arrival_follows_the_destinations_storage(conf, pooled, storage,
                                                  pool):
    conf.config(group='libvirt', images_type='qcow2',
                use_storage_pools=pooled)
    res = resolver_mod.BackendResolver(conf.conf)
    for came in (resolver_mod.BackendDecision('qcow2', ('qcow2',)),
                 resolver_mod.BackendDecision('qcow2', ('qcow2',),
                                              resolver_mod.POOLS,
                                              'elsewhere-pool')):
        got = res.arrival(came)
        assert (got.backend, got.native_formats, got.storage, got.pool) == (
            'qcow2', ('qcow2',), storage, pool)


def test_arrival_keeps_other_backends(conf):
    conf.config(group='libvirt', images_type='qcow2', use_storage_pools=True)
    res = resolver_mod.BackendResolver(conf.conf)
    lvm = resolver_mod.BackendDecision('lvm', ('raw',))
    assert res.arrival(lvm) == lvm


def test_assumed_decision_is_for_this_instance_and_thread_only(conf):
    res = resolver_mod.BackendResolver(conf.conf)
    inst = _instance(imgtype_backend='flat')
    other = _instance(imgtype_backend='flat')
    assumed = resolver_mod.BackendDecision('flat', (), resolver_mod.POOLS,
                                           'p')
    seen = []
    with resolver_mod.BackendResolver.assume(inst, assumed):
        assert res.recorded(inst) == assumed
        assert res.recorded(other).storage == \
            resolver_mod.LEGACY
        t = threading.Thread(target=lambda: seen.append(
            res.recorded(inst)))
        t.start()
        t.join()
    assert seen[0].storage == resolver_mod.LEGACY
    assert res.recorded(inst).storage == \
        resolver_mod.LEGACY


def test_arrival_is_read_for_its_host_only_and_dropped():
    inst = _instance(imgtype_backend='qcow2')
    decision = resolver_mod.BackendDecision('qcow2', (), resolver_mod.POOLS,
                                            'p')
    resolver_mod.BackendResolver.record_arrival(inst, 'host2', decision,
                                                '/d')
    assert resolver_mod.BackendResolver.recorded_arrival(inst,
                                                         'host3') is None
    assert resolver_mod.BackendResolver.recorded_arrival(inst, 'host2') == (
        resolver_mod.POOLS, '/d')
    assert resolver_mod.BackendResolver.drop_arrival(inst)
    assert not resolver_mod.BackendResolver.drop_arrival(inst)
    assert resolver_mod.BackendResolver.recorded_arrival(inst,
                                                         'host2') is None


# -- the driver -------------------------------------------------------------

def _migrate_data(**kw):
    values = dict(block_migration=True, is_shared_instance_path=False,
                  is_shared_block_storage=False,
                  instance_relative_path='')
    values.update(kw)
    return objects.LibvirtLiveMigrateData(**values)


def _pool_driver(make_driver, test_pools, **flags):  # noqa: F811
    drv = test_pools(make_driver(**flags))
    with mock.patch.object(STOCK, 'init_host'):
        drv.init_host('host1')
    return drv


def test_destination_with_pools_makes_volumes(make_driver,  # noqa: F811
                                              test_pools):  # noqa: F811
    drv = _pool_driver(make_driver, test_pools, images_type='qcow2',
                       use_storage_pools=True)
    # A legacy flat instance from a host without pools.
    inst = _instance(imgtype_backend='flat', imgtype_storage='legacy')
    inst.uuid = str(uuid.uuid4())
    inst.instance_relative_path = inst.uuid
    disk_info = jsonutils.dumps([
        {'path': '/src/%s/disk' % inst.uuid, 'type': 'raw',
         'backing_file': '', 'virt_disk_size': 1 << 20},
        {'path': '/src/%s/disk.eph0' % inst.uuid, 'type': 'raw',
         'backing_file': 'ephemeral_1_abc', 'virt_disk_size': 1 << 30}])
    seen = {}

    def stock(self, context, instance, bdi, nwinfo, disk_info, md):
        seen['decision'] = drv._resolver.decision_for(instance)
        seen['disk_info'] = jsonutils.loads(disk_info)
        return md

    # A plain function (not an autospec mock, whose binding of self
    # Nova's test harness changes once imported): called as a method.
    with mock.patch.object(STOCK, 'pre_live_migration', stock):
        drv.pre_live_migration(None, inst, None, None, disk_info,
                               _migrate_data())
    # Stock made the overlays under the decision this host gives it...
    assert (seen['decision'].storage, seen['decision'].pool) == (
        resolver_mod.POOLS, pool_specs.DISKS_POOL)
    assert [i['path'].rsplit('/', 1)[1] for i in seen['disk_info']] == [
        'disk.eph0']
    # ...the empty disk is a volume of the pool, as large as the source's.
    vol = drv._pools.find_volume(drv._pools.get(pool_specs.DISKS_POOL),
                                 '%s_disk' % inst.uuid)
    assert vol is not None and vol.info()[1] == 1 << 20
    # Nothing recorded as the instance's decision yet; the arrival is.
    assert drv._resolver.recorded(inst).storage == resolver_mod.LEGACY
    assert drv._resolver.recorded_arrival(inst, 'host1') == (
        resolver_mod.POOLS, pool_specs.pool_target(drv._pools.get(
            pool_specs.DISKS_POOL)))
    inst.save.assert_called_once()
    # ...and kept by this host, whatever a save elsewhere does to it.
    assert drv._live.arrivals[inst.uuid].storage == resolver_mod.POOLS


def test_an_arrived_guest_is_defined_on_the_pools_volumes(
        make_driver, test_pools):  # noqa: F811
    """Issue 33, 3: once stock ends a block migration's arrival into this
    host's dir pool, the guest (running on its volumes named by path) is
    defined on them as volumes of the pool; an arrival that copied
    nothing (shared storage) is left as stock left it."""
    drv = _pool_driver(make_driver, test_pools, images_type='qcow2',
                       use_storage_pools=True)
    inst = _instance(imgtype_backend='qcow2', imgtype_storage='legacy')
    inst.uuid = UUID
    pool = drv._pools.get(pool_specs.DISKS_POOL)
    directory = pool_specs.pool_target(pool)
    arrived = lm.destination_xml(
        DOMAIN, UUID, lm.local_disks(DOMAIN, UUID, '/i/' + UUID),
        resolver_mod.POOLS, directory)
    guest = mock.Mock()
    guest.get_xml_desc.return_value = arrived
    drv._live.arrivals[UUID] = drv._resolver.arrival(
        drv._resolver.recorded(inst))
    with mock.patch.object(STOCK, 'post_live_migration_at_destination'), \
            mock.patch.object(objects.Instance, 'get_by_uuid',
                              return_value=_instance(
                                  **dict(inst.system_metadata))), \
            mock.patch.object(drv._stock_steps, 'guest', return_value=guest), \
            mock.patch.object(drv._stock_steps, 'define') as define:
        drv.post_live_migration_at_destination(None, inst, None, True,
                                               None)
    guest.get_xml_desc.assert_called_once_with(dump_inactive=True)
    [defined] = define.call_args.args
    assert defined == lm.persistent_xml(arrived, UUID,
                                        pool_specs.DISKS_POOL, directory)
    assert {d.source_type for d in lm.local_disks(
        defined, UUID, '/i/' + UUID)} == {'volume'}

    # Shared storage: stock's arrival alone.
    shared = _instance(imgtype_backend='qcow2', imgtype_storage='pools',
                       imgtype_pool=pool_specs.DISKS_POOL)
    with mock.patch.object(STOCK, 'post_live_migration_at_destination'), \
            mock.patch.object(objects.Instance, 'get_by_uuid',
                              return_value=_instance(
                                  **dict(shared.system_metadata))), \
            mock.patch.object(drv._stock_steps, 'define') as define:
        drv.post_live_migration_at_destination(None, shared, None, False,
                                               None)
    define.assert_not_called()


def test_destination_without_pools_makes_files(make_driver):  # noqa: F811
    drv = make_driver(images_type='flat', use_storage_pools=False)
    inst = _instance(imgtype_backend='qcow2', imgtype_storage='pools',
                     imgtype_pool='nova-disks-pool')
    inst.instance_relative_path = inst.uuid
    disk_info = jsonutils.dumps([
        {'path': '/i/disks/%s_disk' % inst.uuid, 'type': 'qcow2',
         'backing_file': 'abc_qcow2', 'virt_disk_size': 1 << 30}])
    with mock.patch.object(STOCK, 'pre_live_migration') as stock:
        drv.pre_live_migration(None, inst, None, None, disk_info,
                               _migrate_data())
    infos = jsonutils.loads(stock.call_args.args[4])
    assert [i['path'] for i in infos] == [
        '%s/%s/disk' % (drv._resolver._conf.instances_path, inst.uuid)]
    assert drv._resolver.recorded_arrival(inst, 'host1') == (
        resolver_mod.LEGACY,
        '%s/%s' % (drv._resolver._conf.instances_path, inst.uuid))


def test_shared_storage_live_migration_is_stocks(make_driver):  # noqa: F811
    drv = make_driver(images_type='flat', use_storage_pools=False)
    inst = _instance(imgtype_backend='qcow2', imgtype_storage='legacy')
    with mock.patch.object(STOCK, 'pre_live_migration') as stock:
        drv.pre_live_migration(None, inst, None, None, '[]', _migrate_data(
            is_shared_instance_path=True))
    assert stock.call_args.args[4] == '[]'
    inst.save.assert_not_called()


def test_source_refuses_a_pool_instance_to_a_host_that_made_nothing(
        make_driver):  # noqa: F811
    drv = make_driver(images_type='qcow2', use_storage_pools=False)
    inst = _instance(imgtype_backend='qcow2', imgtype_storage='pools')
    with mock.patch.object(objects.Instance, 'get_by_uuid',
                           return_value=_instance()):
        with pytest.raises(nova_exception.MigrationError,
                           match='host2 made no disks'):
            drv._live.guest_for_destination(None, inst, 'host2',
                                            _migrate_data(), mock.Mock())


def _sent(drv, storage, directory, migrate_data, **fill):
    """What the source's _guest_for_destination gives for DOMAIN going to
    host2, which made its disks as ``storage`` in ``directory``:
    (the guest sent, the guest's mock, the mocked config drive copy)."""
    inst = _instance(imgtype_backend='qcow2', imgtype_storage='pools')
    inst.uuid = UUID
    fresh = _instance(**dict(inst.system_metadata))
    drv._resolver.record_arrival(fresh, 'host2', resolver_mod.BackendDecision(
        'qcow2', (), storage, 'nova-disks-pool' if storage ==
        resolver_mod.POOLS else None), directory)
    guest = mock.Mock()
    guest.get_xml_desc.return_value = DOMAIN
    with mock.patch.object(objects.Instance, 'get_by_uuid',
                           return_value=fresh), \
            mock.patch('nova.virt.libvirt.utils.get_instance_path',
                       return_value='/i/' + UUID), \
            mock.patch.object(remote_storage.LibvirtRemoteFilesystem,
                              'fill', **fill) as copy:
        sent = drv._live.guest_for_destination(None, inst, 'host2',
                                               migrate_data, guest)
    return sent, guest, copy


def test_source_sends_the_xml_of_the_destinations_disks(
        make_driver):  # noqa: F811
    drv = make_driver(images_type='qcow2', use_storage_pools=False)
    sent, guest, fill = _sent(drv, resolver_mod.LEGACY, '/j/' + UUID,
                              _migrate_data())
    sent.migrate('uri', destination_xml=DOMAIN)
    xml = guest.migrate.call_args.kwargs['destination_xml']
    vda = _disks_by_target(xml)['vda']
    assert vda.get('type') == 'file'
    assert vda.find('source').get('file') == '/j/%s/disk' % UUID
    # The read-only config drive, which libvirt does not copy, was written
    # into the one the destination made, and the guest there reads it.
    fill.assert_called_once_with('/i/%s/disk.config' % UUID, 'host2',
                                 '/j/%s/disk.config' % UUID)
    hda = _disks_by_target(xml)['hda']
    assert hda.find('source').get('file') == '/j/%s/disk.config' % UUID
    assert hda.find('readonly') is not None


def test_source_sends_the_config_drive_into_the_destinations_pool(
        make_driver):  # noqa: F811
    drv = make_driver(images_type='qcow2', use_storage_pools=False)
    sent, guest, fill = _sent(
        drv, resolver_mod.POOLS, '/j/disks',
        _migrate_data(target_connect_addr='192.0.2.2'))
    # To the address the migration itself connects to.
    fill.assert_called_once_with('/i/%s/disk.config' % UUID, '192.0.2.2',
                                 '/j/disks/%s_disk.config' % UUID)
    sent.migrate('uri', destination_xml=DOMAIN)
    xml = guest.migrate.call_args.kwargs['destination_xml']
    assert _disks_by_target(xml)['hda'].find('source').get('file') == \
        '/j/disks/%s_disk.config' % UUID


def test_a_failed_config_drive_copy_fails_the_migration(
        make_driver):  # noqa: F811
    drv = make_driver(images_type='qcow2', use_storage_pools=False)
    broken = libvirt.libvirtError('cannot recv data: Connection reset')
    with pytest.raises(nova_exception.MigrationError,
                       match='config drive /i/%s/disk.config.*'
                             'Connection reset' % UUID):
        _sent(drv, resolver_mod.LEGACY, '/j/' + UUID, _migrate_data(),
              side_effect=broken)


def test_rollback_removes_what_the_destination_made(
        make_driver, test_pools):  # noqa: F811
    drv = _pool_driver(make_driver, test_pools, images_type='qcow2',
                       use_storage_pools=True)
    inst = _instance(imgtype_backend='flat', imgtype_storage='legacy')
    disks = drv._pools.get(pool_specs.DISKS_POOL)
    drv._pools.create_empty(disks, '%s_disk' % inst.uuid, 'raw', 1 << 20)
    fresh = _instance(**dict(inst.system_metadata))
    drv._resolver.record_arrival(fresh, 'host1', drv._resolver.arrival(
        drv._resolver.recorded(inst)), '/d')
    seen = []

    def stock(self, context, instance, *args, **kwargs):
        seen.append(drv._resolver.decision_for(instance))
        drv._cleanup(context, instance, None, cleanup_instance_disks=True)

    with mock.patch.object(STOCK, 'rollback_live_migration_at_destination',
                           stock), \
            mock.patch.object(STOCK, '_cleanup'), \
            mock.patch.object(objects.Instance, 'get_by_uuid',
                              return_value=fresh):
        drv.rollback_live_migration_at_destination(
            None, inst, None, None, destroy_disks=True,
            migrate_data=_migrate_data())
    assert seen[0].storage == resolver_mod.POOLS
    assert drv._pools.find_volume(disks, '%s_disk' % inst.uuid) is None
    # The arrival record is gone, the instance's own is as it was.
    assert resolver_mod.SYSMETA_ARRIVAL not in fresh.system_metadata
    fresh.save.assert_called_once()
    assert drv._resolver.recorded(inst).storage == resolver_mod.LEGACY


@pytest.mark.parametrize('made_here, arrived, block_migration, copied', [
    (True, True, None, True),
    # Issue 27, 4: the arrival record this host wrote was dropped by a
    # stale copy of the instance saved during the migration, and stock
    # says None for a block migration the API was asked to 'auto'-choose:
    # this host made the disks all the same (files, without pools).
    (True, False, None, True),
    # Made before a restart of this host (its memory is gone): the record.
    (False, True, None, True),
    (False, False, True, True),
    # Shared storage.
    (False, False, False, False),
    (False, False, None, False)])
def test_arrived_instance_records_where_its_disks_are(
        make_driver, test_pools,  # noqa: F811
        made_here, arrived, block_migration, copied):
    drv = test_pools(make_driver(images_type='flat',
                                 use_storage_pools=False))
    inst = _instance(imgtype_backend='qcow2', imgtype_storage='pools',
                     imgtype_pool='nova-disks-pool',
                     imgtype_native_formats='qcow2')
    arrival = drv._resolver.arrival(drv._resolver.recorded(inst))
    if made_here:
        drv._live.arrivals[inst.uuid] = arrival
    fresh = _instance(**dict(inst.system_metadata))
    if arrived:
        drv._resolver.record_arrival(fresh, 'host1', arrival, '/d')
    with mock.patch.object(STOCK, 'post_live_migration_at_destination'), \
            mock.patch.object(objects.Instance, 'get_by_uuid',
                              return_value=fresh):
        drv.post_live_migration_at_destination(None, inst, None,
                                               block_migration, None)
    got = drv._resolver.recorded(inst)
    assert inst.uuid not in drv._live.arrivals
    if copied:
        assert (got.backend, got.native_formats, got.storage, got.pool) == (
            'qcow2', ('qcow2',), resolver_mod.LEGACY, '')
        assert resolver_mod.SYSMETA_ARRIVAL not in fresh.system_metadata
    else:
        # Shared storage: nothing was made here, nothing changes.
        assert (got.storage, got.pool) == (resolver_mod.POOLS,
                                           'nova-disks-pool')


@pytest.mark.parametrize('kind,refused', [
    ('rbd', False),        # shared Ceph volumes: nothing to copy
    ('logical', True),     # not supported: refused naming the instance
])
def test_live_migration_source_check_by_pool_type(
        make_driver, test_pools, kind, refused):  # noqa: F811
    drv = test_pools(make_driver(use_storage_pools=True))
    inst = _instance(imgtype_backend='rbd' if kind == 'rbd' else 'lvm',
                     imgtype_storage='pools',
                     imgtype_pool='nova-disks-pool-%s' % kind)
    # (Which host it goes to: test_stock_destinations.)
    with mock.patch.object(drv._disks, 'instance_pool'), \
            mock.patch.object(objects.MigrationList, 'get_by_filters',
                              return_value=[]), \
            mock.patch('nova_imgtype.virt.libvirt.pool_specs.pool_type',
                       return_value=kind), \
            mock.patch.object(STOCK, 'check_can_live_migrate_source',
                              return_value='checked') as stock:
        if refused:
            with pytest.raises(nova_exception.MigrationPreCheckError,
                               match='logical pools.*' + inst.uuid):
                drv.check_can_live_migrate_source(None, inst, None)
        else:
            assert drv.check_can_live_migrate_source(None, inst,
                                                     None) == 'checked'
    assert stock.called is not refused


def test_shared_rbd_volumes_are_recorded_in_this_hosts_pool(
        make_driver, test_pools):  # noqa: F811
    """The same Ceph pool is ``nova-disks-pool`` on a host whose
    images_type is rbd and ``nova-disks-pool-rbd`` where it is not."""
    drv = test_pools(make_driver(images_type='rbd', use_storage_pools=True,
                                 images_rbd_pool='vms'))
    inst = _instance(imgtype_backend='rbd', imgtype_storage='pools',
                     imgtype_pool='nova-disks-pool-rbd')
    with mock.patch.object(STOCK, 'post_live_migration_at_destination'), \
            mock.patch.object(objects.Instance, 'get_by_uuid',
                              return_value=_instance(
                                  **dict(inst.system_metadata))):
        drv.post_live_migration_at_destination(None, inst, None, False,
                                               None)
    got = drv._resolver.recorded(inst)
    assert (got.backend, got.storage, got.pool) == (
        'rbd', resolver_mod.POOLS, pool_specs.DISKS_POOL)


def _probed_volume(path, probed, backing='', capacity=1 << 30):
    """A volume as a dir pool reports it after a refresh: the format and
    backing file libvirt probed in the file."""
    vol = mock.Mock()
    store = ("<backingStore><path>%s</path></backingStore>" % backing
             if backing else '')
    vol.XMLDesc.return_value = (
        "<volume><target><path>%s</path><format type='%s'/></target>%s"
        "</volume>" % (path, probed, store))
    vol.info.return_value = (0, capacity, 4096)
    vol.path.return_value = path
    return vol


@pytest.mark.parametrize('probed', ['raw', 'iso', 'qcow2'])
def test_a_raw_volume_is_raw_whatever_libvirt_probes_in_it(tmp_path,
                                                           probed):
    """Issue 27, 1: a guest writes a qcow2 header naming a host file (or
    another image's cache name) into its raw disk; libvirt then reports
    the volume as qcow2, backed by that file, of the header's size. The
    destination must get the recorded format, no backing file to fetch,
    and the file's own size."""
    path = tmp_path / ('%s_disk.config' % UUID)
    path.write_bytes(b'\0' * 505856)
    vol = _probed_volume(str(path), probed,
                         backing='/var/lib/nova/instances/_base/'
                                 'another-tenants-image', capacity=1 << 40)
    info = lm.volume_disk_info(vol, 'raw')
    assert info['type'] == 'raw'
    assert (info['virt_disk_size'], info['backing_file']) == (505856, '')


def test_a_qcow2_volume_names_its_template():
    vol = _probed_volume('/d/%s_disk' % UUID, 'qcow2',
                         backing='/i/_base/0123abcd', capacity=1 << 30)
    info = lm.volume_disk_info(vol, 'qcow2')
    assert (info['type'], info['backing_file'], info['virt_disk_size']) == (
        'qcow2', '0123abcd', 1 << 30)


def test_the_source_s_stale_record_is_not_saved_back(
        make_driver, test_pools):  # noqa: F811
    """Issue 27, 4 (seen in the gate): the instance the source sends has
    the arrival record (it re-read it while migrating); the compute manager
    saves that object whole after post_live_migration_at_destination, so
    the arrival this host dropped came back."""
    drv = test_pools(make_driver(images_type='flat',
                                 use_storage_pools=False))
    sent = _instance(imgtype_backend='qcow2', imgtype_storage='pools',
                     imgtype_pool='nova-disks-pool',
                     imgtype_native_formats='qcow2')
    arrival = drv._resolver.arrival(drv._resolver.recorded(sent))
    drv._resolver.record_arrival(sent, 'host1', arrival, '/d')
    fresh = _instance(**dict(sent.system_metadata))
    drv._live.arrivals[sent.uuid] = arrival
    with mock.patch.object(STOCK, 'post_live_migration_at_destination'), \
            mock.patch.object(objects.Instance, 'get_by_uuid',
                              return_value=fresh):
        drv.post_live_migration_at_destination(None, sent, None, None, None)
    # What the compute manager saves next.
    assert resolver_mod.SYSMETA_ARRIVAL not in sent.system_metadata
    got = drv._resolver.recorded(sent)
    assert (got.storage, got.pool) == (resolver_mod.LEGACY, '')



def test_arrival_is_recorded_before_stocks_part_which_can_fail(
        make_driver, test_pools):  # noqa: F811
    """Issue 29, 9: stock's post_live_migration_at_destination failed after
    a block migration; the compute manager saves the instance whatever
    happens (with this host), and it was saved with the source's storage:
    a pool instance whose disks here are files."""
    drv = test_pools(make_driver(images_type='flat',
                                 use_storage_pools=False))
    inst = _instance(imgtype_backend='qcow2', imgtype_storage='pools',
                     imgtype_pool='nova-disks-pool',
                     imgtype_native_formats='qcow2')
    drv._live.arrivals[inst.uuid] = drv._resolver.arrival(
        drv._resolver.recorded(inst))
    fresh = _instance(**dict(inst.system_metadata))
    with mock.patch.object(STOCK, 'post_live_migration_at_destination',
                           side_effect=RuntimeError('vifs')), \
            mock.patch.object(objects.Instance, 'get_by_uuid',
                              return_value=fresh):
        with pytest.raises(RuntimeError):
            drv.post_live_migration_at_destination(None, inst, None, True,
                                                   None)
    got = drv._resolver.recorded(inst)
    assert (got.storage, got.pool) == (resolver_mod.LEGACY, '')
