"""The real tier's own plumbing works: daemon, pools, domains, images."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import subprocess
import uuid
import xml.etree.ElementTree as ET

import libvirt
import pytest
from oslo_concurrency import processutils

from nova_imgtype_testing import libvirtd as fixtures

MiB = 1024 * 1024


def _unique(prefix: str) -> str:
    return '%s-%s' % (prefix, uuid.uuid4().hex[:8])


def _volume_xml(name: str, fmt: str, capacity: int) -> str:
    compat = '<compat>1.1</compat>' if fmt == 'qcow2' else ''
    return (
        "<volume><name>%s</name><capacity unit='bytes'>%d</capacity>"
        "<target><format type='%s'/>%s</target></volume>"
        % (name, capacity, fmt, compat))


def test_daemon_answers(libvirt_conn: libvirt.virConnect,
                        libvirt_daemon: fixtures.LibvirtDaemon) -> None:
    assert libvirt_conn.isAlive()
    assert libvirt_conn.getLibVersion() >= 9_000_000
    # getVersion() is the hypervisor's version: the QEMU we have.
    out = subprocess.run([fixtures.EMULATOR, '--version'], check=True,
                         capture_output=True, text=True).stdout
    found = re.search(r'version (\d+)\.(\d+)\.(\d+)', out)
    assert found, out
    major, minor, micro = map(int, found.groups())
    assert libvirt_conn.getVersion() == (
        major * 1_000_000 + minor * 1_000 + micro)
    assert libvirt_conn.getURI() == libvirt_daemon.uri
    assert os.path.exists(libvirt_daemon.pidfile)
    if libvirt_daemon.mode == 'system':
        # Isolated: the daemon has a mount namespace of its own.
        assert libvirt_daemon.mnt_ns
        assert libvirt_daemon.mnt_ns != os.readlink('/proc/self/ns/mnt')


def test_dir_pool_creates_and_copies_volumes(
        libvirt_conn: libvirt.virConnect,
        libvirt_daemon: fixtures.LibvirtDaemon,
        libvirt_tmp_path: pathlib.Path) -> None:
    size = 4 * MiB
    pool_dir = libvirt_tmp_path / 'pool'
    pool_dir.mkdir()
    src_path = pool_dir / 'src.raw'
    chunks = fixtures.make_image(src_path, 'raw', size,
                                 pattern=b'copied by createXMLFrom')
    libvirt_daemon.give(pool_dir)
    pool = libvirt_conn.storagePoolCreateXML(
        "<pool type='dir'><name>%s</name><target><path>%s</path></target>"
        "</pool>" % (_unique('smoke'), pool_dir), 0)
    try:
        blank = pool.createXML(_volume_xml('blank.qcow2', 'qcow2', MiB), 0)
        assert blank.path() == str(pool_dir / 'blank.qcow2')
        info = fixtures.qemu_img_info(blank.path())
        assert (info['format'], info['virtual-size']) == ('qcow2', MiB)

        src = pool.storageVolLookupByName('src.raw')
        copy = pool.createXMLFrom(_volume_xml('copy.qcow2', 'qcow2', size),
                                  src, 0)
        info = fixtures.qemu_img_info(copy.path())
        assert info['format'] == 'qcow2'
        assert info['format-specific']['data']['compat'] == '1.1'
        copied = fixtures.sha256_of_guest_data(copy.path(), 'qcow2')
        assert copied == fixtures.sha256_of_guest_data(src_path, 'raw')
        assert copied == fixtures.sha256_of_chunks(size, chunks)
        assert copied != hashlib.sha256(bytes(size)).hexdigest()
        assert sorted(v.name() for v in pool.listAllVolumes()) == [
            'blank.qcow2', 'copy.qcow2', 'src.raw']
    finally:
        pool.destroy()


def test_domain_boots_from_qcow2_file_disk(
        libvirt_conn: libvirt.virConnect,
        libvirt_daemon: fixtures.LibvirtDaemon,
        libvirt_tmp_path: pathlib.Path, kvm_available: bool) -> None:
    size = 16 * MiB
    disk = libvirt_tmp_path / 'root.qcow2'
    fixtures.make_image(disk, 'qcow2', size, compressed=True)
    libvirt_daemon.give(disk)
    name = _unique('smoke')
    dom = fixtures.start_domain(
        libvirt_conn, name, [fixtures.file_disk_xml(disk, 'qcow2')],
        kvm=kvm_available)
    try:
        assert dom.state()[0] == libvirt.VIR_DOMAIN_RUNNING
        live = ET.fromstring(dom.XMLDesc())
        assert live.get('type') == ('kvm' if kvm_available else 'qemu')
        source = live.find('devices/disk/source')
        assert source is not None and source.get('file') == str(disk)
        assert dom.blockInfo('vda')[0] == size
        # QEMU really has the image open: it holds the image lock.
        with pytest.raises(processutils.ProcessExecutionError,
                           match='lock'):
            fixtures.qemu_img_info(disk, force_share=False)
    finally:
        fixtures.destroy_domain(dom)
    assert name not in [d.name() for d in libvirt_conn.listAllDomains()]
    assert fixtures.qemu_img_info(disk, force_share=False)['format'] == (
        'qcow2')


def test_make_image_qcow2_with_external_data_file(
        tmp_path: pathlib.Path) -> None:
    size = 4 * MiB
    image, data = tmp_path / 'image.qcow2', tmp_path / 'image.data'
    chunks = fixtures.make_image(image, 'qcow2', size, data_file=data,
                                 pattern=b'in the data file')
    info = fixtures.qemu_img_info(image)
    assert info['format'] == 'qcow2'
    assert info['format-specific']['data']['data-file'] == str(data)
    expected = fixtures.sha256_of_chunks(size, chunks)
    assert fixtures.sha256_of_guest_data(image, 'qcow2') == expected
    # An external data file maps guest offsets 1:1: it is the raw data.
    assert fixtures.sha256_of_guest_data(data, 'raw') == expected


def test_make_image_qcow2_overlay_on_backing_file(
        tmp_path: pathlib.Path) -> None:
    size = 4 * MiB
    base, overlay = tmp_path / 'base.qcow2', tmp_path / 'overlay.qcow2'
    base_chunks = fixtures.make_image(base, 'qcow2', size,
                                      pattern=b'base data, long pattern')
    over_chunks = fixtures.make_image(overlay, 'qcow2', size,
                                      pattern=b'overlay data',
                                      backing_file=base)
    chain = fixtures.qemu_img_info(overlay, backing_chain=True)
    assert [i['filename'] for i in chain] == [str(overlay), str(base)]
    assert chain[0]['backing-filename-format'] == 'qcow2'
    assert fixtures.sha256_of_guest_data(overlay, 'qcow2') == (
        fixtures.sha256_of_chunks(size, base_chunks, over_chunks))
    # Thin: the overlay holds only the clusters it wrote.
    mapping = json.loads(fixtures.qemu_img('map', '--output=json',
                                           overlay))
    own = sum(m['length'] for m in mapping
              if m['depth'] == 0 and m['data'])
    assert 0 < own <= 2 * len(over_chunks) * chain[0]['cluster-size']
