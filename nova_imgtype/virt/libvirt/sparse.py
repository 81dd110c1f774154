"""Copies of a file's data alone: holes stay holes and are never read.

libvirt copies a raw volume into a raw volume (``createXMLFrom``) by reading
its whole virtual size, holes included: seconds for a 10 GiB template
holding 256 MiB. :func:`copy_data` copies only the data extents
(``SEEK_DATA``/``SEEK_HOLE``), each in the kernel (``copy_file_range``,
which shares the extents where the filesystem can: XFS and Btrfs
reflinks), as stock's ``cp`` does for its Flat disks.
"""

from __future__ import annotations

import errno
import os
import stat


def is_regular_file(path: str) -> bool:
    """Whether ``path`` is (or links to) a regular file, which
    :func:`copy_data` copies: a block device has neither its length in
    ``st_size`` nor ``SEEK_DATA`` and ``copy_file_range``."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        return False


def extents(fd: int, size: int) -> list[tuple[int, int]]:
    """The data extents ``(offset, end)`` of the open file ``fd`` up to
    ``size``, as the filesystem reports them (a filesystem without
    ``SEEK_DATA`` reports one extent: the whole file)."""
    found = []
    offset = 0
    while offset < size:
        try:
            start = os.lseek(fd, offset, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:      # a hole to the end
                break
            raise
        end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        found.append((start, end))
        offset = end
    return found


def section(fd: int, size: int) -> tuple[bool, int]:
    """What the open file ``fd`` holds from its current offset up to
    ``size``: ``(True, n)`` for ``n`` bytes of data, ``(False, n)`` for a
    hole of ``n`` bytes (``(False, 0)`` at the end), as libvirt's
    ``virStream.sparseSendAll`` asks; the offset is left where it was."""
    cur = os.lseek(fd, 0, os.SEEK_CUR)
    if cur >= size:
        return False, 0
    try:
        start = os.lseek(fd, cur, os.SEEK_DATA)
    except OSError as e:
        if e.errno != errno.ENXIO:      # not a hole to the end
            raise
        start = size
    finally:
        os.lseek(fd, cur, os.SEEK_SET)
    if start > cur:
        return False, min(start, size) - cur
    end = min(os.lseek(fd, cur, os.SEEK_HOLE), size)
    os.lseek(fd, cur, os.SEEK_SET)
    return True, end - cur


def copy_data(src: str, dst: str) -> int:
    """Copy the data of the regular file ``src`` into the existing file
    ``dst`` at the same offsets; returns the bytes copied.

    ``dst`` must read as zeros wherever ``src`` has a hole (a new sparse
    file at least as large, as a pool makes for a volume): holes are not
    written. Nothing is synced, as ``cp`` does not.

    :raises OSError: reading, writing, or a copy that came up short.
    """
    copied = 0
    with open(src, 'rb') as s, open(dst, 'r+b') as d:
        sfd, dfd = s.fileno(), d.fileno()
        if not stat.S_ISREG(os.fstat(sfd).st_mode):
            raise OSError(errno.EINVAL, '%s: not a regular file' % src)
        for start, end in extents(sfd, os.fstat(sfd).st_size):
            pos = start
            while pos < end:
                n = os.copy_file_range(sfd, dfd, end - pos, pos, pos)
                if n == 0:
                    raise OSError(errno.EIO, '%s: short copy at %d' % (
                        src, pos))
                pos += n
            copied += end - start
    return copied
