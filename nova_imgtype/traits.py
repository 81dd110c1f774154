"""The traits nova-imgtype reports and asks placement for.

* ``COMPUTE_IMAGE_TYPE_<FORMAT>`` (os-traits): the node can boot images of
  that disk_format, converted or not.
* ``CUSTOM_IMGTYPE_NATIVE_<FORMAT>``: the node uses that format as it is,
  without conversion.
* ``CUSTOM_IMGTYPE_BACKEND_<NAME>``: the node can serve that image backend
  (so that a move is refused before anything is touched).
"""

from __future__ import annotations

import os_traits

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
