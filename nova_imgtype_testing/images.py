"""Real images for the real tier, made by ``qemu-img`` and ``qemu-io``:
raw and qcow2 files (compressed, with a backing file or a data file)
holding a known pattern, and the checksums of their guest data."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from typing import Any

from oslo_concurrency import processutils

StrPath = str | os.PathLike[str]

DEFAULT_PATTERN = b'nova-imgtype real-tier test data\n'
_QEMU_ENV = {'LC_ALL': 'C', 'LANG': 'C'}


def qemu_img(*args: StrPath) -> str:
    """Run ``qemu-img`` with ``args`` and return its standard output.

    Raises ``processutils.ProcessExecutionError`` on a non-zero exit.
    """
    out, _err = processutils.execute(
        'qemu-img', *(os.fspath(a) for a in args),
        env_variables=_QEMU_ENV)
    return str(out)


def qemu_img_info(path: StrPath, backing_chain: bool = False,
                  force_share: bool = True) -> Any:
    """``qemu-img info --output=json`` of ``path``, decoded.

    A dict, or with ``backing_chain`` a list of dicts (the image first).
    ``force_share`` (``-U``) reads an image a running QEMU holds; without
    it ``qemu-img`` fails on such an image ("Failed to get shared lock").
    """
    args: list[StrPath] = ['info', '--output=json']
    if backing_chain:
        args.append('--backing-chain')
    if force_share:
        args.append('-U')
    args.append(path)
    return json.loads(qemu_img(*args))


def pattern_chunks(size_bytes: int, pattern: bytes) -> dict[int, bytes]:
    """Where :func:`make_image` writes ``pattern`` in an image of that size.

    At offset 0, at an unaligned offset in the fourth 64 KiB cluster, across
    the middle of the image and at its very end; offsets that would not fit
    or would overlap the previous one are left out.
    """
    if not pattern:
        raise ValueError('empty pattern')
    n = len(pattern)
    candidates = (0, 3 * 65536 + 7, size_bytes // 2 - n // 2,
                  size_bytes - n)
    chunks: dict[int, bytes] = {}
    end = 0
    for off in sorted(set(candidates)):
        if off >= end and off + n <= size_bytes:
            chunks[off] = pattern
            end = off + n
    return chunks


def sha256_of_chunks(size_bytes: int,
                     *chunk_maps: Mapping[int, bytes]) -> str:
    """sha256 of ``size_bytes`` of zeroes with the chunks written in order.

    The checksum :func:`sha256_of_guest_data` gives for an image made by
    :func:`make_image` (pass the chunks of its backing chain first).
    """
    data = bytearray(size_bytes)
    for chunks in chunk_maps:
        for off, chunk in chunks.items():
            data[off:off + len(chunk)] = chunk
    return hashlib.sha256(data).hexdigest()


def make_image(path: StrPath, fmt: str, size_bytes: int,
               pattern: bytes = DEFAULT_PATTERN, compressed: bool = False,
               backing_file: StrPath | None = None,
               backing_fmt: str | None = None,
               data_file: StrPath | None = None) -> dict[int, bytes]:
    """Make a real ``raw`` or ``qcow2`` image at ``path``.

    Its guest data are zeroes with ``pattern`` at the offsets of
    :func:`pattern_chunks`. A plain qcow2 is converted from such a raw file
    (``compressed``: ``qemu-img convert -c``). With ``backing_file`` the
    qcow2 is a thin overlay (``-b``/``-F``; ``backing_fmt`` is probed when
    not given) holding only the pattern writes; with ``data_file`` its data
    clusters are in that external file (``-o data_file=``). Both can be
    combined, neither with ``compressed``.

    Returns the chunks written (offset -> bytes), for
    :func:`sha256_of_chunks`.
    """
    if fmt not in ('raw', 'qcow2'):
        raise ValueError('unsupported format %r' % fmt)
    if size_bytes <= 0 or size_bytes % 512:
        raise ValueError('size must be a positive multiple of 512')
    layered = backing_file is not None or data_file is not None
    if fmt == 'raw' and (compressed or layered):
        raise ValueError('raw images take no compression/backing/data file')
    if compressed and layered:
        raise ValueError('compression needs a self-contained qcow2')
    chunks = pattern_chunks(size_bytes, pattern)
    path = os.fspath(path)
    if layered:
        _make_layered_qcow2(path, size_bytes, chunks, backing_file,
                            backing_fmt, data_file)
    elif fmt == 'raw':
        _write_raw(path, size_bytes, chunks)
    else:
        tmp = path + '.raw.tmp'
        try:
            _write_raw(tmp, size_bytes, chunks)
            args = ['convert', '-f', 'raw', '-O', 'qcow2']
            if compressed:
                args.append('-c')
            qemu_img(*args, tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return chunks


def _write_raw(path: str, size_bytes: int,
               chunks: Mapping[int, bytes]) -> None:
    """A sparse raw file of ``size_bytes`` with ``chunks`` written."""
    with open(path, 'wb') as f:
        f.truncate(size_bytes)
        for off, chunk in chunks.items():
            f.seek(off)
            f.write(chunk)


def _make_layered_qcow2(path: str, size_bytes: int,
                        chunks: Mapping[int, bytes],
                        backing_file: StrPath | None,
                        backing_fmt: str | None,
                        data_file: StrPath | None) -> None:
    """qcow2 with a backing file and/or data file, then qemu-io writes."""
    args: list[StrPath] = ['create', '-q', '-f', 'qcow2']
    if backing_file is not None:
        if backing_fmt is None:
            # qemu resolves a relative backing file against the overlay.
            probe = os.path.join(os.path.dirname(path) or '.',
                                 os.fspath(backing_file))
            backing_fmt = qemu_img_info(probe)['format']
        args += ['-b', backing_file, '-F', str(backing_fmt)]
    if data_file is not None:
        data_path = os.path.abspath(os.fspath(data_file))
        if ',' in data_path:
            raise ValueError('a comma in a data file path is not supported')
        args += ['-o', 'data_file=%s' % data_path]
    qemu_img(*args, path, str(size_bytes))
    with tempfile.TemporaryDirectory() as tmp:
        cmds: list[str] = []
        for i, (off, chunk) in enumerate(chunks.items()):
            src = os.path.join(tmp, str(i))
            with open(src, 'wb') as f:
                f.write(chunk)
            cmds += ['-c', 'write -q -s %s %d %d' % (src, off, len(chunk))]
        processutils.execute('qemu-io', '-f', 'qcow2', *cmds, path,
                             env_variables=_QEMU_ENV)


def sha256_of_guest_data(path: StrPath, fmt: str) -> str:
    """sha256 of the guest-visible data of an image (converted to raw)."""
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, 'guest.raw')
        qemu_img('convert', '-U', '-f', fmt, '-O', 'raw', path, raw)
        digest = hashlib.sha256()
        with open(raw, 'rb') as f:
            while block := f.read(1 << 20):
                digest.update(block)
        return digest.hexdigest()
