"""Stock's private driver steps that the driver's collaborators call.

The collaborators (snapshots, the image cache's templates, cold moves)
are no subclasses of stock's driver: where they take one of stock's own
steps (stock's snapshot metadata, its suspend around a cold snapshot, its
rebase onto a template, the URI it migrates to), they call it here. Each
method is one private name of stock's ``LibvirtDriver``, looked up on the
driver when called, so that the driver's own override of it (and a test's
patch of the driver) is the one that runs. ``test_stock_private_names``
lists each, and fails when the installed Nova no longer has it.
"""

from __future__ import annotations

from typing import Any

from nova import objects
from nova.virt.libvirt import driver as libvirt_driver


class StockSteps:
    """Stock's private steps of one driver.

    :param driver: the driver (stock's subclass) whose steps these are.
    """

    def __init__(self, driver: libvirt_driver.LibvirtDriver) -> None:
        self._driver = driver

    # -- the guest ------------------------------------------------------------

    def guest(self, instance: objects.Instance) -> Any:
        """The instance's libvirt guest (stock's ``Host.get_guest``)."""
        return self._driver._host.get_guest(instance)

    def define(self, xml: str) -> None:
        """Make ``xml`` a guest's definition (stock's
        ``Host.write_instance_config``): a running guest keeps running as
        it is and starts next time as defined."""
        self._driver._host.write_instance_config(xml)

    def power_state(self, guest: Any) -> int:
        """The guest's power state, as stock reads it."""
        return guest.get_power_state(self._driver._host)

    # -- snapshots ------------------------------------------------------------

    def create_snapshot_metadata(self, image_meta: Any,
                                 instance: objects.Instance, img_fmt: str,
                                 snp_name: str) -> dict[str, Any]:
        """Stock's metadata of a snapshot image."""
        return self._driver._create_snapshot_metadata(
            image_meta, instance, img_fmt, snp_name)

    def suspend_guest_for_snapshot(self, context: Any, live_snapshot: bool,
                                   current_power_state: int,
                                   instance: objects.Instance) -> None:
        """Stock's step before a cold snapshot (the guest suspended)."""
        self._driver._suspend_guest_for_snapshot(
            context, live_snapshot, current_power_state, instance)

    def resume_guest_after_snapshot(self, context: Any, live_snapshot: bool,
                                    original_power_state: int,
                                    instance: objects.Instance,
                                    guest: Any) -> None:
        """Stock's step after a cold snapshot (the guest as it was)."""
        self._driver._resume_guest_after_snapshot(
            context, live_snapshot, original_power_state, instance, guest)

    @property
    def image_api(self) -> Any:
        """The driver's image API (stock's ``nova.image.glance.API``)."""
        return self._driver._image_api

    # -- cold moves -----------------------------------------------------------

    def live_migration_uri(self, dest: str) -> str:
        """The libvirt URI stock migrates to ``dest`` with."""
        return str(self._driver._live_migration_uri(dest))

    def is_path_shared_with(self, dest: str, path: str) -> bool:
        """Stock's check: whether ``path`` is shared with ``dest`` (made
        and looked for through the driver's remote filesystem)."""
        return bool(self._driver._is_path_shared_with(dest, path))

    def cleanup_remote_migration(self, dest: str, inst_base: str,
                                 inst_base_resize: str,
                                 shared_storage: bool) -> None:
        """Stock's clean-up of a failed cold move: the instance
        directory put back here, the destination's removed."""
        self._driver._cleanup_remote_migration(
            dest, inst_base, inst_base_resize, shared_storage)

    # -- templates ------------------------------------------------------------

    def needs_rebase_original_qcow2_image(self, instance: objects.Instance,
                                          backend: Any) -> bool:
        """Stock's answer: whether a qcow2 disk spawned from a snapshot is
        rebased onto the original image's template."""
        return bool(self._driver._needs_rebase_original_qcow2_image(
            instance, backend))

    def try_fetch_image_cache(self, *args: Any, **kwargs: Any) -> None:
        """The driver's ``_try_fetch_image_cache`` (the plugin's override:
        a template fetched into this host's image cache)."""
        self._driver._try_fetch_image_cache(*args, **kwargs)

    def rebase_with_qemu_img(self, source_path: str,
                             rebase_base: str | None) -> None:
        """Stock's rebase of a qcow2 disk onto ``rebase_base``."""
        self._driver._rebase_with_qemu_img(source_path, rebase_base)
