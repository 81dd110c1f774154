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
stock makes them. :func:`checked_template` is stock's check of a template
before a disk is made on it, made once per version of the template file,
its inspector's reading of the size kept for the size stock asks for next.
"""

from __future__ import annotations

import os
import stat
import threading
from typing import Any

import cachetools
from nova import exception as nova_exception
from nova.i18n import _
from nova.virt import images
from nova.virt.libvirt import imagebackend
from oslo_log import log as logging
from oslo_utils.imageutils import format_inspector

from nova_imgtype import compat

LOG = logging.getLogger(__name__)

#: Sizes of regular files kept, each for one version of its file (with the
#: inspector that passed its safety check, when it was checked).
KEEP = 256
#: path -> (version, size, inspector or None), the least recently used
#: dropped first.
_known: cachetools.LRUCache[
    str, tuple[tuple[int, ...], int | None, Any]] = cachetools.LRUCache(
        maxsize=KEEP)
_known_lock = threading.Lock()
_QCOW2_MAGIC = b'QFI\xfb'


def virtual_size(path: str) -> int | None:
    """The virtual size of the raw or qcow2 file or block device ``path``
    (a linked template is a block device), or None when it is in another
    format (or none Nova's inspector recognises), for ``qemu-img info``.

    A regular file is read once per version (its inode, length and time
    stamps): a file that changed is read again. A block device, which can
    grow under the same node, is read each time.

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
    version = _version(st)
    with _known_lock:
        known = _known.get(path)
        if known is not None and known[0] == version:
            return known[1]
    size = _read(path)
    _remember(path, version, size, None)
    return size


def checked_template(path: str) -> Any:
    """Stock's safety check of the image template ``path`` before a disk
    is made on it; the inspector that made it.

    As stock's ``Qcow2.create_image`` (and ``Flat``'s) does: Nova's format
    inspector reads the template and its ``safety_check()`` refuses a
    backing file, a data file or unknown qcow2 features; the template's
    time stamps are then renewed for the image cache manager. The size the
    inspector read is kept for the file as it is after that, so that the
    size stock asks for next (``verify_base_size``) reads nothing again.

    A regular file that passed is not read again while it is the same
    version (inode, length, modification and change times, which a write,
    a rename over it or a change of its times renews): the check reads the
    file's content, and that content has not changed since it passed. Stock's
    check too is of the file as it was when read. A block device (a linked
    template), or a file that changed, is checked again.

    :raises InvalidDiskInfo: the template failed the safety check.
    """
    passed = _passed(path)
    if passed is None:
        inspector = images.get_image_format(path)
        try:
            inspector.safety_check()
        except format_inspector.SafetyCheckFailed as e:
            LOG.warning('Base image %s failed safety check: %s', path, e)
            raise nova_exception.InvalidDiskInfo(
                reason=_('Base image failed safety check')) from e
    else:
        size, inspector = passed
    imagebackend._update_utime_ignore_eacces(path)
    st = os.stat(path)
    if stat.S_ISREG(st.st_mode):
        if passed is None:
            size = _size(path, inspector)
        # The same content under the new time stamps.
        _remember(path, _version(st), size, inspector)
    return inspector


def _passed(path: str) -> tuple[int | None, Any] | None:
    """The size and the inspector that passed the safety check of this
    version of the regular file ``path``; None when it has not been
    checked as it is."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    with _known_lock:
        known = _known.get(path)
        if known is None or known[0] != _version(st) or known[2] is None:
            return None
        return known[1], known[2]


def _version(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
            st.st_ctime_ns)


def _remember(path: str, version: tuple[int, ...], size: int | None,
              inspector: Any) -> None:
    with _known_lock:
        _known[path] = (version, size, inspector)


def disk_format(path: str) -> str | None:
    """``raw`` or ``qcow2``: the format of the file ``path`` as Nova's
    format inspector identifies it (:func:`guest_format`), read in this
    process; None for any other format, a file the inspector cannot tell
    or cannot read, for ``qemu-img info``.

    A file the inspector finds raw is raw to qemu too, but for formats
    qemu probes and the inspector does not know (bochs, cloop, dmg,
    parallels): none is a Glance ``disk_format``, and with deep inspection
    on, stock's download refuses an image whose format the inspector and
    ``qemu-img`` disagree on. Such a file is raw here: its bytes as they
    are, no format probed from its content. A qcow2 header of version 1
    (qemu's older ``qcow``, which the inspector takes for qcow2) is left
    to ``qemu-img``.
    """
    inspector = _inspect(path)
    if inspector is None:
        return None
    fmt = guest_format(inspector)
    if fmt == 'qcow2' and _qcow_version(path) < 2:
        return None
    return fmt


def _read(path: str) -> int | None:
    inspector = _inspect(path)
    return None if inspector is None else _size(path, inspector)


def _inspect(path: str) -> Any:
    """Nova's inspector of the file ``path``; None when it cannot tell."""
    try:
        return _qcow2(path) or images.get_image_format(path)
    except Exception:   # noqa: BLE001 - an unrecognised file: qemu-img's
        return None


def _qcow2(path: str) -> Any:
    """The qcow2 inspector alone for a file with qcow2's magic (its header
    is all it reads), None for any other: telling every other format apart
    reads far more, for nothing when the file is an overlay."""
    with open(path, 'rb') as f:
        if f.read(len(_QCOW2_MAGIC)) != _QCOW2_MAGIC:
            return None
    return format_inspector.QcowInspector.from_file(path)


def _qcow_version(path: str) -> int:
    """The version in the header of a file with qcow's magic."""
    with open(path, 'rb') as f:
        header = f.read(len(_QCOW2_MAGIC) + 4)
    return int.from_bytes(header[len(_QCOW2_MAGIC):], 'big')


def _size(path: str, inspector: Any) -> int | None:
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


def template_format(inspector: Any) -> str:
    """The format of a template that passed the safety check
    (:func:`checked_template`), as Nova's inspector identified it: ``raw``
    or ``qcow2`` as qemu reads them (:func:`guest_format`), the
    inspector's name of any other."""
    return guest_format(inspector) or str(inspector)


class InProcessSizes:
    """For a stock image backend (first in its bases): ``get_disk_size``
    of a raw or qcow2 file read in this process, stock's ``qemu-img info``
    for any other; no resize of a disk as large already."""

    def get_disk_size(self, *args: Any, **kwargs: Any) -> int:
        name: str = compat.called(
            'nova.virt.libvirt.imagebackend:Image.get_disk_size', self, args,
            kwargs)['name']
        size = self._size_of(name)
        if size is None:
            return int(super().get_disk_size(  # type: ignore[misc]
                *args, **kwargs))
        return size

    def resize_image(self, *args: Any, **kwargs: Any) -> None:
        """Stock's resize, unless the disk is as large already (a disk made
        from a template of the flavor's root disk size: ``qemu-img
        create`` or the copy made it that size), which stock's
        ``disk.extend`` finds out with one more ``qemu-img info`` and then
        leaves the disk as it is."""
        size: int = compat.called(
            'nova.virt.libvirt.imagebackend:Image.resize_image', self, args,
            kwargs)['size']    # Flat's and Qcow2's signature too
        have = self._size_of(self.path)  # type: ignore[attr-defined]
        if have is not None and have >= size:
            return
        super().resize_image(*args, **kwargs)  # type: ignore[misc]

    def _size_of(self, path: str) -> int | None:
        """The size of ``path`` as the guest sees it: a raw disk's is its
        length, whatever header the guest wrote at its start."""
        if (path == getattr(self, 'path', None) and
                getattr(self, 'driver_format', None) == 'raw'):
            with open(path, 'rb') as f:
                return f.seek(0, os.SEEK_END)
        return virtual_size(path)
