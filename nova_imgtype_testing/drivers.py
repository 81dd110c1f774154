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


def _stock_move(driver: Any, instance: Any, dest: str) -> Any:
    """Stock's ``migrate_disk_and_power_off`` (looked up on stock's class
    when called: a test's patch of it applies), with the arguments a
    compute manager gives it."""
    from nova.virt.libvirt import driver as libvirt_driver

    return lambda: libvirt_driver.LibvirtDriver.migrate_disk_and_power_off(
        driver, None, instance, dest, None, None, None, 0, 0)


def send_files(driver: Any, instance: Any, dest: str) -> str:
    """The cold move of ``instance``'s files to ``dest`` that the driver's
    ``migrate_disk_and_power_off`` runs once its checks pass."""
    from nova_imgtype.virt.libvirt import cold_move

    move = cold_move.ColdMove(instance, dest, driver._stock_steps)
    return move.send_files(_stock_move(driver, instance, dest))


def send_pool_disks(driver: Any, instance: Any, dest: str,
                    dest_pools: bool = True) -> str:
    """The cold move of ``instance``'s dir pool volumes to ``dest`` that
    the driver's ``migrate_disk_and_power_off`` runs once its checks
    pass."""
    from nova_imgtype.virt.libvirt import cold_move

    move = cold_move.ColdMove(instance, dest, driver._stock_steps)
    return move.send_pool_disks(
        _stock_move(driver, instance, dest), driver._pools,
        driver._disks.instance_pool(instance),
        driver._resolver.decision_for(instance), dest_pools=dest_pools)
