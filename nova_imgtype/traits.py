"""The traits nova-imgtype reports and asks placement for.

* ``COMPUTE_IMAGE_TYPE_<FORMAT>`` (os-traits): the node can boot images of
  that disk_format, converted or not.
* ``CUSTOM_IMGTYPE_NATIVE_<FORMAT>``: the node uses that format as it is,
  without conversion.
* ``CUSTOM_IMGTYPE_BACKEND_<NAME>``: the node can serve that image backend
  (so that a move is refused before anything is touched).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import os_traits
from nova.scheduler.client import report

NATIVE_PREFIX = 'IMGTYPE_NATIVE_'
BACKEND_PREFIX = 'IMGTYPE_BACKEND_'


def image_type_trait(disk_format: str) -> str | None:
    """os-traits' ``COMPUTE_IMAGE_TYPE_<FORMAT>``, None if it has none."""
    trait: str | None = getattr(
        os_traits, 'COMPUTE_IMAGE_TYPE_%s' % disk_format.upper(), None)
    return trait


def native_trait(disk_format: str) -> str:
    """``CUSTOM_IMGTYPE_NATIVE_<FORMAT>``."""
    return str(os_traits.normalize_name(NATIVE_PREFIX + disk_format))


def backend_trait(backend: str) -> str:
    """``CUSTOM_IMGTYPE_BACKEND_<NAME>``."""
    return str(os_traits.normalize_name(BACKEND_PREFIX + backend))


def ours(trait: str, prefix: str) -> bool:
    """Whether ``trait`` is one of our custom traits of ``prefix``."""
    return trait.startswith(os_traits.CUSTOM_NAMESPACE + prefix)


def reported(context: Any, provider_uuids: Iterable[str]) -> set[str]:
    """Every trait placement holds for these resource providers."""
    client = report.report_client_singleton()
    found: set[str] = set()
    for uuid in provider_uuids:
        found |= set(client.get_provider_traits(context, uuid).traits)
    return found


def runs_imgtype(node_traits: Iterable[str]) -> bool:
    """Whether a node of these traits runs nova-imgtype (every such node
    reports at least one ``CUSTOM_IMGTYPE_BACKEND_*`` trait)."""
    return any(ours(t, BACKEND_PREFIX) for t in node_traits)
