"""Real: LibvirtStorage's rbd variant on the throwaway Ceph cluster.

Real: the session's libvirtd with its rbd storage backend, the one-node Ceph
cluster of :mod:`gate.ceph` (memstore, no cephx), qemu-img writing the
template through qemu's rbd driver, the ``rbd`` CLI, and a domain booted
from the ``<disk type='volume'>`` the backend generates. Fake: the image
service (a local file served by IMAGE_API.get/download) and the driver's
own libvirt connection for domains (LibvirtFixture); the storage pools use
the real daemon. What happened in Ceph is read with the ``rbd`` CLI, data
by checksum (``rbd export``).
"""

import hashlib
import json
import os
import subprocess
import uuid
from unittest import mock

import libvirt
import pytest
from lxml import etree
from nova import conf as nova_conf
from nova import context as nova_context
from nova import exception as nova_exception
from nova import objects
from nova.virt.libvirt import driver as stock_driver
from nova.virt.libvirt import imagecache as nova_imagecache
from nova.virt.libvirt import utils as libvirt_utils
from oslo_concurrency import processutils

from nova_imgtype import exception
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import pools
from nova_imgtype.virt.libvirt import storage
from nova_imgtype.virt.libvirt import storage_rbd
from nova_imgtype_testing import drivers
from nova_imgtype_testing import libvirtd as real
from tests.real.test_config_drive_ceph import config_drive_fakes
from tests.real.test_libvirt_storage import _boot_disk
from tests.real.test_libvirt_storage import _guest_xml
from tests.real.test_libvirt_storage import pool_driver  # noqa: F401
from tests.real.test_native_images import MiB
from tests.real.test_native_images import conf  # noqa: F401
from tests.real.test_native_images import driver  # noqa: F401
from tests.real.test_native_images import glance  # noqa: F401

objects.register_all()
IMAGE_SIZE = 32 * MiB
RESIZE_SNAPSHOT = libvirt_utils.RESIZE_SNAPSHOT_NAME


@pytest.fixture
def rbd_driver(driver, conf, libvirt_conn, ceph_cluster,  # noqa: F811
               libvirt_tmp_path):
    conf.config(instances_path=str(libvirt_tmp_path / 'instances'))
    drv = driver(images_type='rbd', images_rbd_pool=ceph_cluster.pool,
                 images_rbd_ceph_conf=ceph_cluster.conf,
                 images_type_mapping='qcow2:qcow2', use_storage_pools=True)
    drivers.use_pools(drv, pools.StoragePools(
        lambda: libvirt_conn))
    specs = pool_specs.host_specs(conf.conf, drv._resolver.pool_backends())
    # nova-disks-pool is the rbd pool of images_type; the mapping's qcow2
    # needs the dir pool nova-disks-pool-dir.
    assert [(s.name, s.type) for s in specs] == [
        (pool_specs.BASE_POOL, 'dir'), (pool_specs.DISKS_POOL, 'rbd'),
        (pool_specs.DISKS_POOL + '-dir', 'dir')]
    made = [drv._pools.ensure(spec) for spec in specs]
    yield drv
    for pool in made:
        pool.destroy()
        pool.undefine()
    ceph_cluster.purge()


def _volume_disk_xml(vol):
    return ("<disk type='volume' device='disk'><driver name='qemu' "
            "type='raw'/><source pool='%s' volume='%s'/>"
            "<target dev='vda' bus='virtio'/></disk>" % (pool_specs.DISKS_POOL,
                                                          vol))


def _rbd_head_sha256(cluster, image, length):
    """sha256 of the first ``length`` bytes of an rbd image's data."""
    data = subprocess.run(
        ['rbd', '-c', cluster.conf, 'export', '--no-progress',
         cluster.image_spec(image), '-'],
        check=True, capture_output=True).stdout
    return hashlib.sha256(data[:length]).hexdigest()


@pytest.fixture
def raw_image(tmp_path, glance):  # noqa: F811
    image_id = str(uuid.uuid4())
    path = str(tmp_path / 'img.raw')
    chunks = real.make_image(path, 'raw', IMAGE_SIZE)
    glance[image_id] = (path, 'raw')
    return image_id, real.sha256_of_chunks(IMAGE_SIZE, chunks)


def test_rbd_template_upload_clone_resize_boot_delete(
        rbd_driver, raw_image, ceph_cluster, libvirt_conn, kvm_available):
    image_id, digest = raw_image
    inst, disk = _boot_disk(rbd_driver, image_id, 'raw')

    assert isinstance(disk, storage.LibvirtStorage)
    assert inst.system_metadata['imgtype_pool'] == pool_specs.DISKS_POOL
    vol = pool_specs.volume_name(inst.uuid, 'disk')
    assert disk.path == '%s/%s' % (ceph_cluster.pool, vol)
    # The template was uploaded once, whole (no .part left), with the
    # image's data; the disk is an RBD clone of it.
    templates = [i for i in ceph_cluster.images()
                 if i.startswith(pool_specs.RBD_TEMPLATE_PREFIX)]
    assert len(templates) == 1 and not templates[0].endswith('.part')
    assert _rbd_head_sha256(ceph_cluster, templates[0], IMAGE_SIZE) == digest
    info = ceph_cluster.rbd_json('info', ceph_cluster.image_spec(vol))
    assert info['parent']['image'] == templates[0]
    assert info['size'] == 64 * MiB          # the size asked, not the image's
    assert _rbd_head_sha256(ceph_cluster, vol, IMAGE_SIZE) == digest

    # libvirt 9.0 boots no <disk type='volume'> of an rbd pool: the guest
    # gets the network disk, its monitors read from the pool.
    with pytest.raises(libvirt.libvirtError, match="'rbd' pools"):
        real.start_domain(libvirt_conn, 'rbdvol-' + inst.uuid[:8],
                          [_volume_disk_xml(vol)], kvm=kvm_available)
    xml = etree.fromstring(_guest_xml(disk))
    assert xml.get('type') == 'network'
    source = xml.find('source')
    assert (source.get('protocol'), source.get('name')) == (
        'rbd', '%s/%s' % (ceph_cluster.pool, vol))
    assert source.find('host').attrib == {
        'name': ceph_cluster.mon_host, 'port': str(ceph_cluster.mon_port)}
    dom = real.start_domain(libvirt_conn, 'rbd-' + inst.uuid[:8],
                            [_guest_xml(disk)], kvm=kvm_available)
    try:
        assert dom.isActive()
    finally:
        real.destroy_domain(dom)

    # Resize grows the volume.
    disk.resize_image(128 * MiB)
    assert ceph_cluster.rbd_json(
        'info', ceph_cluster.image_spec(vol))['size'] == 128 * MiB

    # A second instance of the image clones the same template: no upload.
    other, other_disk = _boot_disk(rbd_driver, image_id, 'raw')
    assert [i for i in ceph_cluster.images()
            if i.startswith(pool_specs.RBD_TEMPLATE_PREFIX)] == templates
    assert other_disk.exists()

    # Delete removes every volume of the instance, and nothing else.
    with mock.patch.object(stock_driver.LibvirtDriver, '_cleanup'):
        rbd_driver._cleanup(None, inst, None, cleanup_instance_disks=True)
    assert vol not in ceph_cluster.images()
    assert not disk.exists()
    assert other_disk.exists()
    assert templates[0] in ceph_cluster.images()


def test_failed_template_upload_leaves_nothing(rbd_driver, raw_image,
                                               ceph_cluster):
    image_id, _ = raw_image
    real_execute = processutils.execute

    def rename_fails(*cmd, **kwargs):
        if cmd[:2] == ('rbd', 'rename'):
            raise processutils.ProcessExecutionError(
                'injected', cmd=' '.join(cmd))
        return real_execute(*cmd, **kwargs)

    # The failure is injected after qemu-img wrote the whole .part image.
    with mock.patch.object(processutils, 'execute',
                           side_effect=rename_fails):
        with pytest.raises(exception.VolumeCreateFailed) as e:
            _boot_disk(rbd_driver, image_id, 'raw')
    assert pool_specs.DISKS_POOL in str(e.value)
    assert pool_specs.RBD_TEMPLATE_PREFIX in str(e.value)
    assert ceph_cluster.images() == []
    # The next build uploads it whole.
    inst, disk = _boot_disk(rbd_driver, image_id, 'raw')
    assert disk.exists()
    assert len(ceph_cluster.images()) == 2


def test_rbd_volumes_are_shared_block_storage(rbd_driver, raw_image,
                                              ceph_cluster):
    """Issue 12, defect 1: every host of the cluster has an rbd pool's
    volumes. Nova asks the driver before a revert between hosts or when an
    evacuated instance's source comes back; "not shared" made it call
    destroy(destroy_disks=True), and the plugin deleted the volumes the
    instance runs from."""
    from nova_imgtype.virt.libvirt import storage_rbd
    image_id, _ = raw_image
    inst, disk = _boot_disk(rbd_driver, image_id, 'raw')
    assert isinstance(disk, storage_rbd.RbdStorage)
    # What the compute manager's _is_instance_storage_shared asks first:
    # None means shared, no file test with the other host.
    assert rbd_driver.check_instance_shared_storage_local(None, inst) is None
    assert rbd_driver.instance_on_disk(inst)
    # A destination on nova-imgtype reports the instance's backend.
    dest = objects.LibvirtLiveMigrateData(image_type='rbd')
    assert rbd_driver._is_shared_block_storage(inst, dest)
    # Volumes of the dir pool of the same host (the mapping's qcow2) are
    # not shared.
    other = objects.Instance(uuid=str(uuid.uuid4()), system_metadata={
        'imgtype_backend': 'qcow2', 'imgtype_storage': 'pools',
        'imgtype_pool': pool_specs.DISKS_POOL + '-dir'})
    cls = rbd_driver.image_backend.class_for(
        rbd_driver._resolver.decision_for(other))
    assert cls is storage.LibvirtStorage
    assert not cls.is_shared_block_storage()


def test_template_uploads_of_two_hosts_never_harm_each_other(
        rbd_driver, raw_image, ceph_cluster):
    """Issue 12, defect 5: every compute of the Ceph cluster uploads into
    the same pool. Another host's upload in progress is left alone, and
    when another host's upload is renamed first, this host uses it."""
    image_id, digest = raw_image
    # Another compute is writing its copy of some template.
    ceph_cluster.rbd('create', '--size', '1M', ceph_cluster.image_spec(
        pool_specs.RBD_TEMPLATE_PREFIX + 'x.part-compute9-0a1b2c3d'))
    real_execute = processutils.execute
    winners = []

    def other_host_renames_first(*cmd, **kwargs):
        if cmd[:2] == ('rbd', 'rename'):
            # Another compute's whole copy gets the name just before ours.
            part, name = cmd[4], cmd[5]
            ceph_cluster.rbd('cp', ceph_cluster.image_spec(part),
                             ceph_cluster.image_spec(name))
            winners.append(name)
        return real_execute(*cmd, **kwargs)

    with mock.patch.object(processutils, 'execute',
                           side_effect=other_host_renames_first):
        inst, disk = _boot_disk(rbd_driver, image_id, 'raw')
    assert disk.exists()
    images = ceph_cluster.images()
    # The winner's template, the disk cloned from it, the other host's
    # upload in progress; this host's own copy is gone.
    assert sorted(images) == sorted([
        winners[0], pool_specs.volume_name(inst.uuid, 'disk'),
        pool_specs.RBD_TEMPLATE_PREFIX + 'x.part-compute9-0a1b2c3d'])
    info = ceph_cluster.rbd_json('info', ceph_cluster.image_spec(
        pool_specs.volume_name(inst.uuid, 'disk')))
    assert info['parent']['image'] == winners[0]
    assert _rbd_head_sha256(ceph_cluster, winners[0], IMAGE_SIZE) == digest


def test_unused_templates_leave_the_ceph_pool(
        rbd_driver, raw_image, ceph_cluster, conf):  # noqa: F811
    """Issue 12, defect 5: uploaded ``nova-base_*`` templates are removed by
    the image cache pass once unused, by the image cache's rules, and never
    while a clone of any host uses them."""
    from nova_imgtype.virt.libvirt import storage_rbd
    image_id, _ = raw_image
    inst, disk = _boot_disk(rbd_driver, image_id, 'raw')
    [template] = [i for i in ceph_cluster.images()
                  if i.startswith(pool_specs.RBD_TEMPLATE_PREFIX)]
    upload = pool_specs.RBD_TEMPLATE_PREFIX + 'y.part-compute9-0a1b2c3d'
    ceph_cluster.rbd('create', '--size', '1M',
                     ceph_cluster.image_spec(upload))
    pool = rbd_driver._pools.get(pool_specs.DISKS_POOL)
    base_dir = str(conf.conf.instances_path) + '/_base'
    cached = base_dir + '/' + template[len(pool_specs.RBD_TEMPLATE_PREFIX):]

    def gc(min_age=0):
        return storage_rbd.remove_unused_templates(
            rbd_driver._pools, pool, base_dir, min_age)

    # Still in this host's image cache: kept.
    assert gc() == []
    os.unlink(cached)
    # Too young (another host may be about to clone it): kept.
    assert gc(min_age=3600) == []
    # A clone uses it: Ceph refuses, kept.
    assert gc() == []
    assert template in ceph_cluster.images()
    # The instance gone, the template goes; the upload in progress stays.
    with mock.patch.object(stock_driver.LibvirtDriver, '_cleanup'):
        rbd_driver._cleanup(None, inst, None, cleanup_instance_disks=True)
    assert gc() == [template]
    assert sorted(ceph_cluster.images()) == [upload]
    # Through the driver's image cache pass, with the cache's rules.
    unused = pool_specs.RBD_TEMPLATE_PREFIX + 'no-longer-cached'
    ceph_cluster.rbd('create', '--size', '1M',
                     ceph_cluster.image_spec(unused))
    pool.refresh(0)
    conf.config(remove_unused_base_images=True,
                remove_unused_original_minimum_age_seconds=0,
                group='image_cache')
    with mock.patch.object(stock_driver.LibvirtDriver,
                           'manage_image_cache') as stock:
        rbd_driver.manage_image_cache(None, [])
    stock.assert_called_once()
    assert sorted(ceph_cluster.images()) == [upload]


def test_a_reverted_resize_gets_the_disk_back_as_it_was(
        rbd_driver, raw_image, ceph_cluster):
    """Issue 29, 4: stock's Rbd snapshots the root disk before a resize
    and rolls back to it on a revert; an rbd pool volume inherited no-op
    snapshots, and a reverted resize kept the destination's writes and
    size. Here: the steps the compute manager drives (finish_migration's
    snapshot, the resize and a guest's write, finish_revert_migration's
    rollback and removal), on the real Ceph image."""
    image_id, _digest = raw_image
    inst, disk = _boot_disk(rbd_driver, image_id, 'raw')
    vol = pool_specs.volume_name(inst.uuid, 'disk')
    spec = ceph_cluster.image_spec(vol)
    before = _rbd_head_sha256(ceph_cluster, vol, 64 * MiB)

    disk.create_snap(RESIZE_SNAPSHOT)
    disk.resize_image(128 * MiB)
    subprocess.run(['qemu-io', '-f', 'raw', '-c', 'write -P 0x5a 0 1M',
                    ceph_cluster.qemu_spec(vol)], check=True,
                   capture_output=True)
    assert _rbd_head_sha256(ceph_cluster, vol, 64 * MiB) != before
    assert [s['name'] for s in ceph_cluster.rbd_json(
        'snap', 'ls', spec)] == [RESIZE_SNAPSHOT]

    disk.rollback_to_snap(RESIZE_SNAPSHOT)
    disk.remove_snap(RESIZE_SNAPSHOT)

    assert ceph_cluster.rbd_json('info', spec)['size'] == 64 * MiB
    assert _rbd_head_sha256(ceph_cluster, vol, 64 * MiB) == before
    assert ceph_cluster.rbd_json('snap', 'ls', spec) == []


@pytest.mark.parametrize('out_format', ['raw', 'qcow2'])
def test_a_snapshot_of_an_rbd_volume_holds_its_data(
        rbd_driver, raw_image, ceph_cluster, tmp_path, out_format):
    """Issue 29 (found by the ceph gate profile): a snapshot of an rbd
    pool volume failed, libvirt copying no volume of an rbd pool into a
    dir pool ("no storage vol with matching path"). The volume is
    extracted as stock's Rbd extracts its disk, read as raw."""
    image_id, _digest = raw_image
    inst, disk = _boot_disk(rbd_driver, image_id, 'raw')
    vol = pool_specs.volume_name(inst.uuid, 'disk')
    subprocess.run(['qemu-io', '-f', 'raw', '-c', 'write -P 0x5a 1M 1M',
                    ceph_cluster.qemu_spec(vol)], check=True,
                   capture_output=True)
    want = _rbd_head_sha256(ceph_cluster, vol, 64 * MiB)

    out = str(tmp_path / 'snapshot')
    disk.snapshot_extract(out, out_format)

    data = str(tmp_path / 'snapshot.raw')
    real.qemu_img('convert', '-f', out_format, '-O', 'raw', out, data)
    with open(data, 'rb') as f:
        assert hashlib.sha256(f.read(64 * MiB)).hexdigest() == want


def test_a_confirmed_resize_leaves_no_snapshot(rbd_driver, raw_image,
                                               ceph_cluster):
    """Stock's confirm removes the resize snapshot of a root disk whose
    backend clones: an rbd pool volume's (RbdStorage clones)."""
    image_id, _digest = raw_image
    inst, disk = _boot_disk(rbd_driver, image_id, 'raw')
    spec = ceph_cluster.image_spec(pool_specs.volume_name(inst.uuid, 'disk'))
    ceph_cluster.rbd('snap', 'create', '%s@%s' % (spec, RESIZE_SNAPSHOT))
    # What stock's confirm reads of the instance (the old flavor, for a
    # vTPM; the host, for the domain).
    inst.host = nova_conf.CONF.host
    inst.old_flavor = inst.new_flavor = objects.Flavor(extra_specs={})
    rbd_driver._cleanup_resize(None, inst, None)
    assert ceph_cluster.rbd_json('snap', 'ls', spec) == []


def test_a_template_removed_by_another_host_before_its_clone_is_uploaded_again(
        rbd_driver, raw_image, ceph_cluster):
    """Issue 29: removing an unused rbd template is guarded by Ceph (it
    refuses while a clone exists), not by a lock of one host. Host C
    removes the template between this host finding it (its libvirt still
    lists it) and cloning it: the clone fails, and the template is
    uploaded again instead of the boot failing."""
    image_id, digest = raw_image
    first, first_disk = _boot_disk(rbd_driver, image_id, 'raw')
    [template] = [i for i in ceph_cluster.images()
                  if i.startswith(pool_specs.RBD_TEMPLATE_PREFIX)]
    first_disk._volume().delete(0)
    # Host C, behind this host's libvirt: the template and its snapshot.
    spec = ceph_cluster.image_spec(template)
    for snap in ceph_cluster.rbd_json('snap', 'ls', spec):
        ceph_cluster.rbd('snap', 'unprotect', '%s@%s' % (spec, snap['name']))
    ceph_cluster.rbd('snap', 'purge', spec)
    ceph_cluster.rbd('rm', '--no-progress', spec)
    disks = rbd_driver._pools.get(pool_specs.DISKS_POOL)
    assert template in disks.listVolumes()      # not refreshed here

    second, disk = _boot_disk(rbd_driver, image_id, 'raw')

    assert disk.exists()
    vol = pool_specs.volume_name(second.uuid, 'disk')
    info = ceph_cluster.rbd_json('info', ceph_cluster.image_spec(vol))
    assert info['parent']['image'] == template
    assert _rbd_head_sha256(ceph_cluster, vol, IMAGE_SIZE) == digest


def _recorded_elsewhere(drv, inst, pool, location):
    """The instance as another host recorded it: its pool's name there and
    the type and place of its storage."""
    inst.system_metadata.update({'imgtype_pool': pool,
                                 'imgtype_pool_location': location})
    return drv._resolver.decision_for(inst)


def test_an_rbd_pool_of_another_name_is_found_by_its_storage(
        rbd_driver, raw_image, ceph_cluster):
    """Issue 29, 5: moved between hosts whose rbd pools of one Ceph pool
    have different names, a revert (or any later step) looked the other
    host's name up here: PoolNotFound, instance ERROR."""
    image_id, _digest = raw_image
    inst, disk = _boot_disk(rbd_driver, image_id, 'raw')
    location = inst.system_metadata['imgtype_pool_location']
    assert location.startswith('rbd:%s@' % ceph_cluster.pool)

    decision = _recorded_elsewhere(rbd_driver, inst, 'ceph-vms', location)

    assert decision.pool == pool_specs.DISKS_POOL
    again = rbd_driver.image_backend.by_name(inst, 'disk')
    assert isinstance(again, storage_rbd.RbdStorage)
    assert again.exists() and again.path == disk.path


def test_a_dir_pool_of_another_host_is_never_this_hosts_rbd_pool(
        rbd_driver, raw_image, ceph_cluster, libvirt_tmp_path):
    """Issue 29, 2: host B recorded its dir pool nova-disks-pool; on host A
    that name is the rbd pool, so A answered "shared storage" and never
    removed its own local overlay. The dir pool is found by its place."""
    inst = objects.Instance(uuid=str(uuid.uuid4()), system_metadata={
        'imgtype_backend': 'qcow2', 'imgtype_native_formats': 'qcow2',
        'imgtype_storage': 'pools'})
    directory = str(libvirt_tmp_path / 'instances' / 'disks')
    decision = _recorded_elsewhere(rbd_driver, inst, pool_specs.DISKS_POOL,
                                   'dir:%s' % directory)
    assert decision.pool == pool_specs.DISKS_POOL + '-dir'
    disk = rbd_driver.image_backend.by_name(inst, 'disk')
    assert type(disk) is storage.LibvirtStorage
    assert not disk.is_shared_block_storage()


def test_rbd_disks_this_host_does_not_reach_are_never_made_or_deleted_here(
        pool_driver, ceph_cluster):  # noqa: F811
    """Issue 29, 1: an instance on an rbd pool evacuated to a host whose
    pool of that name is a dir pool: it made a new root disk there and the
    instance's RBD disk (the user's data) was orphaned. Here the recorded
    Ceph pool is no storage of this host: it is not taken for its dir pool
    of the same name, deleting finds nothing, and the pool is not
    replaced by one of this host's."""
    inst = objects.Instance(uuid=str(uuid.uuid4()), system_metadata={
        'imgtype_backend': 'rbd', 'imgtype_native_formats': 'raw',
        'imgtype_storage': 'pools'})
    location = 'rbd:%s@%s' % (ceph_cluster.pool, ceph_cluster.mon_addr)
    decision = _recorded_elsewhere(pool_driver, inst, pool_specs.DISKS_POOL,
                                   location)
    assert decision.pool == location
    # Shared storage (stock asks the backend before it deletes disks) ...
    cls = pool_driver.image_backend.class_for(decision)
    assert cls is storage_rbd.RbdStorage and cls.is_shared_block_storage()
    # ... that this host cannot open, make or replace.
    with pytest.raises(exception.PoolNotFound, match=location):
        pool_driver.image_backend.by_name(inst, 'disk')
    with pytest.raises(exception.StorageUnavailable, match=location):
        pool_driver._disks.pools_here(decision)
    pool_driver._disks.delete_pool_volumes(inst)  # finds nothing, deletes none


def test_the_ceph_cluster_is_recorded_by_the_fsid_it_reports(
        rbd_driver, raw_image, ceph_cluster):
    """Issue 30: the rbd pool is defined with the monitors the cluster
    lists (stock's RBDDriver.get_mon_addrs(), ``ceph mon dump``), and an
    instance's location names the cluster by the fsid it reports
    (get_fsid()), not by ceph.conf read by hand. A record of another
    cluster at the same monitor address is not this host's storage; one
    written before fsids were (ceph.conf's monitor form) still is."""
    image_id, _digest = raw_image
    inst, disk = _boot_disk(rbd_driver, image_id, 'raw')
    location = inst.system_metadata['imgtype_pool_location']
    assert location.endswith(';fsid=%s' % ceph_cluster.fsid)
    dump = json.loads(ceph_cluster.run('mon', 'dump', '--format', 'json',
                                       binary='ceph'))
    listed = {m['addr'].rpartition('/')[0] for m in dump['mons']}
    defined = pool_specs.pool_source(
        rbd_driver._pools.get(pool_specs.DISKS_POOL))
    assert set(defined.hosts) == listed
    assert location == pool_specs.location_key(defined) + (
        ';fsid=%s' % ceph_cluster.fsid)

    other = location.replace(ceph_cluster.fsid, str(uuid.uuid4()))
    decision = _recorded_elsewhere(rbd_driver, inst, 'ceph-vms', other)
    assert decision.pool == other
    with pytest.raises(exception.PoolNotFound):
        rbd_driver.image_backend.by_name(inst, 'disk')

    legacy = 'rbd:%s@%s' % (ceph_cluster.pool, ceph_cluster.mon_addr)
    decision = _recorded_elsewhere(rbd_driver, inst, 'ceph-vms', legacy)
    assert decision.pool == pool_specs.DISKS_POOL
    assert rbd_driver.image_backend.by_name(inst, 'disk').path == disk.path


def test_the_same_ceph_pool_with_monitors_listed_otherwise_is_kept(
        rbd_driver, raw_image, ceph_cluster):
    """A host that lists the cluster's monitors by name where this one
    lists addresses: no monitor in common, but the recorded pool of this
    name is an rbd pool of the same Ceph pool: it is taken, as before
    locations were recorded (with a warning), not refused."""
    image_id, _digest = raw_image
    inst, disk = _boot_disk(rbd_driver, image_id, 'raw')
    decision = _recorded_elsewhere(
        rbd_driver, inst, pool_specs.DISKS_POOL,
        'rbd:%s@ceph-mon-1.example:6789' % ceph_cluster.pool)
    assert decision.pool == pool_specs.DISKS_POOL
    assert rbd_driver.image_backend.by_name(inst, 'disk').exists()


def test_a_config_drive_is_imported_through_the_hosts_ceph_conf(
        rbd_driver, raw_image, ceph_cluster):
    """Stock's config drive step for an instance on the rbd pool: the
    drive goes to the cluster ``images_rbd_ceph_conf`` names (there is no
    /etc/ceph/ceph.conf here, as on a compute whose Ceph configuration is
    elsewhere), whole, and stock removes the local copy (once)."""
    assert not os.path.exists('/etc/ceph/ceph.conf')
    image_id, _digest = raw_image
    inst, _disk = _boot_disk(rbd_driver, image_id, 'raw')
    inst.config_drive = 'True'
    inst.flavor = objects.Flavor(extra_specs={})
    inst.metadata = {}
    local = os.path.join(libvirt_utils.get_instance_path(inst),
                         'disk.config')
    os.makedirs(os.path.dirname(local), exist_ok=True)   # _create_image's
    with config_drive_fakes():
        rbd_driver._create_configdrive(
            nova_context.get_admin_context(), inst,
            stock_driver.InjectionInfo(network_info=[], files=[],
                                       admin_pass=None))
    vol = pool_specs.volume_name(inst.uuid, 'disk.config')
    assert vol in ceph_cluster.images()
    assert not [i for i in ceph_cluster.images() if '.part-' in i]
    assert not os.path.exists(local)
    # The drive (an ISO 9660 image) holds the instance's metadata.
    data = subprocess.run(
        ['rbd', '-c', ceph_cluster.conf, 'export', '--no-progress',
         ceph_cluster.image_spec(vol), '-'],
        check=True, capture_output=True).stdout
    assert data[32769:32774] == b'CD001'
    assert inst.uuid.encode() in data


def _glance_copy_in_ceph(cluster, image_id, path, fsid=None):
    """Glance's copy of the image in the cluster, as Glance's rbd store
    keeps it (an image with a protected snapshot ``snap``); its location."""
    spec = cluster.image_spec(image_id)
    cluster.rbd('import', '--no-progress', path, spec)
    cluster.rbd('snap', 'create', spec + '@snap')
    cluster.rbd('snap', 'protect', spec + '@snap')
    return 'rbd://%s/%s/%s/snap' % (fsid or cluster.fsid, cluster.pool,
                                    image_id)


def _root_disk_as_stock_makes_it(drv, image_id, fmt='raw', root_gb=1,
                                 inst=None):
    """Stock's own spawn step for the root disk
    (``_create_and_inject_local_root``), of an instance recorded as the
    plugin records a build (or of ``inst``, as stock's finish_migration
    runs it again); the disk it made."""
    if inst is None:
        inst = objects.Instance(
            uuid=str(uuid.uuid4()), image_ref=image_id, task_state=None,
            vm_state='building', trusted_certs=None, migration_context=None,
            config_drive='',
            flavor=objects.Flavor(root_gb=root_gb, ephemeral_gb=0, swap=0),
            system_metadata={'image_disk_format': fmt})
        drv._resolver.record(inst, drv._resolver.decide(fmt))
    else:
        inst.flavor = objects.Flavor(root_gb=root_gb, ephemeral_gb=0, swap=0)
    mapping = {'disk': {'bus': 'virtio', 'dev': 'vda', 'type': 'disk'}}
    drv._create_and_inject_local_root(
        nova_context.get_admin_context(), inst, mapping, False, '',
        {'image_id': image_id}, None, None)
    return inst, drv.image_backend.by_name(inst, 'disk')


@pytest.fixture
def glance_locations(monkeypatch, glance):  # noqa: F811
    """{image_id: location url} the image API gives stock's clone; what
    was downloaded."""
    from nova.virt.libvirt import imagebackend as stock_imagebackend

    from nova_imgtype.virt.libvirt.template_handlers import downloading

    urls = {}
    downloaded = []

    def get(context, image_id, include_locations=False, **kwargs):
        path, fmt = glance[image_id]
        meta = {'id': image_id, 'disk_format': fmt,
                'container_format': 'bare', 'size': os.path.getsize(path)}
        if include_locations:
            meta['locations'] = [{'url': urls[image_id], 'metadata': {}}]
        return meta

    def download(*args, **kwargs):
        downloaded.append(args[1] if len(args) > 1 else kwargs)
        raise AssertionError('downloaded')

    from nova.virt import images as nova_images
    for api in (stock_imagebackend.IMAGE_API, nova_images.IMAGE_API,
                downloading.IMAGE_API):
        monkeypatch.setattr(api, 'get', get)
    for api in (nova_images.IMAGE_API, downloading.IMAGE_API):
        monkeypatch.setattr(api, 'download', download)
    return urls, downloaded


def test_an_image_glance_keeps_in_this_cluster_is_cloned_as_stock_does(
        rbd_driver, raw_image, ceph_cluster, glance,  # noqa: F811
        glance_locations):
    """Stock's Rbd clones an image whose Glance copy is in its cluster:
    nothing downloaded, nothing uploaded, the disk an RBD clone of
    Glance's snapshot. A pool instance's rbd disk is made the same way."""
    image_id, digest = raw_image
    urls, downloaded = glance_locations
    urls[image_id] = _glance_copy_in_ceph(ceph_cluster, image_id,
                                          glance[image_id][0])
    inst, disk = _root_disk_as_stock_makes_it(rbd_driver, image_id)

    assert isinstance(disk, storage_rbd.RbdStorage)
    assert downloaded == []
    vol = pool_specs.volume_name(inst.uuid, 'disk')
    info = ceph_cluster.rbd_json('info', ceph_cluster.image_spec(vol))
    assert (info['parent']['image'], info['parent']['snapshot']) == (
        image_id, 'snap')
    assert info['size'] == 1024 * MiB           # the flavor's root disk
    assert _rbd_head_sha256(ceph_cluster, vol, IMAGE_SIZE) == digest
    # No template of the plugin's in Ceph, and libvirt lists the volume.
    assert not [i for i in ceph_cluster.images()
                if i.startswith(pool_specs.RBD_TEMPLATE_PREFIX)]
    assert rbd_driver._pools.find_volume(
        rbd_driver._pools.get(pool_specs.DISKS_POOL), vol) is not None


def test_never_download_image_if_on_rbd_is_kept(
        rbd_driver, raw_image, ceph_cluster, glance, conf,  # noqa: F811
        glance_locations):
    """Stock's rule on an rbd host: an image Glance does not keep in this
    cluster is refused, never downloaded and uploaded."""
    image_id, _digest = raw_image
    urls, downloaded = glance_locations
    urls[image_id] = 'rbd://%s/images/%s/snap' % (uuid.uuid4(), image_id)
    conf.config(group='workarounds', never_download_image_if_on_rbd=True)
    with pytest.raises(nova_exception.ImageUnacceptable):
        _root_disk_as_stock_makes_it(rbd_driver, image_id)
    assert downloaded == []
    assert not [i for i in ceph_cluster.images()
                if i.startswith(pool_specs.RBD_TEMPLATE_PREFIX)]


def test_a_resize_on_shared_ceph_keeps_the_cloned_disk(
        rbd_driver, raw_image, ceph_cluster, glance,  # noqa: F811
        glance_locations):
    """Stock's finish_migration runs the root disk's spawn step again on
    the destination; on an rbd pool the disk is already there (shared
    Ceph). As stock's Rbd, nothing is cloned or fetched again (a clone
    into the existing image failed with ImageExists: the resize ended in
    ERROR); the disk keeps its data and grows to the new flavor."""
    image_id, digest = raw_image
    urls, downloaded = glance_locations
    urls[image_id] = _glance_copy_in_ceph(ceph_cluster, image_id,
                                          glance[image_id][0])
    inst, _disk = _root_disk_as_stock_makes_it(rbd_driver, image_id)
    vol = pool_specs.volume_name(inst.uuid, 'disk')
    spec = ceph_cluster.image_spec(vol)
    ceph_cluster.rbd('snap', 'create', '%s@%s' % (spec, RESIZE_SNAPSHOT))

    _root_disk_as_stock_makes_it(rbd_driver, image_id, root_gb=2, inst=inst)

    assert downloaded == []
    info = ceph_cluster.rbd_json('info', spec)
    assert (info['parent']['image'], info['parent']['snapshot']) == (
        image_id, 'snap')
    assert info['size'] == 2048 * MiB
    assert _rbd_head_sha256(ceph_cluster, vol, IMAGE_SIZE) == digest
    # The resize snapshot (the revert's) is the one taken before.
    assert [s['name'] for s in ceph_cluster.rbd_json('snap', 'ls', spec)
            ] == [RESIZE_SNAPSHOT]


def test_an_unshelved_clone_is_flattened_as_stock_does(
        rbd_driver, raw_image, ceph_cluster, glance,  # noqa: F811
        glance_locations):
    """Stock flattens a root disk cloned from the shelved instance's
    snapshot when it unshelves (``_try_fetch_image_cache``, its Rbd's
    ``flatten``): the snapshot image, which Nova deletes at the end of the
    unshelve, must not have clones (Glance on RBD refuses to delete it).
    An rbd pool volume is flattened the same way. Found by the gate's Ceph
    profile: tempest's shelve/unshelve waited 300 s for the image to go
    when the unshelve landed on the rbd pool host."""
    image_id, digest = raw_image
    urls, _downloaded = glance_locations
    urls[image_id] = _glance_copy_in_ceph(ceph_cluster, image_id,
                                          glance[image_id][0])
    inst = objects.Instance(
        uuid=str(uuid.uuid4()), image_ref=image_id, task_state='spawning',
        vm_state='shelved_offloaded', trusted_certs=None,
        migration_context=None, config_drive='',
        system_metadata={'image_disk_format': 'raw'})
    rbd_driver._resolver.record(inst, rbd_driver._resolver.decide('raw'))
    inst, disk = _root_disk_as_stock_makes_it(rbd_driver, image_id,
                                              inst=inst)

    assert isinstance(disk, storage_rbd.RbdStorage)
    vol = pool_specs.volume_name(inst.uuid, 'disk')
    info = ceph_cluster.rbd_json('info', ceph_cluster.image_spec(vol))
    assert 'parent' not in info                 # flattened
    assert _rbd_head_sha256(ceph_cluster, vol, IMAGE_SIZE) == digest
    # The snapshot image can go, as Glance removes it.
    spec = ceph_cluster.image_spec(image_id)
    ceph_cluster.rbd('snap', 'unprotect', spec + '@snap')
    ceph_cluster.rbd('snap', 'rm', spec + '@snap')
    ceph_cluster.rbd('rm', '--no-progress', spec)
    assert image_id not in ceph_cluster.images()


def test_a_disk_another_host_removed_from_ceph_is_made_anew(
        rbd_driver, raw_image, ceph_cluster):
    """Issue 54's Ceph matrix: a shelve offloaded on another compute removes
    the instance's RBD image behind this host's libvirt, whose rbd pool
    lists it until its next refresh. Ceph, not that list, says whether the
    disk exists: the unshelve here makes it anew instead of failing on an
    image that is gone."""
    image_id, digest = raw_image
    inst, disk = _boot_disk(rbd_driver, image_id, 'raw')
    vol = pool_specs.volume_name(inst.uuid, 'disk')
    ceph_cluster.rbd('rm', '--no-progress', ceph_cluster.image_spec(vol))
    disks = rbd_driver._pools.get(pool_specs.DISKS_POOL)
    assert vol in disks.listVolumes()           # not refreshed here

    assert not disk.exists()
    rbd_driver._try_fetch_image_cache(
        disk, libvirt_utils.fetch_image, nova_context.get_admin_context(),
        nova_imagecache.get_cache_fname(image_id), image_id, inst, 64 * MiB)

    assert disk.exists()
    assert ceph_cluster.rbd_json(
        'info', ceph_cluster.image_spec(vol))['size'] == 64 * MiB
    assert _rbd_head_sha256(ceph_cluster, vol, IMAGE_SIZE) == digest


def test_a_direct_snapshot_of_a_template_clone_goes_to_glances_pool(
        rbd_driver, raw_image, ceph_cluster):
    """Issue 54's Ceph matrix: an rbd pool volume (an RBD clone of
    nova-imgtype's template in Nova's pool) served by stock's class on a
    host without pools. Stock's direct snapshot took the clone's parent
    pool, Nova's, for Glance's: Glance refused that location and the
    snapshot stayed queued. Glance's pool now comes from the image's
    locations, stock's rule for a disk that is no clone (Glance's API is
    this tier's fake: its answer is given here)."""
    from nova.virt.libvirt import imagebackend as nova_imagebackend

    from nova_imgtype.virt.libvirt import rbd

    image_id, _digest = raw_image
    inst, _disk = _boot_disk(rbd_driver, image_id, 'raw')
    served = rbd.Rbd(instance=inst, disk_name='disk')
    fsid = served.driver.get_fsid()
    parent = served.driver.parent_info(served.rbd_name)
    assert parent[0] == ceph_cluster.pool and parent[1].startswith(
        pool_specs.RBD_TEMPLATE_PREFIX)
    context = nova_context.get_admin_context()
    where = {'locations': [
        {'url': 'rbd://other-cluster/elsewhere/%s/snap' % image_id},
        {'url': 'rbd://%s/glance-images/%s/snap' % (fsid, image_id)}]}
    with mock.patch.object(nova_imagebackend.IMAGE_API, 'get',
                           return_value=where) as get:
        assert served._get_parent_pool(context, image_id,
                                       fsid) == 'glance-images'
        get.assert_called_once_with(context, image_id,
                                    include_locations=True)
        # Stock's own class takes Nova's pool.
        stock = nova_imagebackend.Rbd(instance=inst, disk_name='disk')
        assert stock._get_parent_pool(context, image_id,
                                      fsid) == ceph_cluster.pool
    # An image Glance keeps in no pool of this cluster: no direct
    # snapshot (stock then uploads).
    with mock.patch.object(nova_imagebackend.IMAGE_API, 'get',
                           return_value={'locations': []}):
        with pytest.raises(nova_exception.ImageUnacceptable):
            served._get_parent_pool(context, image_id, fsid)
    assert served.driver.parent_info(served.rbd_name) == parent
