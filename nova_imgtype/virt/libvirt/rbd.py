"""Stock's ``Rbd`` backend, for disks nova-imgtype cloned in Ceph.

A volume of an rbd pool is an RBD clone of a template that nova-imgtype
uploaded into Nova's own Ceph pool (:mod:`.storage_rbd`). Once such an
instance is served by stock's class (a host without pools on the same
cluster), stock's direct snapshot takes the disk's RBD parent for Glance's
image and clones the snapshot into the parent's pool: Nova's, a location
Glance refuses, and the snapshot stays queued.
"""

from __future__ import annotations

from typing import Any

from nova import exception as nova_exception
from nova.virt.libvirt import imagebackend

from nova_imgtype.virt.libvirt import pool_specs


class _GlanceParents:
    """Nova's rbd helper, but a disk whose RBD parent is a template of
    nova-imgtype's answers as a disk that is no clone."""

    def __init__(self, driver: Any) -> None:
        self._driver = driver

    def __getattr__(self, name: str) -> Any:
        return getattr(self._driver, name)

    def parent_info(self, volume: str, pool: str | None = None) -> Any:
        parent = self._driver.parent_info(volume, pool=pool)
        if str(parent[1]).startswith(pool_specs.RBD_TEMPLATE_PREFIX):
            raise nova_exception.ImageUnacceptable(
                image_id=volume,
                reason='cloned from a template of Nova\'s pool')
        return parent


class Rbd(imagebackend.Rbd):
    """Stock's ``Rbd``; Glance's pool found by stock's own rule for a disk
    that is no clone of Glance's image when the disk's parent is one of
    nova-imgtype's templates."""

    driver: Any
    native_disk_formats = ('raw',)
    #: It imports (copies) a template's data, as stock's does.
    accepts_linked_templates = True

    def _get_parent_pool(self, *args: Any, **kwargs: Any) -> Any:
        # Stock then asks Glance where the image is (its locations in this
        # cluster), or refuses the direct snapshot and uploads instead.
        driver, self.driver = self.driver, _GlanceParents(self.driver)
        try:
            return super()._get_parent_pool(*args, **kwargs)
        finally:
            self.driver = driver
