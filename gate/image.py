"""The gate's bootable test image, generated at run time (no download).

A raw disk of :data:`IMAGE_SIZE` bytes whose first sector is an MBR with

* boot code (16-bit real mode, hand-assembled: :data:`BOOT_SOURCE` is the
  source, :data:`BOOT_CODE` its bytes) that writes :data:`CONSOLE_TEXT`,
  several lines ending in ``login:``, to COM1 (port 0x3f8) and halts;
* one valid partition entry (type 0x83, from LBA 2048 to the end of the
  disk): Nova's format inspector refuses an MBR without one ("Safety checks
  failed: mbr");
* the 0x55AA signature.

Tempest's console-output tests want more than 3 lines of console; a guest
that ignores ACPI needs ``[DEFAULT]shutdown_timeout = 0`` on the computes.

Gate checks write a marker into an instance disk before a move and read it
back after it (:func:`write_marker`, :func:`read_marker`) at
:data:`MARKER_OFFSET`, past the MBR and before the partition, through
``qemu-io`` so that raw files and qcow2 overlays (whose backing file path
may only resolve inside a compute's mount namespace: ``argv_prefix``) are
handled alike. Write only while no QEMU holds the disk (server SHUTOFF).

A hostile guest (the move matrix's, :mod:`gate.check_matrix`) also writes
at offset 0 of its raw disks a whole qcow2 image naming a host file as its
backing file or as its external data file (:func:`hostile_header`), through
:func:`write_file`; :func:`read_span` reads what a guest sees, in the
format named.

CLI::

    python -m gate.image make OUT [--format raw|qcow2|vhdx]
    python -m gate.image write-marker DISK TEXT --format FMT [--nsenter ARGV]
    python -m gate.image read-marker DISK LENGTH --format FMT [--nsenter ARGV]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import struct
import subprocess
import sys
import tempfile
from collections.abc import Sequence

StrPath = str | os.PathLike[str]

MiB = 1024 * 1024
SECTOR = 512
#: Size of the raw image: 1 MiB before the partition, 1 MiB of partition.
IMAGE_SIZE = 2 * MiB
PARTITION_START_LBA = 2048
#: Where markers go: past the MBR, in the gap before the partition.
MARKER_OFFSET = 512 * 1024
MARKER_MAX = 256
#: :func:`make_data_image`: how much of the disk holds data, in clusters.
DATA_PERCENT = 40
CLUSTER = 64 * 1024

#: The boot code's source (GNU as, ``.code16``), for the record:
#: ``as --32 boot.S && ld -m elf_i386 -Ttext 0x7c00 --oformat binary``
#: gives :data:`BOOT_CODE` followed by the text (checked by the tests when
#: binutils is installed).
BOOT_SOURCE = """\
.code16
.globl _start
_start:
    cli
    xor %ax, %ax
    mov %ax, %ds
    mov %ax, %ss
    mov $0x7c00, %sp
    cld
    mov $msg, %si        # msg = 0x7c1c, right after this code
next:
    lodsb
    test %al, %al
    jz done
    mov $0x3f8, %dx      # COM1 data register
    out %al, %dx
    jmp next
done:
    hlt                  # interrupts off: stays here
    jmp done
msg:
"""

BOOT_CODE = bytes.fromhex(
    'fa'          # cli
    '31c0'        # xor ax, ax
    '8ed8'        # mov ds, ax
    '8ed0'        # mov ss, ax
    'bc007c'      # mov sp, 0x7c00
    'fc'          # cld
    'be1c7c'      # mov si, 0x7c1c (the text)
    'ac'          # next: lodsb
    '84c0'        # test al, al
    '7406'        # jz done
    'baf803'      # mov dx, 0x3f8
    'ee'          # out dx, al
    'ebf5'        # jmp next
    'f4'          # done: hlt
    'ebfd'        # jmp done
)
assert len(BOOT_CODE) == 0x1c

CONSOLE_TEXT = (
    'nova-imgtype gate test image\r\n'
    'Booted from the MBR by the BIOS: no kernel, no network.\r\n'
    'This guest writes these lines to its serial console and halts.\r\n'
    'Its disk carries the gate markers at offset 512 KiB.\r\n'
    '\r\n'
    'nova-imgtype-gate login: '
)

_PTE_OFFSET = 446
_PTE_SPACE = _PTE_OFFSET - len(BOOT_CODE)


def partition_entry(start_lba: int, sectors: int, bootable: bool = True,
                    part_type: int = 0x83) -> bytes:
    """A 16-byte MBR partition table entry (CHS fields 0xFE/0xFFFF/0xFF:
    "use the LBA fields", as tools write them for large disks)."""
    return struct.pack('<B3BB3BII', 0x80 if bootable else 0x00,
                       0xFE, 0xFF, 0xFF, part_type, 0xFE, 0xFF, 0xFF,
                       start_lba, sectors)


def mbr(text: str = CONSOLE_TEXT, size: int = IMAGE_SIZE) -> bytes:
    """The 512-byte boot sector of a disk of ``size`` bytes."""
    msg = text.encode('ascii') + b'\0'
    if len(msg) > _PTE_SPACE:
        raise ValueError('console text too long: %d bytes, at most %d'
                         % (len(msg) - 1, _PTE_SPACE - 1))
    if size % SECTOR or size // SECTOR <= PARTITION_START_LBA:
        raise ValueError('size must be a multiple of 512 past 1 MiB')
    sector = bytearray(SECTOR)
    code = BOOT_CODE + msg
    sector[:len(code)] = code
    sector[_PTE_OFFSET:_PTE_OFFSET + 16] = partition_entry(
        PARTITION_START_LBA, size // SECTOR - PARTITION_START_LBA)
    sector[510:512] = b'\x55\xaa'
    return bytes(sector)


def console_lines(text: str = CONSOLE_TEXT) -> list[str]:
    """The lines the guest prints (what a serial log shows)."""
    return text.replace('\r\n', '\n').split('\n')


def make_raw(path: StrPath, size: int = IMAGE_SIZE,
             text: str = CONSOLE_TEXT) -> str:
    """Write the bootable raw image (sparse past the MBR) to ``path``."""
    path = os.fspath(path)
    with open(path, 'wb') as f:
        f.write(mbr(text, size))
        f.truncate(size)
    return path


def _run(argv: Sequence[str]) -> str:
    proc = subprocess.run(list(argv), capture_output=True, text=True,
                          env={**os.environ, 'LC_ALL': 'C'})
    if proc.returncode:
        raise RuntimeError('%s: exit %d: %s' % (
            shlex.join(argv), proc.returncode,
            (proc.stderr or proc.stdout).strip()))
    return proc.stdout


def convert(src: StrPath, dst: StrPath, fmt: str,
            src_fmt: str = 'raw') -> str:
    """``qemu-img convert`` ``src`` to ``dst`` in ``fmt`` (qcow2, vhdx,
    vmdk, vdi, vpc, raw)."""
    _run(['qemu-img', 'convert', '-f', src_fmt, '-O', fmt,
          os.fspath(src), os.fspath(dst)])
    return os.fspath(dst)


def make_image(path: StrPath, fmt: str = 'raw',
               size: int = IMAGE_SIZE) -> str:
    """The bootable image at ``path`` in ``fmt`` (raw: written directly,
    others converted from a temporary raw file)."""
    if fmt == 'raw':
        return make_raw(path, size)
    with tempfile.TemporaryDirectory() as tmp:
        raw = make_raw(os.path.join(tmp, 'boot.raw'), size)
        return convert(raw, path, fmt)


def make_data_image(path: StrPath, fmt: str, size: int) -> str:
    """The bootable image of ``size`` bytes at ``path``, with data.

    Past the MBR's first MiB, the first :data:`DATA_PERCENT` of the disk
    hold data that compress about 2:1, as an OS image's do (each 64 KiB
    cluster half text, half random bytes from a small pool, the same
    recipe as ``benchmarks/first_disk.py``); the rest is sparse. ``qcow2``
    is compressed (zstd), as images are published.
    """
    path = os.fspath(path)
    raw = path if fmt == 'raw' else path + '.raw'
    make_raw(raw, size)
    line = b'nova-imgtype gate data: the quick brown fox jumps over.\n'
    text = (line * (CLUSTER // len(line) + 1))[:CLUSTER // 2 - 8]
    noise = [os.urandom(CLUSTER // 2) for _ in range(61)]
    start = PARTITION_START_LBA * SECTOR
    with open(raw, 'r+b') as f:
        f.seek(start)
        for i in range(size * DATA_PERCENT // 100 // CLUSTER):
            f.write(text + i.to_bytes(8, 'big') + noise[i % len(noise)])
    if fmt == 'raw':
        return path
    try:
        _run(['qemu-img', 'convert', '-c', '-o', 'compression_type=zstd',
              '-f', 'raw', '-O', fmt, raw, path])
    finally:
        os.unlink(raw)
    return path


def disk_format(path: StrPath, argv_prefix: Sequence[str] = ()) -> str:
    """The format ``qemu-img info`` sees (shared lock: a running guest's
    disk can be asked)."""
    out = _run([*argv_prefix, 'qemu-img', 'info', '-U', '--output=json',
                os.fspath(path)])
    return str(json.loads(out)['format'])


#: The ways :func:`hostile_header` names a host file: the qcow2 image's
#: backing file, or its external data file (``data_file_raw=on``).
HOSTILE_VARIANTS = ('backing file', 'data file')
#: :func:`hostile_header`'s length: its qcow2 image (small clusters) padded
#: with zeros, so that each variant covers the other's bytes.
HOSTILE_SPAN = 64 * 1024
#: The virtual size of the hostile image: whoever takes it for qcow2 reads
#: the host file's first bytes at the same offsets of the guest's disk.
HOSTILE_SIZE = MiB


def hostile_header(host_file: str, variant: str) -> bytes:
    """A whole qcow2 image of :data:`HOSTILE_SIZE` virtual bytes, padded to
    :data:`HOSTILE_SPAN`, that a guest writes at offset 0 of a raw disk:
    whoever takes the disk for qcow2 reads ``host_file`` through it, as
    its backing file (``variant`` ``'backing file'``) or as its external
    raw data file (``'data file'``: the L2 tables map every cluster, so no
    backing-name check sees it).

    ``host_file`` is only named, never opened (it need not exist here):
    ``qemu-img create`` would create, so truncate, a data file it is
    given, so the image is made with a scratch one, then amended.
    """
    if variant not in HOSTILE_VARIANTS:
        raise ValueError('variant %r: one of %s' % (variant,
                                                   HOSTILE_VARIANTS))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, 'hostile.qcow2')
        opts = 'cluster_size=4096'
        if variant == 'backing file':
            _run(['qemu-img', 'create', '-q', '-f', 'qcow2', '-u', '-b',
                  host_file, '-F', 'raw', '-o', opts, out,
                  str(HOSTILE_SIZE)])
        else:
            scratch = os.path.join(tmp, 'scratch.data')
            _run(['qemu-img', 'create', '-q', '-f', 'qcow2', '-o',
                  '%s,data_file=%s,data_file_raw=on' % (opts, scratch),
                  out, str(HOSTILE_SIZE)])
            _run(['qemu-img', 'amend', '-q', '-f', 'qcow2', '-o',
                  'data_file=%s' % host_file, out])
        with open(out, 'rb') as f:
            data = f.read()
    if len(data) > HOSTILE_SPAN:
        raise RuntimeError('the hostile qcow2 image is %d bytes, more than '
                           '%d' % (len(data), HOSTILE_SPAN))
    return data.ljust(HOSTILE_SPAN, b'\0')


def write_file(path: StrPath, source: StrPath, *, fmt: str,
               argv_prefix: Sequence[str] = (), offset: int = 0) -> None:
    """Write the bytes of the file ``source`` into the guest data of the
    disk at ``path`` from ``offset``, in format ``fmt`` (the domain's, as
    for :func:`write_marker`). ``source`` must be seen at the same path
    where ``argv_prefix`` enters. The disk must not be in use."""
    source = os.fspath(source)
    if any(c.isspace() for c in source):
        raise ValueError('qemu-io splits its commands on blanks: %r'
                         % source)
    _run([*argv_prefix, 'qemu-io', '-f', fmt, '-c', 'write -q -s %s %d %d'
          % (source, offset, os.path.getsize(source)), os.fspath(path)])


def zero_span(path: StrPath, length: int, *, fmt: str,
              argv_prefix: Sequence[str] = (), offset: int = 0) -> None:
    """Zero ``length`` bytes at ``offset`` of the guest data of the disk
    at ``path``, in format ``fmt`` (the domain's, as for
    :func:`write_marker`). The disk must not be in use."""
    _run([*argv_prefix, 'qemu-io', '-f', fmt, '-c', 'write -q -z %d %d'
          % (offset, length), os.fspath(path)])


def write_marker(path: StrPath, marker: bytes | str, *, fmt: str,
                 argv_prefix: Sequence[str] = (),
                 offset: int = MARKER_OFFSET) -> None:
    """Write ``marker`` into the guest data of the disk at ``path``, in
    format ``fmt``: the one the domain gives QEMU, never one probed from
    the disk's bytes (a guest's raw disk may hold a qcow2 header).

    Through ``qemu-io`` (one ``write -P`` per byte: no file to share with
    the namespace ``argv_prefix`` enters), so a qcow2 overlay gets the
    bytes in its own clusters and its backing file is untouched. The disk
    must not be in use by a running QEMU.
    """
    data = marker.encode() if isinstance(marker, str) else bytes(marker)
    if not 0 < len(data) <= MARKER_MAX:
        raise ValueError('marker of 1 to %d bytes' % MARKER_MAX)
    cmds: list[str] = []
    for i, byte in enumerate(data):
        cmds += ['-c', 'write -q -P 0x%02x %d 1' % (byte, offset + i)]
    _run([*argv_prefix, 'qemu-io', '-f', fmt, *cmds, os.fspath(path)])


_DUMP_LINE = re.compile(
    r'^[0-9a-f]{8}:  ((?:[0-9a-f]{2} ){0,15}[0-9a-f]{2})(?:  |$)', re.I)


def parse_qemu_io_dump(out: str) -> bytes:
    """The bytes of ``qemu-io -c 'read -v ...'`` output: hex dump lines
    ``00080000:  6e 6f 76 61  nova`` (16 bytes at most, two spaces before
    the ASCII column)."""
    data = bytearray()
    for line in out.splitlines():
        found = _DUMP_LINE.match(line)
        if found:
            data += bytes.fromhex(found.group(1))
    return bytes(data)


def read_marker(path: StrPath, length: int, *, fmt: str,
                argv_prefix: Sequence[str] = (),
                offset: int = MARKER_OFFSET) -> bytes:
    """``length`` bytes of the guest data at ``offset``, read in format
    ``fmt`` (the domain's, as for :func:`write_marker`), through the whole
    backing chain; shared lock, so a running guest's disk can be read."""
    if not 0 < length <= MARKER_MAX:
        raise ValueError('length of 1 to %d bytes' % MARKER_MAX)
    return read_span(path, length, fmt=fmt, argv_prefix=argv_prefix,
                     offset=offset)


#: :func:`read_span` reads through a hex dump: a few hundred KiB at most.
SPAN_MAX = 1024 * 1024


def read_span(path: StrPath, length: int, *, fmt: str,
              argv_prefix: Sequence[str] = (), offset: int = 0) -> bytes:
    """``length`` bytes at ``offset`` of what a guest sees of the disk at
    ``path`` when QEMU is given it in format ``fmt``, as
    :func:`read_marker` reads them (``fmt='raw'``: the file's own
    bytes)."""
    if not 0 < length <= SPAN_MAX:
        raise ValueError('length of 1 to %d bytes' % SPAN_MAX)
    out = _run([*argv_prefix, 'qemu-io', '-r', '-U', '-f', fmt, '-c',
                'read -v %d %d' % (offset, length), os.fspath(path)])
    data = parse_qemu_io_dump(out)
    if len(data) != length:
        raise RuntimeError('qemu-io read %d bytes, wanted %d: %s'
                           % (len(data), length, out[-2000:]))
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog='python -m gate.image')
    sub = parser.add_subparsers(dest='cmd', required=True)
    make = sub.add_parser('make', help='write the bootable image')
    make.add_argument('out')
    make.add_argument('--format', default='raw')
    make.add_argument('--size', type=int, default=IMAGE_SIZE)
    for name in ('write-marker', 'read-marker'):
        p = sub.add_parser(name)
        p.add_argument('disk')
        p.add_argument('marker' if name == 'write-marker' else 'length')
        p.add_argument('--nsenter', default='',
                       help='argv prefix entering a namespace (one string)')
        p.add_argument('--offset', type=int, default=MARKER_OFFSET)
        p.add_argument('--format', required=True, dest='fmt',
                       help='the format the domain gives QEMU')
    args = parser.parse_args(argv)
    if args.cmd == 'make':
        print(make_image(args.out, args.format, args.size))
    elif args.cmd == 'write-marker':
        write_marker(args.disk, args.marker, fmt=args.fmt,
                     argv_prefix=shlex.split(args.nsenter),
                     offset=args.offset)
    else:
        data = read_marker(args.disk, int(args.length), fmt=args.fmt,
                           argv_prefix=shlex.split(args.nsenter),
                           offset=args.offset)
        sys.stdout.write(data.decode('latin-1') + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
