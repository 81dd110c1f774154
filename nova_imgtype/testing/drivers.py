"""The plugin's driver on storage pools of a test's own libvirt.

A driver's pools are on its host's libvirt connection (the functional
harness's is fakelibvirt, which has no pool API): a test or benchmark
that wants them on another connection (libvirt's embedded test driver, a
throwaway libvirtd) hands the driver its :class:`StoragePools` here, and
every part of the driver that works on pools uses them.
"""

from __future__ import annotations

from typing import Any

from nova_imgtype.virt.libvirt import pools


def use_pools(driver: Any, storage_pools: pools.StoragePools) -> Any:
    """``driver``, its pools ``storage_pools``."""
    driver._pools = driver.image_backend.pools = storage_pools
    driver._disks.pools = driver._templates.pools = storage_pools
    return driver
