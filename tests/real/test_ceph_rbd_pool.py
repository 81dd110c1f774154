"""Real: libvirt ``rbd`` storage pools on a throwaway one-node Ceph cluster.

The session's throwaway libvirtd (its rbd storage backend,
``libvirt-daemon-driver-storage-rbd``) against the cluster of
:mod:`gate.ceph`; what libvirt did is checked with the ``rbd`` CLI,
data by checksum (``rbd export``). What libvirt 9.0 does not do for rbd
pools is pinned down too: no volume upload/download, no copy from or to
another pool's volume.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import subprocess
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator

import libvirt
import pytest

from gate import ceph
from nova_imgtype_testing import libvirtd as real

MiB = 1024 * 1024
SIZE = 16 * MiB


def _define_rbd_pool(conn: libvirt.virConnect,
                     cluster: ceph.CephCluster) -> libvirt.virStoragePool:
    name = 'rbd-%s' % uuid.uuid4().hex[:8]
    pool = conn.storagePoolDefineXML(ceph.rbd_pool_xml(cluster, name), 0)
    try:
        pool.create(0)
    except libvirt.libvirtError:
        pool.undefine()
        raise
    return pool


def _remove_pool(pool: libvirt.virStoragePool) -> None:
    if pool.isActive():
        pool.destroy()
    if pool.isPersistent():
        pool.undefine()


@pytest.fixture
def rbd_pool(libvirt_conn: libvirt.virConnect,
             ceph_cluster: ceph.CephCluster
             ) -> Iterator[libvirt.virStoragePool]:
    """A started libvirt rbd pool on the cluster's pool; emptied after."""
    pool = _define_rbd_pool(libvirt_conn, ceph_cluster)
    try:
        yield pool
    finally:
        _remove_pool(pool)
        ceph_cluster.purge()


@pytest.fixture
def dir_pool(libvirt_conn: libvirt.virConnect,
             libvirt_tmp_path: pathlib.Path
             ) -> Iterator[libvirt.virStoragePool]:
    """A transient dir pool in a fresh directory."""
    path = libvirt_tmp_path / 'dirpool'
    path.mkdir()
    pool = libvirt_conn.storagePoolCreateXML(
        "<pool type='dir'><name>dir-%s</name>"
        "<target><path>%s</path></target></pool>"
        % (uuid.uuid4().hex[:8], path), 0)
    try:
        yield pool
    finally:
        pool.destroy()


def _vol_xml(name: str, capacity: int) -> str:
    return ("<volume><name>%s</name>"
            "<capacity unit='bytes'>%d</capacity></volume>"
            % (name, capacity))


def _rbd_size(cluster: ceph.CephCluster, image: str) -> int:
    return int(cluster.rbd_json('info', cluster.image_spec(image))['size'])


def _rbd_sha256(cluster: ceph.CephCluster, image: str) -> str:
    """sha256 of an image's data, read back by ``rbd export``."""
    data = subprocess.run(
        ['rbd', '-c', cluster.conf, 'export', '--no-progress',
         cluster.image_spec(image), '-'],
        check=True, capture_output=True).stdout
    return hashlib.sha256(data).hexdigest()


def _template(tmp_path: pathlib.Path, fmt: str,
              size: int = SIZE) -> tuple[pathlib.Path, str]:
    """A real image and the sha256 of its guest data."""
    path = tmp_path / ('template.' + fmt)
    chunks = real.make_image(path, fmt, size)
    return path, real.sha256_of_chunks(size, chunks)


def _qemu_img_to_rbd(cluster: ceph.CephCluster, src: pathlib.Path,
                     fmt: str, image: str) -> None:
    """Write a local image's guest data into an existing rbd image."""
    real.qemu_img('convert', '-n', '-f', fmt, '-O', 'raw', src,
                  cluster.qemu_spec(image))


def _filled_volume(pool: libvirt.virStoragePool,
                   cluster: ceph.CephCluster, tmp_path: pathlib.Path,
                   name: str) -> tuple[libvirt.virStorageVol, str]:
    """A libvirt volume holding a raw template's data, and its sha256."""
    src, digest = _template(tmp_path, 'raw')
    vol = pool.createXML(_vol_xml(name, SIZE), 0)
    _qemu_img_to_rbd(cluster, src, 'raw', name)
    return vol, digest


# --------------------------------------------------------------------------
# The pool and its volumes
# --------------------------------------------------------------------------

def test_rbd_pool_shows_the_images_of_the_ceph_pool(rbd_pool,
                                                    ceph_cluster):
    xml = rbd_pool.XMLDesc(0)
    assert "type='rbd'" in xml
    assert "port='%d'" % ceph_cluster.mon_port in xml
    assert '<name>%s</name>' % ceph_cluster.pool in xml
    assert rbd_pool.info()[0] == libvirt.VIR_STORAGE_POOL_RUNNING
    ceph_cluster.rbd('create', '--size', '12M',
                     ceph_cluster.image_spec('made-by-rbd'))
    rbd_pool.refresh(0)
    assert 'made-by-rbd' in rbd_pool.listVolumes()
    vol = rbd_pool.storageVolLookupByName('made-by-rbd')
    assert vol.path() == ceph_cluster.image_spec('made-by-rbd')
    assert vol.info()[:2] == [libvirt.VIR_STORAGE_VOL_NETWORK, 12 * MiB]


def test_volume_create_resize_delete(rbd_pool, ceph_cluster):
    vol = rbd_pool.createXML(_vol_xml('disk', 8 * MiB), 0)
    assert vol.path() == ceph_cluster.image_spec('disk')
    info = ceph_cluster.rbd_json('info', ceph_cluster.image_spec('disk'))
    assert info['size'] == 8 * MiB
    assert info['format'] == 2 and 'layering' in info['features']

    vol.resize(24 * MiB, 0)
    assert _rbd_size(ceph_cluster, 'disk') == 24 * MiB
    assert vol.info()[1] == 24 * MiB

    vol.delete(0)
    assert 'disk' not in ceph_cluster.images()
    with pytest.raises(libvirt.libvirtError) as e:
        rbd_pool.storageVolLookupByName('disk')
    assert e.value.get_error_code() == libvirt.VIR_ERR_NO_STORAGE_VOL


def test_rbd_volumes_are_raw_only(rbd_pool, ceph_cluster):
    xml = ("<volume><name>q</name><capacity unit='MiB'>8</capacity>"
           "<target><format type='qcow2'/></target></volume>")
    with pytest.raises(libvirt.libvirtError,
                       match='only RAW volumes are supported'):
        rbd_pool.createXML(xml, 0)
    assert 'q' not in ceph_cluster.images()


def test_volumes_cannot_shrink(rbd_pool, ceph_cluster):
    # libvirt counts an rbd volume fully allocated (allocation is the
    # capacity), so any shrink is below the "allocation".
    vol = rbd_pool.createXML(_vol_xml('disk', 8 * MiB), 0)
    assert vol.info()[2] == 8 * MiB
    with pytest.raises(libvirt.libvirtError,
                       match="can't shrink capacity below existing "
                             "allocation"):
        vol.resize(4 * MiB, libvirt.VIR_STORAGE_VOL_RESIZE_SHRINK)
    assert _rbd_size(ceph_cluster, 'disk') == 8 * MiB


# --------------------------------------------------------------------------
# Putting a template's data into an rbd volume
# --------------------------------------------------------------------------

def test_libvirt_has_no_upload_nor_download_for_rbd(rbd_pool,
                                                    libvirt_conn):
    vol = rbd_pool.createXML(_vol_xml('disk', MiB), 0)
    for method, what in ((vol.upload, 'upload'),
                         (vol.download, 'download')):
        stream = libvirt_conn.newStream(0)
        try:
            with pytest.raises(libvirt.libvirtError) as e:
                method(stream, 0, MiB, 0)
        finally:
            try:
                stream.abort()
            except libvirt.libvirtError:
                pass
        assert e.value.get_error_code() == libvirt.VIR_ERR_NO_SUPPORT
        assert "storage pool doesn't support volume %s" % what in str(
            e.value)


@pytest.mark.parametrize('fmt', ['raw', 'qcow2'])
def test_qemu_img_convert_into_a_libvirt_volume(rbd_pool, ceph_cluster,
                                                tmp_path, fmt):
    src, digest = _template(tmp_path, fmt)
    vol = rbd_pool.createXML(_vol_xml('disk', SIZE), 0)
    assert _rbd_sha256(ceph_cluster, 'disk') != digest
    _qemu_img_to_rbd(ceph_cluster, src, fmt, 'disk')
    assert _rbd_sha256(ceph_cluster, 'disk') == digest
    assert vol.info()[1] == SIZE


def test_rbd_import_as_nova_does(rbd_pool, ceph_cluster, tmp_path):
    # nova.storage.rbd_utils.RBDDriver.import_image's command line.
    src, digest = _template(tmp_path, 'raw')
    ceph_cluster.rbd('import', '--pool', ceph_cluster.pool, src, 'tmpl',
                     '--image-format=2', '--no-progress')
    assert _rbd_sha256(ceph_cluster, 'tmpl') == digest
    rbd_pool.refresh(0)
    vol = rbd_pool.storageVolLookupByName('tmpl')
    assert vol.info()[1] == SIZE


def test_rbd_import_copies_a_qcow2_file_as_it_is(rbd_pool, ceph_cluster,
                                                 tmp_path):
    # Not converted: Nova converts to raw before importing.
    src, digest = _template(tmp_path, 'qcow2')
    ceph_cluster.rbd('import', '--pool', ceph_cluster.pool, src, 'tmpl',
                     '--image-format=2', '--no-progress')
    assert _rbd_size(ceph_cluster, 'tmpl') == os.path.getsize(src)
    assert _rbd_sha256(ceph_cluster, 'tmpl') != digest
    info = real.qemu_img_info(ceph_cluster.qemu_spec('tmpl'),
                              force_share=False)
    assert info['format'] == 'qcow2' and info['virtual-size'] == SIZE


# --------------------------------------------------------------------------
# createXMLFrom
# --------------------------------------------------------------------------

def test_create_from_in_the_same_pool_is_an_rbd_clone(rbd_pool,
                                                      ceph_cluster,
                                                      tmp_path):
    src, digest = _filled_volume(rbd_pool, ceph_cluster, tmp_path, 'tmpl')
    # The capacity asked for is ignored: a clone has its parent's size.
    clone = rbd_pool.createXMLFrom(_vol_xml('disk', 2 * SIZE), src, 0)

    info = ceph_cluster.rbd_json('info', ceph_cluster.image_spec('disk'))
    parent = info['parent']
    assert (parent['pool'], parent['image']) == (ceph_cluster.pool, 'tmpl')
    assert parent['snapshot'].startswith('libvirt-')
    snaps = ceph_cluster.rbd_json('snap', 'ls',
                                  ceph_cluster.image_spec('tmpl'))
    assert [(s['name'], s['protected']) for s in snaps] == [
        (parent['snapshot'], 'true')]
    assert info['size'] == SIZE and clone.info()[1] == SIZE
    assert _rbd_sha256(ceph_cluster, 'disk') == digest

    # Grown afterwards; writes to the clone leave the parent alone.
    clone.resize(2 * SIZE, 0)
    assert _rbd_size(ceph_cluster, 'disk') == 2 * SIZE
    subprocess.run(['qemu-io', '-f', 'raw', '-c', 'write -q -P 0x5a 0 64k',
                    ceph_cluster.qemu_spec('disk')], check=True,
                   capture_output=True)
    assert _rbd_sha256(ceph_cluster, 'tmpl') == digest
    assert _rbd_sha256(ceph_cluster, 'disk') != digest


def test_a_cloned_volume_is_deleted_after_its_clones(rbd_pool,
                                                     ceph_cluster,
                                                     tmp_path):
    src, _ = _filled_volume(rbd_pool, ceph_cluster, tmp_path, 'tmpl')
    clone = rbd_pool.createXMLFrom(_vol_xml('disk', SIZE), src, 0)
    # Its (protected) snapshot stops a plain delete ...
    with pytest.raises(libvirt.libvirtError,
                       match="failed to remove volume '%s/tmpl'"
                             % ceph_cluster.pool):
        src.delete(0)
    # ... and the clone stops the snapshot's removal.
    with pytest.raises(libvirt.libvirtError,
                       match="failed to unprotect snapshot '%s/tmpl@libvirt-"
                             % ceph_cluster.pool):
        src.delete(libvirt.VIR_STORAGE_VOL_DELETE_WITH_SNAPSHOTS)
    assert set(ceph_cluster.images()) == {'tmpl', 'disk'}

    clone.delete(0)
    src.delete(libvirt.VIR_STORAGE_VOL_DELETE_WITH_SNAPSHOTS)
    assert ceph_cluster.images() == []


def test_create_from_a_dir_pool_volume_fails(rbd_pool, dir_pool,
                                             ceph_cluster, tmp_path):
    real.make_image(os.path.join(_dir(dir_pool), 'tmpl.raw'), 'raw', SIZE)
    dir_pool.refresh(0)
    src = dir_pool.storageVolLookupByName('tmpl.raw')
    with pytest.raises(libvirt.libvirtError) as e:
        rbd_pool.createXMLFrom(_vol_xml('disk', SIZE), src, 0)
    # libvirt's rbd backend looks the source up by name in the rbd pool.
    assert str(e.value).startswith(
        "failed to open the RBD image 'tmpl.raw'")
    assert e.value.get_error_code() == libvirt.VIR_ERR_SYSTEM_ERROR
    assert e.value.get_error_domain() == libvirt.VIR_FROM_STORAGE
    assert 'disk' not in ceph_cluster.images()


def test_create_from_a_dir_pool_volume_clones_a_namesake(rbd_pool,
                                                         dir_pool,
                                                         ceph_cluster,
                                                         tmp_path):
    # The trap: an rbd image named like the file's volume is cloned
    # instead, silently.
    chunks = real.make_image(os.path.join(_dir(dir_pool), 'tmpl.raw'),
                             'raw', SIZE)
    dir_pool.refresh(0)
    ceph_cluster.rbd('create', '--size', '4M',
                     ceph_cluster.image_spec('tmpl.raw'))
    rbd_pool.refresh(0)
    src = dir_pool.storageVolLookupByName('tmpl.raw')
    rbd_pool.createXMLFrom(_vol_xml('disk', SIZE), src, 0)
    info = ceph_cluster.rbd_json('info', ceph_cluster.image_spec('disk'))
    assert info['parent']['image'] == 'tmpl.raw'
    assert info['size'] == 4 * MiB
    assert (_rbd_sha256(ceph_cluster, 'disk')
            != real.sha256_of_chunks(SIZE, chunks))


def test_create_from_an_rbd_volume_into_a_dir_pool_fails(rbd_pool,
                                                         dir_pool,
                                                         ceph_cluster,
                                                         tmp_path):
    src, _ = _filled_volume(rbd_pool, ceph_cluster, tmp_path, 'tmpl')
    xml = ("<volume><name>disk.raw</name>"
           "<capacity unit='bytes'>%d</capacity>"
           "<target><format type='raw'/></target></volume>" % SIZE)
    with pytest.raises(libvirt.libvirtError) as e:
        dir_pool.createXMLFrom(xml, src, 0)
    assert e.value.get_error_code() == libvirt.VIR_ERR_NO_STORAGE_VOL
    assert ("no storage vol with matching path '%s'"
            % ceph_cluster.image_spec('tmpl')) in str(e.value)
    assert not os.path.exists(os.path.join(_dir(dir_pool), 'disk.raw'))


def _dir(pool: libvirt.virStoragePool) -> str:
    """Target directory of a dir pool."""
    return str(ET.fromstring(pool.XMLDesc(0)).findtext('target/path'))


# --------------------------------------------------------------------------
# Capacity
# --------------------------------------------------------------------------
