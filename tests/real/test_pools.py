"""Real: the storage pool layer on the throwaway libvirtd, with real dir
pools, real files and qemu-img, and a domain booted from pool volumes."""

import os
import subprocess
import uuid

import libvirt
import pytest

from nova_imgtype import exception
from nova_imgtype.stock import volume_disk
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import pools
from nova_imgtype_testing import libvirtd as real

MiB = 1024 * 1024


@pytest.fixture
def sp(libvirt_conn, libvirt_tmp_path):
    """Default pools under a fresh instances_path; removed afterwards."""
    storage = pools.StoragePools(lambda: libvirt_conn)
    base, disks = pool_specs.default_specs(str(libvirt_tmp_path / 'instances'))
    storage.base = storage.ensure(base)
    storage.disks = storage.ensure(disks)
    storage.specs = (base, disks)
    yield storage
    for pool in (storage.base, storage.disks):
        if pool.isActive():
            pool.destroy()
        pool.undefine()


def _template(sp, name, fmt, size=32 * MiB, **kw):
    """A real image dropped into the cache directory, as a download does."""
    path = os.path.join(sp.specs[0].target, name)
    real.make_image(path, fmt, size, **kw)
    sp.refresh(pool_specs.BASE_POOL)
    return path, sp.base.storageVolLookupByName(name)


def test_cow_overlay_backs_onto_the_cached_template(sp):
    tmpl, _ = _template(sp, 'tmpl-raw', 'raw')
    name = pool_specs.volume_name(str(uuid.uuid4()), 'disk')
    vol = sp.create_cow(sp.disks, name, tmpl, 'raw', 64 * MiB)
    chain = real.qemu_img_info(vol.path(), backing_chain=True)
    assert chain[0]['format'] == 'qcow2'
    assert chain[0]['format-specific']['data']['compat'] == '1.1'
    assert chain[0]['virtual-size'] == 64 * MiB
    assert chain[0]['full-backing-filename'] == tmpl
    assert chain[1]['filename'] == tmpl and chain[1]['format'] == 'raw'
    # The overlay holds no data of its own: O(1) whatever the size.
    assert os.path.getsize(vol.path()) < MiB
    assert sp.backing_paths(sp.disks) == {tmpl}


@pytest.mark.parametrize('src_fmt,dst_fmt', [('raw', 'qcow2'),
                                             ('qcow2', 'raw')])
def test_copy_converts_and_keeps_the_data(sp, src_fmt, dst_fmt):
    tmpl, src = _template(sp, 'tmpl-' + src_fmt, src_fmt)
    name = pool_specs.volume_name(str(uuid.uuid4()), 'disk')
    vol = sp.copy(sp.disks, name, src, src_fmt, dst_fmt, 48 * MiB)
    info = real.qemu_img_info(vol.path())
    assert info['format'] == dst_fmt
    assert 'backing-filename' not in info
    assert info['virtual-size'] == 48 * MiB
    # Sparse like stock's disks (libvirt preallocates unless told).
    assert info['actual-size'] < 8 * MiB
    # Same guest data in the first 32 MiB (the copy is grown with zeroes).
    head = vol.path() + '.head'
    real.qemu_img('convert', '-O', 'raw', '-f', dst_fmt, vol.path(), head)
    os.truncate(head, 32 * MiB)
    assert (real.sha256_of_guest_data(head, 'raw') ==
            real.sha256_of_guest_data(tmpl, src_fmt))
    os.unlink(head)


def test_raw_copy_copies_the_data_alone_and_keeps_the_holes(sp):
    # libvirt's createXMLFrom would read all 256 MiB; the data extents are
    # copied alone (a few MiB here), holes stay holes, at the same offsets.
    path = os.path.join(sp.specs[0].target, 'tmpl-sparse')
    with open(path, 'wb') as f:
        f.truncate(256 * MiB)
        for offset in (0, 100 * MiB, 256 * MiB - MiB):
            f.seek(offset)
            f.write(os.urandom(MiB))
    sp.refresh(pool_specs.BASE_POOL)
    src = sp.base.storageVolLookupByName('tmpl-sparse')
    name = pool_specs.volume_name(str(uuid.uuid4()), 'disk')
    vol = sp.copy(sp.disks, name, src, 'raw', 'raw', 512 * MiB)
    assert pool_specs.volume_format(vol) == 'raw'
    assert vol.info()[1] == 512 * MiB          # grown to the capacity
    with open(path, 'rb') as a, open(vol.path(), 'rb') as b:
        assert b.read(256 * MiB) == a.read()
        assert b.read() == bytes(256 * MiB)
    assert os.stat(vol.path()).st_blocks * 512 < 8 * MiB
    # A volume of the pool like any other.
    sp.refresh(pool_specs.DISKS_POOL)
    assert sp.find_volume(sp.disks, name) is not None


def test_raw_copy_of_a_linked_template_copies_the_device(sp, tmp_path):
    # A linked template is a link to a block device (the image volume):
    # its data are copied whole, by libvirt (st_size says 0 for it).
    backing = tmp_path / 'volume'
    data = os.urandom(MiB)
    with open(backing, 'wb') as f:
        f.truncate(16 * MiB)
        f.seek(4 * MiB)
        f.write(data)
    loop = subprocess.run(['losetup', '--find', '--show', str(backing)],
                          check=True, capture_output=True,
                          text=True).stdout.strip()
    try:
        os.symlink(loop, os.path.join(sp.specs[0].target, 'tmpl-linked'))
        sp.refresh(pool_specs.BASE_POOL)
        src = sp.base.storageVolLookupByName('tmpl-linked')
        name = pool_specs.volume_name(str(uuid.uuid4()), 'disk')
        vol = sp.copy(sp.disks, name, src, 'raw', 'raw', 32 * MiB)
        with open(vol.path(), 'rb') as f:
            f.seek(4 * MiB)
            assert f.read(MiB) == data
        assert vol.info()[1] == 32 * MiB
    finally:
        subprocess.run(['losetup', '--detach', loop], check=True)


def test_a_failed_raw_copy_leaves_no_volume(sp, monkeypatch):
    _tmpl, src = _template(sp, 'tmpl-raw', 'raw')
    name = pool_specs.volume_name(str(uuid.uuid4()), 'disk')

    def enospc(*args):
        raise OSError(28, 'No space left on device')

    monkeypatch.setattr(os, 'copy_file_range', enospc)
    with pytest.raises(exception.VolumeCreateFailed,
                       match='No space left'):
        sp.copy(sp.disks, name, src, 'raw', 'raw', 48 * MiB)
    sp.refresh(pool_specs.DISKS_POOL)
    assert sp.find_volume(sp.disks, name) is None
    assert not os.path.exists(pool_specs.volume_path(sp.disks, name))


def test_failed_creation_leaves_nothing(sp):
    name = pool_specs.volume_name(str(uuid.uuid4()), 'disk')
    with pytest.raises(exception.VolumeCreateFailed) as e:
        sp.create_cow(sp.disks, name, '/nonexistent/template', 'qcow2',
                      MiB)
    assert name in str(e.value) and pool_specs.DISKS_POOL in str(e.value)
    assert sp.find_volume(sp.disks, name) is None
    assert os.listdir(sp.specs[1].target) == []


def test_domain_boots_from_pool_volumes_and_delete_leaves_nothing(
        sp, libvirt_conn, kvm_available):
    tmpl, _ = _template(sp, 'tmpl-qcow2', 'qcow2', compressed=True)
    inst = str(uuid.uuid4())
    sp.create_cow(sp.disks, pool_specs.volume_name(inst, 'disk'), tmpl,
                  'qcow2', 64 * MiB)
    sp.create_cow(sp.disks, pool_specs.volume_name(inst, 'disk.local'), tmpl,
                  'qcow2', 64 * MiB)
    disks = []
    for dev, disk_name in (('vda', 'disk'), ('vdb', 'disk.local')):
        cfg = volume_disk.LibvirtConfigGuestVolumeDisk()
        cfg.source_pool = pool_specs.DISKS_POOL
        cfg.source_volume = pool_specs.volume_name(inst, disk_name)
        cfg.driver_name, cfg.driver_format = 'qemu', 'qcow2'
        cfg.target_dev, cfg.target_bus = dev, 'virtio'
        disks.append(cfg.to_xml())
    dom = real.start_domain(libvirt_conn, 'pool-' + inst[:8], disks,
                            kvm=kvm_available)
    try:
        assert dom.isActive()
        # libvirt resolved the volume to its file.
        assert dom.blockInfo('vda')[0] == 64 * MiB
    finally:
        real.destroy_domain(dom)

    deleted = sp.delete_instance_volumes(sp.disks, inst)
    assert len(deleted) == 2
    assert os.listdir(sp.specs[1].target) == []
    assert [v.name() for v in sp.volumes(sp.disks)] == []
    # The template stays in the cache.
    assert os.path.exists(tmpl)


def test_domain_on_a_missing_volume_fails_clearly(sp, libvirt_conn,
                                                  kvm_available):
    cfg = volume_disk.LibvirtConfigGuestVolumeDisk()
    cfg.source_pool, cfg.source_volume = pool_specs.DISKS_POOL, 'nope_disk'
    cfg.driver_name, cfg.driver_format = 'qemu', 'qcow2'
    cfg.target_dev, cfg.target_bus = 'vda', 'virtio'
    with pytest.raises(libvirt.libvirtError) as e:
        real.start_domain(libvirt_conn, 'pool-missing', [cfg.to_xml()],
                          kvm=kvm_available)
    assert e.value.get_error_code() == libvirt.VIR_ERR_NO_STORAGE_VOL


def test_a_copy_libvirt_would_read_otherwise_than_recorded_is_refused(
        sp, tmp_path):
    """Issue 27: a raw file holding a qcow2 header (a guest's, or a
    rewritten template's) that names a host file. libvirt reads it as a
    qcow2 overlay of that file and ``createXMLFrom`` would copy the host
    file's data."""
    secret = tmp_path / 'secret'
    secret.write_bytes(b'SECRET' * 1000)
    path = os.path.join(sp.specs[0].target, 'tmpl-poisoned')
    real.qemu_img('create', '-q', '-f', 'qcow2', '-b', str(secret), '-F',
                  'raw', path, '1M')
    sp.refresh(pool_specs.BASE_POOL)
    src = sp.base.storageVolLookupByName('tmpl-poisoned')
    name = pool_specs.volume_name(str(uuid.uuid4()), 'disk')
    with pytest.raises(exception.VolumeFormatMismatch,
                       match='tmpl-poisoned is recorded as raw but libvirt '
                             'reads it as qcow2'):
        sp.copy(sp.disks, name, src, 'raw', 'qcow2', 48 * MiB)
    sp.refresh(pool_specs.DISKS_POOL)
    assert sp.find_volume(sp.disks, name) is None


def arriving_alive(pool):
    try:
        return pool.isActive()
    except libvirt.libvirtError:
        return False


def test_a_pool_destroyed_while_this_host_lists_them_is_passed_over(
        libvirt_uri, libvirt_tmp_path):
    # A cold move into this host makes and destroys a transient pool over
    # the instance directory (remote_storage) while this host's own code
    # lists the pools to find one by its place: the vanished pool is not
    # an error of the search.
    conn = libvirt.open(libvirt_uri)
    other = libvirt_tmp_path / 'arriving-instance'
    other.mkdir()
    wanted = libvirt_tmp_path / 'wanted'
    wanted.mkdir()
    arriving = conn.storagePoolCreateXML(
        "<pool type='dir'><name>nova-imgtype-remote-arriving</name><target>"
        "<path>%s</path></target></pool>" % other, 0)
    found = conn.storagePoolCreateXML(
        "<pool type='dir'><name>nova-test-wanted</name><target>"
        "<path>%s</path></target></pool>" % wanted, 0)
    listed = conn.listAllStoragePools

    def list_then_the_move_ends(flags=0):
        pools_ = listed(flags)
        if arriving_alive(arriving):
            arriving.destroy()
        return pools_

    conn.listAllStoragePools = list_then_the_move_ends
    try:
        storage = pools.StoragePools(lambda: conn)
        # Every pool read (none is over this one), the vanished one too.
        assert storage.dir_pool_at(str(libvirt_tmp_path / 'none')) is None
        assert not arriving_alive(arriving)
        pool = storage.dir_pool_at(str(wanted))
        assert pool is not None and pool.name() == 'nova-test-wanted'
    finally:
        found.destroy()
        conn.close()
