"""The driver's part for images: templates fetched into the image cache
through the template handler (boot, pre-caching) and snapshots of disks on
volumes.

One of the parts :class:`~nova_imgtype.virt.libvirt.driver.LibvirtDriver`
is made of.
"""

from __future__ import annotations

import os
from typing import Any

from nova import exception as nova_exception
from nova import objects
from nova import utils
from nova.compute import task_states
from nova.image import glance
from nova.virt.libvirt import driver as libvirt_driver
from nova.virt.libvirt import imagecache as nova_imagecache
from nova.virt.libvirt import utils as libvirt_utils
from oslo_config import cfg
from oslo_log import log as logging
from oslo_utils import fileutils
from oslo_utils import uuidutils

import nova_imgtype.conf
from nova_imgtype import compat
from nova_imgtype.virt.libvirt import imagecache
from nova_imgtype.virt.libvirt import resolver as resolver_mod
from nova_imgtype.virt.libvirt import template_cache
from nova_imgtype.virt.libvirt.template_handlers import base as handlers

LOG = logging.getLogger(__name__)
CONF: cfg.ConfigOpts = nova_imgtype.conf.CONF


class Images(libvirt_driver.LibvirtDriver):
    """Templates in the image cache (asking
    :class:`~.template_cache.TemplateCache`, ``_templates``), and
    snapshots."""

    _templates: template_cache.TemplateCache

    def _try_fetch_image_cache(self, *args: Any, **kwargs: Any) -> None:
        call = compat.driver('_try_fetch_image_cache', self, args, kwargs)
        if call['fetch_func'] is not libvirt_utils.fetch_image:
            # Kernel, ramdisk (fetch_raw_image), made-up templates
            # (ephemeral, swap) and a disk stock clones from Glance's copy
            # in its Ceph cluster (an rbd volume: RbdStorage.clone, with
            # stock's download as its fallback) stay stock's.
            return super()._try_fetch_image_cache(*args, **kwargs)
        fetch_func, filename = self._templates.fetch_plan(
            type(call['image']), call['context'], call['filename'],
            call['image_id'], call['instance'])
        args, kwargs = call.replaced(fetch_func=fetch_func,
                                     filename=filename)
        super()._try_fetch_image_cache(*args, **kwargs)

    def _rebase_original_qcow2_image(self, *args: Any,
                                     **kwargs: Any) -> None:
        """Stock's rebase of a qcow2 disk spawned from a snapshot (an
        unshelve, a cross-cell resize) onto the template of the original
        image, onto the template this host keeps for that image: its
        native file (``<sha1>_qcow2``) when the instance keeps the image
        natively, where stock looks for ``<sha1>``, which is not there.

        The template is fetched as every template is
        (:meth:`_try_fetch_image_cache`), then stock's rebase runs on it.
        An original image the image service no longer has, or one the
        instance does not keep natively, is stock's case, left to it.
        """
        call = compat.driver('_rebase_original_qcow2_image', self, args,
                             kwargs)
        context: Any = call['context']
        instance: objects.Instance = call['instance']
        backend: Any = call['backend']
        decision = self._resolver.decision_for(instance)
        base_ref = instance.system_metadata.get('image_base_image_ref')
        if (not decision.native_formats or not base_ref or
                not self._needs_rebase_original_qcow2_image(instance,
                                                            backend)):
            return super()._rebase_original_qcow2_image(*args, **kwargs)
        try:
            disk_format = glance.API().get(context, base_ref).get(
                'disk_format')
        except nova_exception.ImageNotFound:
            return super()._rebase_original_qcow2_image(*args, **kwargs)
        name, native = imagecache.template_name(decision.native_formats,
                                                base_ref, disk_format)
        if native is None:
            return super()._rebase_original_qcow2_image(*args, **kwargs)
        self._try_fetch_image_cache(
            backend, libvirt_utils.fetch_image, context,
            nova_imagecache.get_cache_fname(base_ref), base_ref, instance,
            None)
        LOG.info('Rebasing disk image onto %s.', name, instance=instance)
        self._rebase_with_qemu_img(backend.path, os.path.join(
            self.image_cache_manager.cache_dir, name))
        return None

    def _get_guest_xml(self, *args: Any, **kwargs: Any) -> Any:
        """Stock's guest XML, once the linked template the instance's
        qcow2 root disk reads through is checked again."""
        self._templates.check_linked_root_template(
            compat.driver('_get_guest_xml', self, args, kwargs)['instance'])
        return super()._get_guest_xml(*args, **kwargs)

    def _check_linked_root_template(self,
                                    instance: objects.Instance) -> None:
        self._templates.check_linked_root_template(instance)

    def cache_image(self, *args: Any, **kwargs: Any) -> bool:
        """Pre-cache the template a new instance of the image would use
        (:meth:`.TemplateCache.cache`), not stock's ``<sha1>``."""
        call = compat.driver('cache_image', self, args, kwargs)
        return self._templates.cache(call['context'], call['image_id'])

    def _handler_for(self, backend: type, filename: str,
                     image_id: str) -> handlers.BaseTemplateImageHandler:
        return self._templates.handler_for(backend, filename, image_id)

    def manage_image_cache(self, *args: Any, **kwargs: Any) -> None:
        """Stock's image cache pass, then the templates of rbd pools that
        nothing uses any more."""
        super().manage_image_cache(*args, **kwargs)
        self._templates.remove_unused_rbd_templates()

    def snapshot(self, *args: Any, **kwargs: Any) -> None:
        call = compat.driver('snapshot', self, args, kwargs)
        instance: objects.Instance = call['instance']
        if self._resolver.decision_for(instance).storage != \
                resolver_mod.POOLS:
            return super().snapshot(*args, **kwargs)
        self._snapshot_from_pool(call['context'], instance, call['image_id'],
                                 call['update_task_state'])

    def _snapshot_from_pool(self, context: Any, instance: objects.Instance,
                            image_id: str, update_task_state: Any) -> None:
        """Cold snapshot of a disk on a volume.

        Stock's snapshot finds the root disk by the path in the guest XML,
        which a ``<disk type='volume'>`` does not have. Here the root disk
        is the instance's volume; it is copied with ``createXMLFrom`` into a
        temporary pool (LibvirtStorage.snapshot_extract) while the guest is
        suspended as stock's cold snapshot does, then uploaded.
        """
        guest = self._host.get_guest(instance)
        snapshot = self._image_api.get(context, image_id)
        root_disk = self.image_backend.by_name(instance, 'disk')
        image_format = (CONF.libvirt.snapshot_image_format or
                        root_disk.volume_format)
        metadata = self._create_snapshot_metadata(
            instance.image_meta, instance, image_format, snapshot['name'])
        power_state = guest.get_power_state(self._host)
        self._suspend_guest_for_snapshot(context, False, power_state,
                                         instance)
        LOG.info('Beginning cold snapshot of volume %s',
                 root_disk.volume_name, instance=instance)
        update_task_state(task_state=task_states.IMAGE_PENDING_UPLOAD)
        fileutils.ensure_tree(CONF.libvirt.snapshots_directory)
        with utils.tempdir(dir=CONF.libvirt.snapshots_directory) as tmpdir:
            out_path = os.path.join(tmpdir, uuidutils.generate_uuid(
                dashed=False))
            try:
                root_disk.snapshot_extract(out_path, image_format)
            finally:
                self._resume_guest_after_snapshot(
                    context, False, power_state, instance, guest)
            update_task_state(task_state=task_states.IMAGE_UPLOADING,
                              expected_state=task_states.IMAGE_PENDING_UPLOAD)
            with libvirt_utils.file_open(out_path, 'rb') as image_file:
                self._image_api.update(context, image_id, metadata,
                                       image_file)
        LOG.info('Snapshot image upload complete', instance=instance)
