"""Stock's host-wide ``image_backend.backend()`` answered for one
instance.

Stock asks its image backend factory ``backend()`` with no type where it
means "the backend of this host" (``images_type``): whether an instance's
disks are on shared block storage, whether they can be cloned on resize
clean-up, whether they are on disk at all. With per-instance backends the
answer is the instance's. The driver wraps each stock step that asks so
in :func:`scoped`, and the plugin's backend factory answers a type-less
``backend()`` within it with the instance's backend (:func:`current`).
The call sites are listed: a stock step that starts asking is a new
question the plugin must answer for its instance, and fails a test.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from nova_imgtype.stock.facts import CallSites
from nova_imgtype.stock.thread_value import ThreadValue

_SCOPED: ThreadValue[Any] = ThreadValue('scoped_instance')

FACTS = (
    CallSites(
        'nova.virt.libvirt.driver', r'image_backend\.backend\(\)',
        frozenset({'LibvirtDriver.__init__',
                   'LibvirtDriver._cleanup_resize',
                   'LibvirtDriver._is_shared_block_storage',
                   'LibvirtDriver.check_instance_shared_storage_local',
                   'LibvirtDriver.instance_on_disk'}),
        'stock asks the host\'s backend with no instance in these steps '
        'only: __init__ (the host\'s, SUPPORTS_LUKS), and four the driver '
        'runs within scoped(instance)'),
)


@contextlib.contextmanager
def scoped(instance: Any) -> Iterator[None]:
    """Within the block, in this thread, a type-less ``backend()`` means
    ``instance``'s backend."""
    with _SCOPED.bound(instance):
        yield


def current() -> Any | None:
    """The instance of the :func:`scoped` block running in this thread,
    or None."""
    return _SCOPED.get()
