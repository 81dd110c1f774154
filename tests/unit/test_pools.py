"""Storage pool layer on libvirt's embedded test driver (no daemon, no
data: it checks XML and flow; tests/real checks data)."""

import uuid
from unittest import mock

import libvirt
import pytest
from lxml import etree
from nova import exception as nova_exception
from nova.storage import rbd_utils

from nova_imgtype import exception
from nova_imgtype.stock import volume_disk
from nova_imgtype.virt.libvirt import ceph_cluster
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import pools


@pytest.fixture
def conn(test_conn):
    return test_conn


@pytest.fixture
def sp(conn):
    return pools.StoragePools(lambda: conn)


def test_default_pools_are_created_started_autostarted(sp, tmp_path):
    base, disks = pool_specs.default_specs(str(tmp_path))
    assert base.target == str(tmp_path / '_base')
    for spec in (base, disks):
        pool = sp.ensure(spec)
        assert pool.isActive() and pool.autostart()
    # Found again, not redefined.
    assert sp.ensure(disks).UUIDString() == sp.get(
        pool_specs.DISKS_POOL).UUIDString()


def test_a_pool_definition_is_read_once_per_pool(sp, tmp_path, monkeypatch):
    _, disks = pool_specs.default_specs(str(tmp_path))
    pool = sp.ensure(disks)
    read = []
    real_xml = libvirt.virStoragePool.XMLDesc

    def counting(self, flags=0):
        read.append(self.name())
        return real_xml(self, flags)

    monkeypatch.setattr(libvirt.virStoragePool, 'XMLDesc', counting)
    first = sp.definition(pool)
    assert sp.definition(sp.get(pool_specs.DISKS_POOL)) is first
    assert read == [pool_specs.DISKS_POOL]
    assert (first.type, first.target) == ('dir', disks.target)
    # Undefined and defined again elsewhere under the same name: another
    # pool (another UUID), read again.
    pool.destroy()
    pool.undefine()
    moved = pool_specs.PoolSpec(pool_specs.DISKS_POOL, 'dir',
                                str(tmp_path / 'b'))
    again = sp.definition(sp.ensure(moved))
    assert again.target == moved.target
    assert read == [pool_specs.DISKS_POOL] * 2


def test_conflicting_pool_is_an_error_not_redefined(sp, conn, tmp_path):
    _, disks = pool_specs.default_specs(str(tmp_path))
    other = pool_specs.PoolSpec(pool_specs.DISKS_POOL, 'dir',
                                str(tmp_path / 'other'))
    conn.storagePoolDefineXML(other.to_xml(), 0)
    with pytest.raises(exception.PoolConflict) as e:
        sp.ensure(disks)
    assert pool_specs.DISKS_POOL in str(e.value)
    assert str(tmp_path / 'other') in str(e.value)
    target = etree.fromstring(conn.storagePoolLookupByName(
        pool_specs.DISKS_POOL).XMLDesc(0)).findtext('target/path')
    assert target == str(tmp_path / 'other')


def test_missing_and_inactive_pools_are_named(sp, conn, tmp_path):
    with pytest.raises(exception.PoolNotFound, match=pool_specs.DISKS_POOL):
        sp.get(pool_specs.DISKS_POOL)
    _, disks = pool_specs.default_specs(str(tmp_path))
    sp.ensure(disks).destroy()
    with pytest.raises(exception.PoolInactive, match=pool_specs.DISKS_POOL):
        sp.get(pool_specs.DISKS_POOL)


def test_unreachable_libvirt_is_a_clear_error():
    def broken():
        raise libvirt.libvirtError('Failed to connect socket')
    with pytest.raises(exception.StorageUnavailable,
                       match='nova-disks-pool is unavailable: .*socket'):
        pools.StoragePools(broken).get(pool_specs.DISKS_POOL)

    def down():
        # What the driver's Host.get_connection raises without libvirtd.
        raise nova_exception.HypervisorUnavailable()
    with pytest.raises(exception.StorageUnavailable,
                       match='nova-base-images-pool is unavailable'):
        pools.StoragePools(down).ensure(
            pool_specs.default_specs('/nonexistent')[0])


def test_cow_volume_xml_and_no_overwrite(sp, tmp_path):
    _, disks = pool_specs.default_specs(str(tmp_path))
    pool = sp.ensure(disks)
    name = pool_specs.volume_name(str(uuid.uuid4()), 'disk')
    vol = sp.create_cow(pool, name, '/cache/tmpl', 'raw', 1 << 30)
    xml = etree.fromstring(vol.XMLDesc(0))
    assert xml.find('target/format').get('type') == 'qcow2'
    assert xml.findtext('backingStore/path') == '/cache/tmpl'
    assert sp.backing_paths(pool) == {'/cache/tmpl'}
    with pytest.raises(exception.VolumeExists) as e:
        sp.create_cow(pool, name, '/cache/other', 'raw', 1 << 30)
    assert name in str(e.value) and pool_specs.DISKS_POOL in str(e.value)
    assert etree.fromstring(pool.storageVolLookupByName(name).XMLDesc(
        0)).findtext('backingStore/path') == '/cache/tmpl'


def test_delete_instance_volumes_only_touches_that_instance(sp, tmp_path):
    _, disks = pool_specs.default_specs(str(tmp_path))
    pool = sp.ensure(disks)
    mine, other = str(uuid.uuid4()), str(uuid.uuid4())
    for u in (mine, other):
        for disk in ('disk', 'disk.local', 'disk.swap'):
            sp.create_cow(pool, pool_specs.volume_name(u, disk), '/t', 'raw',
                          1 << 20)
    deleted = sp.delete_instance_volumes(pool, mine)
    assert sorted(deleted) == sorted(
        pool_specs.volume_name(mine, d) for d in ('disk', 'disk.local',
                                             'disk.swap'))
    left = sorted(v.name() for v in sp.volumes(pool))
    assert left == sorted(pool_specs.volume_name(other, d)
                          for d in ('disk', 'disk.local', 'disk.swap'))
    # Only those ending with the suffix (a rescue's disks).
    assert sp.delete_instance_volumes(pool, other, '.swap') == [
        pool_specs.volume_name(other, 'disk.swap')]
    assert sorted(v.name() for v in sp.volumes(pool)) == sorted(
        pool_specs.volume_name(other, d) for d in ('disk', 'disk.local'))


def test_volume_disk_xml_round_trips():
    disk = volume_disk.LibvirtConfigGuestVolumeDisk()
    disk.source_pool, disk.source_volume = pool_specs.DISKS_POOL, 'u_disk'
    disk.driver_name, disk.driver_format = 'qemu', 'qcow2'
    disk.target_dev, disk.target_bus = 'vda', 'virtio'
    xml = etree.fromstring(disk.to_xml())
    assert xml.get('type') == 'volume'
    assert xml.find('source').attrib == {'pool': pool_specs.DISKS_POOL,
                                         'volume': 'u_disk'}
    assert [c.tag for c in xml] == ['driver', 'source', 'target']
    parsed = volume_disk.LibvirtConfigGuestVolumeDisk()
    parsed.parse_dom(xml)
    assert (parsed.source_pool, parsed.source_volume) == (
        pool_specs.DISKS_POOL, 'u_disk')


@pytest.mark.parametrize('preallocate,expected', [(False, 0),
                                                  (True, 1 << 30)])
def test_copies_are_sparse_unless_preallocated(sp, tmp_path, preallocate,
                                               expected):
    """libvirt allocates a volume's whole capacity up front unless its XML
    says otherwise (a 10 GiB copy then needs 10 GiB free at once)."""
    _, disks = pool_specs.default_specs(str(tmp_path))
    pool = sp.ensure(disks)
    src = sp.create_cow(pool, 'src', '/t', 'raw', 1 << 20)
    vol = sp.copy(pool, 'copy', src, 'qcow2', 'raw', 1 << 30,
                  preallocate=preallocate)
    xml = etree.fromstring(vol.XMLDesc(0))
    assert int(xml.findtext('allocation')) == expected


def test_an_iso_file_is_a_raw_volume_to_qemu(sp, tmp_path):
    """A dir pool calls an ISO 9660 file (an ISO image's template) 'iso':
    raw to QEMU, as Nova's inspector names it, not a format mismatch."""
    _, disks = pool_specs.default_specs(str(tmp_path))
    pool = sp.ensure(disks)
    iso = pool.createXML(
        "<volume><name>img</name><capacity>1048576</capacity>"
        "<target><format type='iso'/></target></volume>", 0)
    assert pool_specs.volume_format(iso) == 'raw'
    vol = sp.copy(pool, 'copy', iso, 'raw', 'raw', 1 << 20)
    assert vol.name() == 'copy'



def test_location_keys_name_storage_not_pools():
    from nova_imgtype.virt.libvirt import pool_specs as specs
    rbd = specs.location_key(specs.PoolSpec(
        'nova-disks-pool', 'rbd', source='vms',
        hosts=('10.0.0.2:6789', '10.0.0.1:6789')))
    assert rbd == 'rbd:vms@10.0.0.1:6789,10.0.0.2:6789'
    assert specs.location_key(specs.PoolSpec(
        'x', 'dir', '/var/lib/nova/instances/disks/')) == (
        'dir:/var/lib/nova/instances/disks')
    assert specs.location_key(specs.PoolSpec(
        'x', 'logical', '/dev/vg', source='vg')) == 'logical:vg'
    # Another host lists one monitor of the same cluster: the same storage.
    assert specs.same_storage(rbd, 'rbd:vms@10.0.0.2:6789')
    assert not specs.same_storage(rbd, 'rbd:volumes@10.0.0.1:6789')
    assert not specs.same_storage(rbd, 'rbd:vms@10.9.9.9:6789')
    assert specs.same_storage('rbd:vms@', 'rbd:vms@')
    assert not specs.same_storage('dir:/a/disks', 'rbd:vms@')
    assert not specs.same_storage('dir:/a/disks', 'dir:/b/disks')
    assert specs.same_source(rbd, 'rbd:vms@ceph1:6789')
    assert not specs.same_source(rbd, 'rbd:volumes@10.0.0.1:6789')
    assert not specs.same_source('dir:/a', 'dir:/a')
    assert specs.is_shared_location(rbd)
    assert not specs.is_shared_location('dir:/a/disks')


def test_an_rbd_location_names_its_cluster_by_fsid():
    """Issue 30: a Ceph cluster is known by its fsid where it is known;
    keys written before (monitors only) still match by a monitor host in
    common, whichever messenger port each names it by."""
    key = pool_specs.location_key(pool_specs.PoolSpec(
        'nova-disks-pool', 'rbd', source='vms',
        hosts=('10.0.0.1:6789',), cluster='fsid-a'))
    assert key == 'rbd:vms@10.0.0.1:6789;fsid=fsid-a'
    # The same cluster listed by other monitors: the fsid decides.
    assert pool_specs.same_storage(key, 'rbd:vms@10.0.0.9:6789;fsid=fsid-a')
    # Another cluster at the same address (a rebuilt cluster, a test one
    # on the same host): not the same storage.
    assert not pool_specs.same_storage(
        key, 'rbd:vms@10.0.0.1:6789;fsid=fsid-b')
    assert not pool_specs.same_storage(
        key, 'rbd:other@10.0.0.1:6789;fsid=fsid-a')
    # A key recorded before fsids were: the monitor host in common, its v2
    # port or none (ceph.conf's forms) included.
    assert pool_specs.same_storage(key, 'rbd:vms@10.0.0.1:6789')
    assert pool_specs.same_storage(key, 'rbd:vms@10.0.0.1:3300')
    assert pool_specs.same_storage(key, 'rbd:vms@10.0.0.1')
    assert not pool_specs.same_storage(key, 'rbd:vms@10.0.0.2:6789')
    assert pool_specs.same_source(key, 'rbd:vms@ceph1:6789')
    assert pool_specs.is_shared_location(key)


def test_a_cluster_is_asked_once_through_stock_rbd_driver(ceph):
    """The fsid and the monitors come from stock's RBDDriver (get_fsid,
    get_mon_addrs), once per ceph.conf, user and pool; the rbd disks pool
    is defined with those monitors and recorded with that fsid."""
    ceph.monitors = ('10.0.0.1:6789', '10.0.0.2:6789')
    found = ceph_cluster.identify('/etc/ceph/ceph.conf', 'nova', 'vms')
    assert found == ceph_cluster.CephCluster(ceph.fsid, ceph.monitors)
    assert ceph_cluster.identify('/etc/ceph/ceph.conf', 'nova', 'vms') is (
        found)
    assert ceph.calls == 1
    ceph_cluster.identify('/etc/ceph/other.conf', 'nova', 'vms')
    assert ceph.calls == 2


def test_an_rbd_disks_pool_is_defined_from_the_cluster(conf, ceph):
    ceph.monitors = ('10.0.0.2:6789', '10.0.0.1:6789')
    conf.config(group='libvirt', images_type='rbd', images_rbd_pool='vms',
                rbd_user='nova', rbd_secret_uuid='5e5e5e5e-0000-4000-8000-'
                '000000000001')
    spec = pool_specs.disks_pool_spec(conf.conf, 'rbd')
    assert (spec.hosts, spec.cluster) == (ceph.monitors, ceph.fsid)
    assert pool_specs.location_key(spec) == (
        'rbd:vms@10.0.0.1:6789,10.0.0.2:6789;fsid=%s' % ceph.fsid)
    xml = spec.to_xml()
    assert "<host name=\"10.0.0.2\" port=\"6789\" />" in xml
    assert 'fsid' not in xml
    # Its name asks no cluster.
    ceph.calls = 0
    ceph_cluster.forget()
    assert pool_specs.disks_pool_name_for(conf.conf, 'rbd') == (
        'nova-disks-pool')
    assert ceph.calls == 0


def test_a_cluster_that_does_not_answer_is_named(conf, ceph):
    """A Ceph cluster that does not answer: StorageUnavailable naming the
    Ceph pool and the ceph.conf, asked again next time."""
    with mock.patch.object(rbd_utils.RBDDriver, 'get_fsid',
                           side_effect=OSError('timed out')):
        with pytest.raises(exception.StorageUnavailable,
                           match='vms.*/etc/ceph/x.conf did not answer: '
                                 'timed out'):
            ceph_cluster.identify('/etc/ceph/x.conf', 'nova', 'vms')
    assert ceph_cluster.identify('/etc/ceph/x.conf', 'nova', 'vms').fsid == (
        ceph.fsid)


def test_ceph_conf_is_read_by_librados(tmp_path):
    """Whether ceph.conf names monitors is librados' reading of it (any of
    Ceph's spellings of the option), not a parser of ours."""
    conf = tmp_path / 'ceph.conf'
    assert not ceph_cluster.names_monitors(str(conf), 'nova')
    conf.write_text('[global]\nfsid = 1\n')
    assert not ceph_cluster.names_monitors(str(conf), 'nova')
    for spelling in ('mon_host', 'mon host'):
        conf.write_text('[global]\n%s = [v2:10.0.0.1:3300]\n' % spelling)
        assert ceph_cluster.names_monitors(str(conf), 'nova'), spelling
    conf.write_text('[client.nova]\nmon host = 10.0.0.1\n')
    assert ceph_cluster.names_monitors(str(conf), 'nova')
    assert not ceph_cluster.names_monitors(str(conf), 'glance')


@pytest.mark.parametrize('other,same', [
    # The same monitor: its msgr1 or msgr2 port, or none (ceph.conf's
    # forms), against the record's msgr1 port.
    ('rbd:vms@10.0.0.1:6789;fsid=fsid-a', True),
    ('rbd:vms@10.0.0.1:3300;fsid=fsid-a', True),
    ('rbd:vms@10.0.0.1;fsid=fsid-a', True),
    ('rbd:vms@10.0.0.1:6789', True),
    # Another cluster on the same host, its monitor on other ports.
    ('rbd:vms@10.0.0.1:6790;fsid=fsid-a', False),
    ('rbd:vms@10.0.0.1:3301', False),
    # Another host.
    ('rbd:vms@10.0.0.2:6789;fsid=fsid-a', False),
])
def test_an_rbd_location_without_fsid_matches_a_monitor_and_its_port(
        other, same):
    """Issue 54, defect 5: a key recorded before fsids matches by a
    monitor's address and port, the two default messenger ports of a
    monitor (3300, 6789) taken for the same monitor."""
    record = 'rbd:vms@10.0.0.1:6789'
    assert pool_specs.same_storage(other, record) is same
    assert pool_specs.same_storage(record, other) is same


def test_a_second_cluster_on_a_monitor_host_keeps_its_own_ports():
    """Two clusters on one host, the second on ports of its own: a record
    without fsid of either is the storage of that one only."""
    second = 'rbd:vms@10.0.0.1:6790'
    assert pool_specs.same_storage('rbd:vms@10.0.0.1:6790;fsid=fsid-b',
                                   second)
    assert not pool_specs.same_storage('rbd:vms@10.0.0.1:6789;fsid=fsid-a',
                                       second)
    assert not pool_specs.same_storage('rbd:vms@10.0.0.1:6789', second)
    # IPv6 monitors, bracketed with their port.
    assert pool_specs.same_storage('rbd:vms@[2001:db8::1]:3300',
                                   'rbd:vms@[2001:db8::1]:6789')
    assert not pool_specs.same_storage('rbd:vms@[2001:db8::1]:6790',
                                       'rbd:vms@[2001:db8::1]:6789')


def test_a_record_without_fsid_refused_on_a_shared_host_is_named(caplog):
    """The refusal says which record it refused, and why."""
    record = 'rbd:vms@10.0.0.1:6790,10.0.0.3:6790'
    here = 'rbd:vms@10.0.0.1:6789;fsid=fsid-a'
    assert not pool_specs.same_storage(here, record)
    warnings = [r.getMessage() for r in caplog.records
                if r.levelname == 'WARNING']
    assert len(warnings) == 1, warnings
    assert record in warnings[0] and here in warnings[0]
    assert 'fsid' in warnings[0]
    # Said once, however often it is asked.
    pool_specs.same_storage(here, record)
    assert len([r for r in caplog.records if r.levelname == 'WARNING']) == 1
