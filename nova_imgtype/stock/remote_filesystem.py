"""Stock's remote filesystem, the destination's libvirtd during a cold
move.

Stock's cold move makes, checks and removes the instance directory on the
destination through ``self._remotefs`` (SSH or rsync), which its
``__init__`` sets. The plugin's cold moves go through the destination's
libvirtd instead (:class:`~nova_imgtype.virt.libvirt.remote_storage.
LibvirtRemoteFilesystem`): :class:`RemoteFilesystemAttribute` replaces the
attribute on the driver's class, and :func:`using` makes it that remote
filesystem for the length of one move, in the thread running it (Nova 34
runs compute in native threads: another move, or anything else, keeps
stock's).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from nova_imgtype.stock.facts import CallSites
from nova_imgtype.stock.thread_value import ThreadValue

_REMOTE: ThreadValue[Any] = ThreadValue('remotefs')

FACTS = (
    CallSites(
        'nova.virt.libvirt.driver', r'self\._remotefs\b',
        frozenset({'LibvirtDriver.__init__',
                   'LibvirtDriver._cleanup_remote_migration',
                   'LibvirtDriver._is_path_shared_with',
                   'LibvirtDriver.migrate_disk_and_power_off'}),
        'stock reaches the destination only through self._remotefs, and '
        'only in its cold move\'s steps (and __init__ sets it)'),
)


@contextlib.contextmanager
def using(remote: Any) -> Iterator[None]:
    """Within the block, in this thread, stock's remote filesystem is
    ``remote``."""
    with _REMOTE.bound(remote):
        yield


def current() -> Any | None:
    """The remote filesystem of the cold move running in this thread, or
    None outside one."""
    return _REMOTE.get()


class RemoteFilesystemAttribute:
    """The driver's ``_remotefs``: the one of the cold move running in
    this thread (:func:`using`), stock's (the one its ``__init__`` set)
    otherwise."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._stock = '_stock' + name

    def __get__(self, driver: Any, owner: type | None = None) -> Any:
        if driver is None:
            return self
        return _REMOTE.get() or getattr(driver, self._stock)

    def __set__(self, driver: Any, value: Any) -> None:
        setattr(driver, self._stock, value)
