"""Virtual sizes of raw and qcow2 files, read in this process.

Stock's ``Image.get_disk_size`` and ``disk.extend`` run ``qemu-img info``
for each size they need, through oslo's ``prlimit`` wrapper: a Python
process per call, 60-90 ms each, several per instance disk made from a
cached template. The size of a raw file is its length, and that of a qcow2
image is in its header, which Nova's format inspector
(``nova.virt.images.get_image_format``, what stock's own safety check of a
template reads) parses without running anything. Other formats go on
through ``qemu-img info``.

A size is not a safety check: the templates' checks (format inspector,
``qemu-img info``, backing and data files) stay stock's and are made where
stock makes them.
"""

from __future__ import annotations

import functools
import os
import stat
from typing import Any

from nova.virt import images


def virtual_size(path: str) -> int | None:
    """The virtual size of the raw or qcow2 file or block device ``path``
    (a linked template is a block device), or None when it is in another
    format (or none Nova's inspector recognises), for ``qemu-img info``.

    A regular file is read once per version: a template is asked for its
    size several times per disk (stock's ``verify_base_size``, then
    ``Image.cache``), and a file that changed has another ``ctime``. A
    block device, which can grow under the same node, is read each time.

    A missing file is None too: stock's ``qemu-img info`` says so in its
    own words (``DiskNotFound``).

    :raises OSError: the file is there but cannot be read.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return _read(path)
    return _read_file(path, (st.st_dev, st.st_ino, st.st_size,
                             st.st_mtime_ns, st.st_ctime_ns))


@functools.lru_cache(maxsize=256)
def _read_file(path: str, version: tuple[int, ...]) -> int | None:
    return _read(path)


def _read(path: str) -> int | None:
    try:
        inspector = images.get_image_format(path)
    except Exception:   # noqa: BLE001 - an unrecognised file: qemu-img's
        return None
    fmt = guest_format(inspector)
    if fmt == 'raw':
        # The inspector counts only the bytes it read for a raw file; the
        # length of a block device is where its end is.
        with open(path, 'rb') as f:
            return f.seek(0, os.SEEK_END)
    if fmt == 'qcow2':
        return int(inspector.virtual_size)
    return None


def guest_format(inspector: Any) -> str | None:
    """``raw`` or ``qcow2``, the format qemu finds in a file Nova's format
    inspector identified (a raw disk holding a GPT or an ISO 9660 file
    system is raw to qemu), or None for any other."""
    fmt = str(inspector)
    if fmt in ('raw', 'gpt', 'iso'):
        return 'raw'
    return 'qcow2' if fmt == 'qcow2' else None
