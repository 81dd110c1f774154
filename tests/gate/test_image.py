"""The gate's test image: a valid MBR that boots and talks on COM1, and
markers written into disks and read back.

The boot tests run the image for real, under the project's throwaway
libvirtd (TCG), with the serial console to a file.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator

import pytest
from oslo_utils.imageutils import format_inspector

from gate import image

MiB = 1024 * 1024


def test_mbr_layout() -> None:
    sector = image.mbr()
    assert len(sector) == 512
    assert sector[510:] == b'\x55\xaa'
    assert sector.startswith(image.BOOT_CODE)
    text = sector[len(image.BOOT_CODE):sector.index(b'\0', 0x1c)]
    assert text.decode() == image.CONSOLE_TEXT
    pte = sector[446:462]
    assert pte[0] == 0x80 and pte[4] == 0x83
    assert int.from_bytes(pte[8:12], 'little') == image.PARTITION_START_LBA
    assert int.from_bytes(pte[12:16], 'little') == (
        image.IMAGE_SIZE // 512 - image.PARTITION_START_LBA)
    assert sector[462:510] == bytes(48)


def test_console_text_has_lines_and_login() -> None:
    lines = image.console_lines()
    assert len(lines) > 3
    assert lines[-1].endswith('login: ')


def test_text_too_long_is_refused() -> None:
    with pytest.raises(ValueError, match='too long'):
        image.mbr('x' * 500)


def test_boot_code_matches_its_source(tmp_path: pathlib.Path) -> None:
    if not (shutil.which('as') and shutil.which('ld')):
        pytest.skip('binutils not installed')
    src = tmp_path / 'boot.S'
    src.write_text(image.BOOT_SOURCE + '    .ascii "X"\n')
    subprocess.run(['as', '--32', '-o', tmp_path / 'boot.o', src],
                   check=True)
    subprocess.run(['ld', '-m', 'elf_i386', '-Ttext', '0x7c00',
                    '--oformat', 'binary', '-o', tmp_path / 'boot.bin',
                    tmp_path / 'boot.o'], check=True)
    assert (tmp_path / 'boot.bin').read_bytes() == image.BOOT_CODE + b'X'


@pytest.mark.parametrize('fmt', ['raw', 'qcow2', 'vhdx'])
def test_formats_and_inspector(tmp_path: pathlib.Path, fmt: str) -> None:
    path = image.make_image(tmp_path / ('boot.' + fmt), fmt)
    assert image.disk_format(path) == fmt
    inspector = format_inspector.detect_file_format(path)
    # The raw disk is an MBR ("gpt" inspector) that passes Nova's safety
    # checks (an MBR without a partition entry does not).
    expected = 'gpt' if fmt == 'raw' else fmt
    assert str(inspector) == expected
    inspector.safety_check()
    if fmt != 'raw':
        # (The MBR inspector's size is what it read, not the disk's.)
        assert inspector.virtual_size == image.IMAGE_SIZE


def test_mbr_without_partition_is_refused(tmp_path: pathlib.Path) -> None:
    # Why the partition entry is there: Nova's format inspector.
    sector = bytearray(image.mbr())
    sector[446:510] = bytes(64)
    path = tmp_path / 'nopart.raw'
    path.write_bytes(bytes(sector) + bytes(MiB))
    inspector = format_inspector.detect_file_format(str(path))
    with pytest.raises(format_inspector.SafetyCheckFailed, match='mbr'):
        inspector.safety_check()


def test_marker_raw_and_overlay(tmp_path: pathlib.Path) -> None:
    raw = image.make_image(tmp_path / 'disk.raw', 'raw')
    image.write_marker(raw, 'before the move 1', fmt='raw')
    assert image.read_marker(raw, 17, fmt='raw') == b'before the move 1'
    # The MBR is untouched.
    assert pathlib.Path(raw).read_bytes()[:512] == image.mbr()

    base = image.make_image(tmp_path / 'base.qcow2', 'qcow2')
    overlay = tmp_path / 'overlay.qcow2'
    subprocess.run(['qemu-img', 'create', '-q', '-f', 'qcow2', '-b', base,
                    '-F', 'qcow2', overlay, str(1024 * MiB)], check=True)
    image.write_marker(overlay, b'\x00marker\xff', fmt='qcow2')
    assert image.read_marker(overlay, 8, fmt='qcow2') == b'\x00marker\xff'
    # Written into the overlay, not its backing file.
    assert image.read_marker(base, 8, fmt='qcow2') == bytes(8)
    # Through an argv prefix (what a compute's nsenter gives).
    assert image.read_marker(overlay, 8, fmt='qcow2',
                             argv_prefix=['env']) == b'\x00marker\xff'


def test_a_marker_is_read_in_the_format_named_never_a_probed_one(
        tmp_path: pathlib.Path) -> None:
    """A guest's raw disk whose bytes start with a qcow2 header (the guest
    wrote it): read as raw, as the domain gives it to QEMU, the guest's
    data are there; probed, they would be the header's (or a host file's
    through its backing)."""
    fake = tmp_path / 'fake.qcow2'
    subprocess.run(['qemu-img', 'create', '-q', '-f', 'qcow2', str(fake),
                    '64M'], check=True)
    disk = tmp_path / 'guest.raw'
    disk.write_bytes(fake.read_bytes()[:512] + bytes(4 * MiB))
    image.write_marker(disk, b'guest data', fmt='raw')
    assert image.read_marker(disk, 10, fmt='raw') == b'guest data'
    with pytest.raises(TypeError):
        image.read_marker(disk, 10)  # type: ignore[call-arg]


def test_parse_dump() -> None:
    out = ('00080000:  61 62 20 20 63 64 65 66 67 68 69 6a 6b 6c 6d 6e  '
           'ab..cdefghijklmn\n'
           '00080010:  6f 70  op\n'
           'read 18/18 bytes at offset 524288\n')
    assert image.parse_qemu_io_dump(out) == b'ab  cdefghijklmnop'


# --------------------------------------------------------------------------
# Booting it for real
# --------------------------------------------------------------------------

@pytest.fixture(scope='module')
def daemon() -> Iterator[object]:
    if shutil.which('libvirtd') is None:
        pytest.fail('libvirtd is not installed (bindep.txt)')
    from nova_imgtype_testing import libvirtd
    d = libvirtd.start_libvirtd()
    try:
        yield d
    finally:
        d.stop()


@pytest.mark.parametrize('fmt', ['raw', 'qcow2'])
def test_boots_and_prints_login(daemon: object, fmt: str) -> None:
    import libvirt

    from nova_imgtype_testing import libvirtd
    assert isinstance(daemon, libvirtd.LibvirtDaemon)
    work = tempfile.mkdtemp(dir=daemon.base)
    os.chmod(work, 0o755)
    disk = image.make_image(os.path.join(work, 'boot.' + fmt), fmt)
    serial = os.path.join(work, 'serial.log')
    daemon.give(work)
    conn = libvirt.open(daemon.uri)
    dom = None
    try:
        dom = libvirtd.start_domain(
            conn, 'gate-image-%s' % uuid.uuid4().hex[:8],
            [libvirtd.file_disk_xml(disk, fmt)], kvm=False,
            serial_path=serial)
        expected = image.CONSOLE_TEXT.encode()
        deadline = time.monotonic() + 60
        data = b''
        while time.monotonic() < deadline:
            try:
                data = pathlib.Path(serial).read_bytes()
            except OSError:
                data = b''
            if expected in data:
                break
            time.sleep(0.2)
        assert expected in data, data
        text = data.decode('ascii', 'replace').replace('\r\n', '\n')
        assert len(text.split('\n')) > 3
        assert text.rstrip().endswith('login:')
        # Halted, not rebooting in a loop: the text appears once.
        time.sleep(1)
        assert pathlib.Path(serial).read_bytes().count(expected) == 1
        assert dom.isActive()
    finally:
        if dom is not None:
            libvirtd.destroy_domain(dom)
        conn.close()


@pytest.mark.parametrize('variant', image.HOSTILE_VARIANTS)
def test_a_hostile_header_reads_the_host_file_only_when_taken_for_qcow2(
        tmp_path: pathlib.Path, variant: str) -> None:
    """What the move matrix's hostile guest writes at offset 0 of its raw
    disks is a real attack: read as raw (the format the domain gives QEMU)
    the guest gets its own bytes back; taken for qcow2, the host file."""
    secret = b'root-only host file\n' * 100
    host_file = tmp_path / 'host-file'
    host_file.write_bytes(secret)
    host_file.chmod(0o600)
    header = image.hostile_header(str(host_file), variant)
    assert len(header) == image.HOSTILE_SPAN
    assert header.startswith(b'QFI\xfb')
    # Only named: the host file is neither made nor truncated.
    assert host_file.read_bytes() == secret
    source = tmp_path / 'header'
    source.write_bytes(header)
    disk = tmp_path / 'guest.raw'
    disk.write_bytes(bytes(4 * MiB))
    image.write_file(disk, source, fmt='raw')
    image.write_marker(disk, b'guest data', fmt='raw', offset=MiB)
    assert image.read_span(disk, len(header), fmt='raw') == header
    assert image.read_marker(disk, 10, fmt='raw',
                             offset=MiB) == b'guest data'
    info = subprocess.run(['qemu-img', 'info', '-f', 'qcow2', disk],
                          capture_output=True, text=True, check=True).stdout
    assert str(host_file) in info
    leaked = image.read_span(disk, len(secret), fmt='qcow2')
    assert leaked == secret
    assert host_file.read_bytes() == secret


def test_a_hostile_header_names_one_of_two_ways() -> None:
    with pytest.raises(ValueError, match='variant'):
        image.hostile_header('/x', 'compressed')


def test_a_file_written_from_needs_no_blank_in_its_name(
        tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match='blanks'):
        image.write_file(tmp_path / 'd', tmp_path / 'a b', fmt='raw')
