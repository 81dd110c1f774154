"""The driver's part for disks on storage pools: the instance's pool and
its volumes, legacy instances moving into the pools (crash-safe), and the
guest config of pool instances.

One of the parts :class:`~nova_imgtype.virt.libvirt.driver.LibvirtDriver`
is made of; each is a subclass of stock's driver overriding the stock
methods of one concern and calling the next part (``super()``).
"""

from __future__ import annotations

from typing import Any

from nova import objects
from nova.virt.libvirt import driver as libvirt_driver
from oslo_config import cfg
from oslo_log import log as logging

import nova_imgtype.conf
from nova_imgtype import compat
from nova_imgtype.virt.libvirt import instance_disks
from nova_imgtype.virt.libvirt import resolver as resolver_mod

LOG = logging.getLogger(__name__)
CONF: cfg.ConfigOpts = nova_imgtype.conf.CONF

class PoolDisks(libvirt_driver.LibvirtDriver):
    """Disks of an instance on a storage pool: stock's steps around which
    the driver asks :class:`~.instance_disks.InstanceDisks` (``_disks``)."""

    _disks: instance_disks.InstanceDisks

    def _pool_backing_paths(self) -> set[str]:
        return self._disks.pool_backing_paths()

    def _instance_pool(self, instance: objects.Instance) -> Any:
        return self._disks.instance_pool(instance)

    def _delete_pool_volumes(self, instance: objects.Instance,
                             suffix: str = '') -> None:
        self._disks.delete_pool_volumes(instance, suffix)

    def delete_instance_files(self, *args: Any, **kwargs: Any) -> bool:
        instance: objects.Instance = compat.driver(
            'delete_instance_files', self, args, kwargs)['instance']
        done = super().delete_instance_files(*args, **kwargs)
        # Stock removes the instance directory of a deleted instance (its
        # pending deletes, a move that failed on this host); its volumes in
        # this host's dir pool are files of this host as much, and go too.
        return self._disks.delete_dir_volumes(instance) and done

    def _can_move_to_pools(self, instance: objects.Instance) -> bool:
        return self._disks.can_move_to_pools(instance)

    def _move_to_pools(self, instance: objects.Instance) -> None:
        self._disks.move_to_pools(instance)

    def _record_pool_locations(
            self, instances: list[objects.Instance]) -> None:
        self._disks.record_pool_locations(instances)

    def _finish_interrupted_moves(
            self, instances: list[objects.Instance]) -> None:
        self._disks.finish_interrupted_moves(instances)

    def _pools_here(self, decision: resolver_mod.BackendDecision
                    ) -> resolver_mod.BackendDecision:
        return self._disks.pools_here(decision)

    def _use_this_hosts_pool(self, instance: objects.Instance) -> None:
        self._disks.use_this_hosts_pool(instance)

    def _hard_reboot(self, *args: Any, **kwargs: Any) -> Any:
        call = compat.driver('_hard_reboot', self, args, kwargs)
        instance: objects.Instance = call['instance']
        if self._can_move_to_pools(instance) and \
                not self._is_booted_from_volume(call['block_device_info']):
            # Stop the guest before its files move; stock's own destroy
            # that follows finds it stopped.
            self._destroy(instance)
            self._move_to_pools(instance)
        return super()._hard_reboot(*args, **kwargs)

    def unrescue(self, *args: Any, **kwargs: Any) -> None:
        instance: objects.Instance = compat.driver(
            'unrescue', self, args, kwargs)['instance']
        super().unrescue(*args, **kwargs)
        self._disks.delete_rescue_disks(instance)

    def _get_guest_config(self, *args: Any, **kwargs: Any) -> Any:
        instance: objects.Instance = compat.driver(
            '_get_guest_config', self, args, kwargs)['instance']
        guest = super()._get_guest_config(*args, **kwargs)
        if self._resolver.decision_for(instance).storage == \
                resolver_mod.POOLS:
            self._disks.point_at_kernel_volumes(instance, guest)
        return guest
