"""The traits nova-imgtype reports and asks placement for.

* ``COMPUTE_IMAGE_TYPE_<FORMAT>`` (os-traits): the node can boot images of
  that disk_format, converted or not.
* ``CUSTOM_IMGTYPE_NATIVE_<FORMAT>``: the node uses that format as it is,
  without conversion.
* ``CUSTOM_IMGTYPE_BACKEND_<NAME>``: the node can serve that image backend
  (so that a move is refused before anything is touched).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any

import os_traits
from nova.scheduler.client import report

NATIVE_PREFIX = 'IMGTYPE_NATIVE_'
BACKEND_PREFIX = 'IMGTYPE_BACKEND_'

#: The compute node stat (``ComputeNode.stats``, which the scheduler gives
#: each host filter as ``HostState.stats``) in which a compute running
#: nova-imgtype lists the image-type traits it reports to placement, comma
#: separated. Named after the package, not ``imgtype_*``: that prefix is the
#: instance record's (:mod:`nova_imgtype.record`).
STATS_KEY = 'nova_imgtype_image_type_traits'


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


def is_image_type(trait: str) -> bool:
    """Whether ``trait`` says which images a node boots:
    ``COMPUTE_IMAGE_TYPE_*`` or ours of :data:`NATIVE_PREFIX`."""
    return (trait.startswith('COMPUTE_IMAGE_TYPE_') or
            ours(trait, NATIVE_PREFIX))


def to_stats(node_traits: Iterable[str]) -> dict[str, str]:
    """The compute node stats listing the image-type traits among
    ``node_traits``."""
    return {STATS_KEY: ','.join(sorted(
        t for t in node_traits if is_image_type(t)))}


def from_stats(stats: Mapping[str, Any] | None) -> frozenset[str] | None:
    """The image-type traits a compute node's stats list; None when they
    list none at all (a compute without nova-imgtype, or from before it
    reported them)."""
    value = (stats or {}).get(STATS_KEY)
    if value is None:
        return None
    return _listed(str(value))


@functools.lru_cache(maxsize=256)
def _listed(value: str) -> frozenset[str]:
    """The traits a stats value lists. Read once per distinct value: a
    cloud's computes list a few (one per kind of compute), and the host
    filter reads every host's on every pass."""
    return frozenset(t for t in value.split(',') if t)


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
