"""An instance's backend decision, assumed where it is not recorded yet.

A live migration's destination makes the instance's disks in
``pre_live_migration`` (stock's ``_create_images_and_backing`` asks the
image backend for each disk and fetches its template) and, if the
migration fails, removes them in ``rollback_live_migration_at_destination``
(stock's ``destroy``, then ``_cleanup``), all before the instance's record
says it is here: there, its record still names the source's storage. The
driver runs those steps within :func:`assumed` (the decision of where
this host makes the disks), and the resolver answers with it
(:func:`get`) for that instance only, in that thread only, recording
nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from nova_imgtype.stock.facts import SourceFact
from nova_imgtype.stock.thread_value import ThreadValue

_ASSUMED: ThreadValue[tuple[str, Any]] = ThreadValue('assumed_decision')

_DRIVER = 'nova.virt.libvirt.driver:LibvirtDriver.'

FACTS = (
    SourceFact(
        _DRIVER + 'pre_live_migration',
        (r'self\._create_images_and_backing\(',),
        'the destination makes the disks in pre_live_migration, within '
        'the assumed decision'),
    SourceFact(
        _DRIVER + '_create_images_and_backing',
        (r'self\.image_backend\.by_name\(instance, instance_disk\)',
         r'self\._try_fetch_image_cache\('),
        'each disk is asked of the (plugin\'s) image backend with the '
        'instance, whose decision the resolver gives'),
    SourceFact(
        _DRIVER + 'rollback_live_migration_at_destination',
        (r'self\.destroy\(context, instance, network_info, '
         r'block_device_info,\s*destroy_disks\)',),
        'a failed arrival removes the disks through destroy (and so the '
        'plugin\'s _cleanup), within the assumed decision'),
)


@contextlib.contextmanager
def assumed(instance_uuid: str, decision: Any) -> Iterator[None]:
    """Within the block, in this thread, ``instance_uuid``'s decision is
    ``decision``."""
    with _ASSUMED.bound((instance_uuid, decision)):
        yield


def get(instance_uuid: str) -> Any | None:
    """The decision assumed for ``instance_uuid`` in this thread, or
    None."""
    assumed_ = _ASSUMED.get()
    if assumed_ is not None and assumed_[0] == instance_uuid:
        return assumed_[1]
    return None
