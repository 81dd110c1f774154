"""BackendResolver: the one place deciding an instance's backend."""

import os
import uuid
from unittest import mock

import nova.conf
import pytest
from nova import objects
from nova.storage import rbd_utils

import nova_imgtype.conf  # noqa: F401
from nova_imgtype import exception
from nova_imgtype import record as record_mod
from nova_imgtype.virt.libvirt import resolver as resolver_mod

CONF = nova.conf.CONF
objects.register_all()


@pytest.fixture
def resolver(conf):
    return resolver_mod.BackendResolver(CONF)


def _instance(**sysmeta):
    return objects.Instance(uuid=str(uuid.uuid4()), system_metadata=sysmeta)


def test_mapped_format_is_native(conf, resolver):
    conf.config(images_type='flat', images_type_mapping='qcow2:qcow2',
                group='libvirt')
    d = resolver.decide('qcow2')
    assert d.backend == 'qcow2' and d.is_native('qcow2')
    plan = resolver.plan('qcow2')
    assert (plan.backend, plan.converted, plan.mapped) == ('qcow2', False,
                                                           True)


def test_unmapped_format_is_converted_to_images_type(conf, resolver):
    conf.config(images_type='flat', images_type_mapping='raw:rbd',
                use_storage_pools=False, group='libvirt')
    d = resolver.decide('qcow2')
    assert d.backend == 'flat' and not d.is_native('qcow2')
    assert resolver.plan('qcow2').converted
    assert not resolver.plan('iso').converted
    conf.config(force_raw_images=False)
    assert not resolver.plan('qcow2').converted
    assert resolver.native_formats() >= {'qcow2', 'raw', 'iso'}
    # A raw pool volume is a conversion when it is made (createXMLFrom);
    # a qcow2 one is an overlay on the image as it is.
    conf.config(use_storage_pools=True, group='libvirt')
    assert resolver.plan('qcow2').converted
    assert 'qcow2' not in resolver.native_formats()
    conf.config(images_type='qcow2', group='libvirt')
    assert not resolver.plan('qcow2').converted


def test_default_images_type_is_resolved_for_the_record(conf, resolver):
    conf.config(images_type='default', group='libvirt')
    conf.config(use_cow_images=False)
    assert resolver.decide('raw').backend == 'flat'
    conf.config(use_cow_images=True)
    assert resolver.decide('raw').backend == 'qcow2'


def test_boot_from_volume_uses_images_type(conf, resolver):
    conf.config(images_type='flat', images_type_mapping='raw:rbd',
                use_storage_pools=False, group='libvirt')
    assert resolver.decide(None) == resolver_mod.BackendDecision(
        'flat', config_drive=record_mod.LOCAL)


def test_record_survives_config_change(conf, resolver):
    conf.config(images_type='flat', images_type_mapping='qcow2:qcow2',
                use_storage_pools=False, group='libvirt')
    inst = _instance()
    resolver.record(inst, resolver.decide('qcow2'))
    assert inst.system_metadata == {'imgtype_backend': 'qcow2',
                                    'imgtype_native_formats': 'qcow2',
                                    'imgtype_storage': 'legacy',
                                    'imgtype_config_drive': 'local'}
    conf.config(images_type='lvm', images_type_mapping='',
                group='libvirt')
    assert resolver.backend_for(inst) == 'qcow2'
    assert resolver.decision_for(inst).is_native('qcow2')


def test_legacy_instance_follows_config(conf, resolver):
    inst = _instance()
    assert resolver.recorded(inst) is None
    conf.config(images_type='lvm', group='libvirt')
    assert resolver.backend_for(inst) == 'lvm'
    assert not resolver.decision_for(inst).native_formats


def test_supported_formats_follow_the_mapping(conf, resolver):
    conf.config(images_type='rbd', use_storage_pools=False, group='libvirt')
    conf.config(force_raw_images=False)
    assert 'qcow2' not in resolver.supported_formats()
    assert 'vmdk' not in resolver.supported_formats()
    conf.config(images_type_mapping='qcow2:qcow2', group='libvirt')
    assert 'qcow2' in resolver.supported_formats()
    assert 'ploop' not in resolver.supported_formats()


@pytest.mark.parametrize('options,formats,not_formats', [
    # rbd on pools: the volume is made raw from a qcow2 image.
    ({'images_type': 'rbd', 'use_storage_pools': True}, {'qcow2'},
     {'vmdk'}),
    # force_raw_images converts what qemu-img reads.
    ({'images_type': 'rbd', 'use_storage_pools': False,
      'force_raw_images': True}, {'qcow2', 'vmdk', 'vdi', 'vhd', 'vhdx'},
     {'ploop'}),
    ({'images_type': 'qcow2', 'virt_type': 'parallels'}, {'ploop'}, set()),
])
def test_supported_formats_follow_pools_conversion_and_virt_type(
        conf, resolver, options, formats, not_formats):
    conf.config(force_raw_images=options.pop('force_raw_images', False))
    conf.config(group='libvirt', **options)
    supported = resolver.supported_formats()
    assert formats <= supported and not (not_formats & supported)
    assert {'raw', 'iso', 'aki', 'ari', 'ami'} <= supported


def test_ensure_served_names_instance_backend_and_reason(conf, resolver):
    conf.config(images_volume_group=None, group='libvirt')
    inst = _instance(imgtype_backend='lvm')
    with pytest.raises(exception.BackendNotServedByHost) as e:
        resolver.ensure_served(inst, 'host2')
    msg = str(e.value)
    assert inst.uuid in msg and "'lvm'" in msg and 'host2' in msg
    assert 'images_volume_group' in msg
    resolver.ensure_served(_instance(imgtype_backend='qcow2'), 'host2')
    resolver.ensure_served(_instance(), 'host2')  # legacy: stock


def test_storage_pools_implement_each_backend_in_its_pool(conf, resolver):
    conf.config(use_storage_pools=True, images_type='flat',
                images_type_mapping='qcow2:qcow2, raw:rbd, ploop:ploop',
                group='libvirt')
    for fmt, backend, pool in (
            ('qcow2', 'qcow2', 'nova-disks-pool'),
            ('vdi', 'flat', 'nova-disks-pool'),     # unmapped: images_type
            ('raw', 'rbd', 'nova-disks-pool-rbd')):
        d = resolver.decide(fmt)
        assert (d.backend, d.storage, d.pool) == (backend, 'pools', pool)
    # Pools implement no ploop: stock files.
    d = resolver.decide('ploop')
    assert (d.backend, d.storage, d.pool) == ('ploop', 'legacy', '')
    assert resolver.pool_backends() == ['flat', 'qcow2', 'rbd']

    inst = _instance()
    resolver.record(inst, resolver.decide('raw'))
    assert inst.system_metadata['imgtype_pool'] == 'nova-disks-pool-rbd'
    # Kept for life: pools off, or images_type now rbd (whose pool would
    # be nova-disks-pool on this host).
    conf.config(use_storage_pools=False, images_type='rbd', group='libvirt')
    d = resolver.decision_for(inst)
    assert (d.storage, d.pool) == ('pools', 'nova-disks-pool-rbd')
    assert resolver.decision_for(_instance()).storage == 'legacy'


def test_pool_instances_recorded_without_a_pool_name(resolver):
    inst = _instance(imgtype_backend='qcow2', imgtype_storage='pools')
    assert resolver.decision_for(inst).pool == 'nova-disks-pool'
    resolver.record(inst, resolver.with_storage(
        resolver.decision_for(inst), 'legacy'))
    assert 'imgtype_pool' not in inst.system_metadata


def test_pool_instance_needs_a_host_with_pools(conf, resolver):
    inst = _instance(imgtype_backend='qcow2', imgtype_storage='pools')
    conf.config(use_storage_pools=False, group='libvirt')
    with pytest.raises(exception.BackendNotServedByHost,
                       match='use_storage_pools is off'):
        resolver.ensure_served(inst, 'host2')
    conf.config(use_storage_pools=True, group='libvirt')
    resolver.ensure_served(inst, 'host2')


def test_mapping_to_libvirt_storage_needs_pools_on(conf, resolver):
    conf.config(images_type_mapping='qcow2:libvirt_storage',
                use_storage_pools=False, group='libvirt')
    with pytest.raises(exception.InvalidImagesTypeMapping,
                       match="'qcow2:libvirt_storage'.*use_storage_pools"):
        resolver.check_host()


def test_mapping_to_libvirt_storage_means_native_on_pools(conf, resolver):
    conf.config(images_type='flat', use_storage_pools=True,
                images_type_mapping='qcow2:libvirt_storage, raw:flat',
                group='libvirt')
    d = resolver.decide('qcow2')
    assert (d.backend, d.storage, d.is_native('qcow2')) == ('qcow2', 'pools',
                                                            True)
    # Unmapped formats: images_type's backend (on pools too), converted.
    d = resolver.decide('vmdk')
    assert (d.backend, d.storage, d.is_native('vmdk')) == ('flat', 'pools',
                                                           False)


@pytest.mark.parametrize('file_format,backend', [('qcow2', 'qcow2'),
                                                 ('raw', 'flat')])
def test_adopted_files_keep_their_format_in_the_pool(conf, resolver,
                                                     file_format, backend):
    conf.config(group='libvirt', images_type='lvm', use_storage_pools=True,
                images_volume_group='vg')
    legacy = resolver_mod.BackendDecision('qcow2', ('qcow2',))
    got = resolver.adopted(legacy, {'disk': file_format,
                                    'disk.local': file_format})
    # The dir pool of a host whose own images_type is lvm, and where its
    # storage is.
    assert got == resolver_mod.BackendDecision(
        backend, ('qcow2',), resolver_mod.POOLS, 'nova-disks-pool-dir',
        pool_location='dir:%s' % os.path.join(
            conf.conf.instances_path, 'disks'))
    assert got.volume_format('disk.local') == file_format


def test_adopted_files_of_mixed_formats_keep_each_its_own(conf, resolver):
    """Issue 27, 2: a Flat instance with a qcow2 root and a raw ephemeral
    disk; every disk was given the root's format."""
    conf.config(group='libvirt', images_type='qcow2', use_storage_pools=True)
    legacy = resolver_mod.BackendDecision('flat')
    got = resolver.adopted(legacy, {'disk': 'qcow2', 'disk.local': 'raw',
                                    'disk.swap': 'raw'})
    assert got.backend == 'qcow2'
    assert [got.volume_format(n) for n in ('disk', 'disk.local',
                                           'disk.swap', 'disk.config')] == [
        'qcow2', 'raw', 'raw', 'raw']
    # What is recorded reads back the same.
    inst = objects.Instance(uuid=str(uuid.uuid4()), system_metadata={})
    resolver.record(inst, got)
    assert resolver.recorded(inst) == got
    assert inst.system_metadata['imgtype_disk_formats'] == (
        'disk.local=raw,disk.swap=raw')


@pytest.mark.parametrize('pooled,storage', [(True, resolver_mod.POOLS),
                                            (False, resolver_mod.LEGACY)])
def test_disks_made_anew_go_where_the_host_makes_new_ones(
        conf, resolver, pooled, storage):
    conf.config(group='libvirt', images_type='qcow2',
                use_storage_pools=pooled)
    for was in (resolver_mod.BackendDecision('qcow2'),
                resolver_mod.BackendDecision('qcow2', (), resolver_mod.POOLS,
                                             'elsewhere')):
        got = resolver.made_anew(was)
        assert (got.storage, bool(got.pool)) == (storage, pooled)


@pytest.mark.parametrize('pooled,ceph_pool,stock', [
    (False, 'vms', True),       # the same Ceph pool, no pools here
    (True, 'vms', False),       # pools here: this host's rbd pool of it
    (False, 'other', False),    # another Ceph pool
])
def test_an_rbd_pool_instance_is_stock_rbd_on_a_host_without_pools(
        conf, resolver, tmp_path, pooled, ceph_pool, stock):
    """Issue 29: an instance moved back (a reverted resize, the confirm's
    clean-up on the source) to a host without a pool of its storage, whose
    stock rbd disks are in the Ceph pool its record names: its disks are
    stock's rbd disks there, never a pool this host does not have
    (PoolNotFound)."""
    ceph_conf = tmp_path / 'ceph.conf'
    ceph_conf.write_text('[global]\nmon_host = 192.0.2.7:3300\n')
    conf.config(group='libvirt', images_type='rbd', images_rbd_pool='vms',
                images_rbd_ceph_conf=str(ceph_conf),
                use_storage_pools=pooled)
    inst = _instance(imgtype_backend='rbd', imgtype_native_formats='raw',
                     imgtype_storage='pools', imgtype_pool='nova-disks-pool',
                     imgtype_pool_location='rbd:%s@192.0.2.7:3300' % ceph_pool)
    # This host's pools, as the driver finds them: an rbd pool of that
    # Ceph pool where it has pools.
    resolver = resolver_mod.BackendResolver(
        conf.conf, locate=lambda key, name: name if pooled else None)
    got = resolver.recorded(inst)
    assert got.backend == 'rbd'
    if stock:
        assert (got.storage, got.pool, got.pool_location) == (
            resolver_mod.LEGACY, '', '')
    else:
        assert got.storage == resolver_mod.POOLS
        assert got.pool_location == 'rbd:%s@192.0.2.7:3300' % ceph_pool


@pytest.mark.parametrize('recorded_fsid,monitor,pool,located', [
    # This host's cluster by fsid, its monitors listed otherwise by the
    # host that recorded it, its pool named otherwise there.
    ('ours', '198.51.100.9:6789', 'nova-disks-pool', False),
    # Another cluster at this cluster's monitor address (a cluster rebuilt
    # there): never this host's pool, whatever the monitors say.
    ('other', '192.0.2.7:6789', None, False),
    # A record from before fsids: the pools' monitors decide.
    ('', '192.0.2.7:3300', 'nova-disks-pool', True),
])
def test_an_rbd_location_is_matched_by_its_clusters_fsid(
        conf, ceph, recorded_fsid, monitor, pool, located):
    """Issue 30: the Ceph cluster of an rbd pool instance is known by its
    fsid, which the host asks its cluster (stock's RBDDriver.get_fsid()),
    not by monitors each host lists its own way."""
    conf.config(group='libvirt', images_type='rbd', images_rbd_pool='vms',
                use_storage_pools=True)
    fsid = {'ours': ceph.fsid, 'other': str(uuid.uuid4()),
            '': ''}[recorded_fsid]
    location = 'rbd:vms@%s%s' % (monitor, ';fsid=' + fsid if fsid else '')
    asked = []

    def locate(key, name):
        asked.append(key)
        return 'nova-disks-pool'     # a pool of monitor 192.0.2.7

    resolver = resolver_mod.BackendResolver(conf.conf, locate=locate)
    got = resolver.recorded(_instance(
        imgtype_backend='rbd', imgtype_native_formats='raw',
        imgtype_storage='pools', imgtype_pool='ceph-vms',
        imgtype_pool_location=location))
    assert got.pool == (pool or location)
    assert got.pool_location == location
    assert asked == ([location] if located else [])


def test_an_rbd_location_is_looked_up_when_the_cluster_does_not_answer(
        conf, ceph):
    """The cluster not answering now is no reason to take or refuse a
    pool: the pools are looked up by their definitions, as before."""
    conf.config(group='libvirt', images_type='rbd', images_rbd_pool='vms',
                use_storage_pools=True)
    location = 'rbd:vms@192.0.2.7:6789;fsid=%s' % ceph.fsid
    resolver = resolver_mod.BackendResolver(
        conf.conf, locate=lambda key, name: 'nova-disks-pool')
    with mock.patch.object(rbd_utils.RBDDriver, 'get_fsid',
                           side_effect=OSError('timed out')):
        got = resolver.recorded(_instance(
            imgtype_backend='rbd', imgtype_native_formats='raw',
            imgtype_storage='pools', imgtype_pool='ceph-vms',
            imgtype_pool_location=location))
    assert got.pool == 'nova-disks-pool'


def test_a_backend_this_host_has_no_pool_of_is_made_in_files(conf,
                                                              resolver):
    """Issue 29 (found by the ceph gate profile's tempest run): a
    qcow2:qcow2 instance of a host without pools unshelved on a host whose
    only pool is rbd (images_type = rbd, no mapping) was given a dir pool
    that host does not have (PoolNotFound nova-disks-pool-dir): its disks
    are files there, as stock makes them."""
    conf.config(group='libvirt', images_type='rbd', use_storage_pools=True)
    assert resolver.pool_backends() == ['rbd']
    assert resolver.storage_for('rbd') == resolver_mod.POOLS
    assert resolver.storage_for('qcow2') == resolver_mod.LEGACY
    got = resolver.with_storage(resolver_mod.BackendDecision(
        'qcow2', ('qcow2',)), resolver.storage_for('qcow2'))
    assert (got.storage, got.pool) == (resolver_mod.LEGACY, '')


@pytest.mark.parametrize('monitor,stock', [
    ('192.0.2.7:6789', True),       # this cluster's monitor
    ('192.0.2.7:3300', True),       # the same monitor, its msgr2 port
    ('192.0.2.7:6790', False),      # another cluster on the same host
])
def test_an_rbd_record_without_fsid_is_stock_rbd_of_its_monitor_only(
        conf, ceph, monitor, stock):
    """Issue 54, defect 5: an rbd pool instance recorded before fsids, on
    a host without pools whose stock rbd backend uses that Ceph pool
    name: its disks are stock's only where the record names this
    cluster's monitor (address and port), never another cluster's on the
    same host."""
    conf.config(group='libvirt', images_type='rbd', images_rbd_pool='vms',
                use_storage_pools=False)
    location = 'rbd:vms@%s' % monitor
    resolver = resolver_mod.BackendResolver(
        conf.conf, locate=lambda key, name: None)
    got = resolver.recorded(_instance(
        imgtype_backend='rbd', imgtype_native_formats='raw',
        imgtype_storage='pools', imgtype_pool='nova-disks-pool',
        imgtype_pool_location=location))
    if stock:
        assert got.storage == resolver_mod.LEGACY
    else:
        assert (got.storage, got.pool_location) == (
            resolver_mod.POOLS, location)
