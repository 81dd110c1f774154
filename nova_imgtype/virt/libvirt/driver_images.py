"""The driver's part for images: templates fetched into the image cache
through the template handler (boot, pre-caching) and snapshots of disks on
volumes.

One of the parts :class:`~nova_imgtype.virt.libvirt.driver.LibvirtDriver`
is made of.
"""

from __future__ import annotations

import os
from typing import Any

import nova.privsep.path
from nova import exception as nova_exception
from nova import objects
from nova import utils
from nova.compute import task_states
from nova.i18n import _
from nova.image import glance
from nova.virt import images
from nova.virt.libvirt import driver as libvirt_driver
from nova.virt.libvirt import imagecache as nova_imagecache
from nova.virt.libvirt import utils as libvirt_utils
from oslo_config import cfg
from oslo_log import log as logging
from oslo_utils import fileutils
from oslo_utils import uuidutils

import nova_imgtype.conf
from nova_imgtype import compat
from nova_imgtype import exception
from nova_imgtype import record as record_mod
from nova_imgtype.virt.libvirt import backends
from nova_imgtype.virt.libvirt import imagecache
from nova_imgtype.virt.libvirt import pools as pools_mod
from nova_imgtype.virt.libvirt import resolver as resolver_mod
from nova_imgtype.virt.libvirt import storage_rbd
from nova_imgtype.virt.libvirt.template_handlers import base as handlers
from nova_imgtype.virt.libvirt.template_handlers import volume_linking

LOG = logging.getLogger(__name__)
CONF: cfg.ConfigOpts = nova_imgtype.conf.CONF


class Images(libvirt_driver.LibvirtDriver):
    """Templates in the image cache, and snapshots."""

    def _image_disk_format(self, context: Any, instance: objects.Instance,
                           image_id: str) -> str | None:
        if image_id == instance.image_ref:
            meta = instance.image_meta
            return (meta.disk_format if meta.obj_attr_is_set('disk_format')
                    else None)
        return glance.API().get(context, image_id).get('disk_format')

    def _try_fetch_image_cache(self, *args: Any, **kwargs: Any) -> None:
        call = compat.driver('_try_fetch_image_cache', self, args, kwargs)
        if call['fetch_func'] is not libvirt_utils.fetch_image:
            # Kernel, ramdisk (fetch_raw_image), made-up templates
            # (ephemeral, swap) and a disk stock clones from Glance's copy
            # in its Ceph cluster (an rbd volume: RbdStorage.clone, with
            # stock's download as its fallback) stay stock's.
            return super()._try_fetch_image_cache(*args, **kwargs)
        context: Any = call['context']
        filename: str = call['filename']
        image_id: str = call['image_id']
        instance: objects.Instance = call['instance']
        if not imagecache.is_cache_fname_of(filename, image_id):
            # A name read from a disk (a live block migration's backing
            # file): the image goes under its own name or nowhere, never
            # under another image's.
            raise nova_exception.InvalidDiskInfo(reason=_(
                'template name %(name)s is not a cache name of image '
                '%(image)s') % {'name': filename, 'image': image_id})
        decision = self._resolver.decision_for(instance)
        native: str | None = None
        if decision.native_formats:
            if imagecache.is_native_cache_fname(filename, image_id):
                # A backing file name read from a disk: already native.
                disk_format: str | None = filename.rsplit('_', 1)[1]
            elif filename == nova_imagecache.get_cache_fname(image_id):
                disk_format = self._image_disk_format(
                    context, instance, image_id)
            else:
                disk_format = None
            if decision.is_native(disk_format):
                filename, native = imagecache.template_name(
                    decision.native_formats, image_id, disk_format)
        self._follow_recorded_template(instance, image_id, filename)
        handler = self._handler_for(type(call['image']), filename, image_id)

        def fetch_template(context: Any, target: str, image_id: str,
                           trusted_certs: Any = None) -> None:
            handler.fetch_image(context, image_id, target, native,
                                trusted_certs)

        args, kwargs = call.replaced(fetch_func=fetch_template,
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

    @staticmethod
    def _follow_recorded_template(instance: objects.Instance, image_id: str,
                                  filename: str) -> None:
        """Record the template of the instance's root disk, or refuse a
        name other than the one recorded for the same image.

        The name a live block migration's destination is handed comes from
        the source's disk (its backing file); the one recorded comes from
        the host that made the disk. A rescue image, or a rebuild's new
        image, is not the root disk's recorded template: nothing to check,
        and only the instance's own image is recorded.
        """
        recorded = record_mod.template(instance.system_metadata)
        if recorded is not None and recorded[0] == image_id:
            if recorded[1] != filename:
                raise nova_exception.InvalidDiskInfo(reason=_(
                    'template %(name)s of image %(image)s is not the one '
                    'the instance\'s root disk was made from, %(recorded)s') %
                    {'name': filename, 'image': image_id,
                     'recorded': recorded[1]})
            return
        if image_id == instance.image_ref:
            # Saved with the instance by the step that made the disk (the
            # compute manager's save after spawn, finish_migration or
            # pre_live_migration), before any later move reads it.
            record_mod.set_template(instance, image_id, filename)

    def _get_guest_xml(self, *args: Any, **kwargs: Any) -> Any:
        """Stock's guest XML, once the linked template the instance's
        qcow2 root disk reads through is checked again."""
        self._check_linked_root_template(
            compat.driver('_get_guest_xml', self, args, kwargs)['instance'])
        return super()._get_guest_xml(*args, **kwargs)

    def _check_linked_root_template(self,
                                    instance: objects.Instance) -> None:
        """Before QEMU opens the instance's disks (each start, reboot,
        rescue, arrival of a cold move): its recorded root template, when it
        is a qcow2 disk's backing linked to an image volume, still is what
        was accepted (:func:`.volume_linking.checked`).

        The volume's owner can rewrite it while the link stays; QEMU reads
        the backing file's own header at each open, so a qcow2 template
        given a backing file would be followed. A raw template is opened as
        raw (the overlay names its format), and a copied disk has no
        backing: neither needs it.

        :raises LinkedTemplateChanged: the guest is not started.
        """
        recorded = record_mod.template(instance.system_metadata)
        if recorded is None:
            return
        decision = self._resolver.decision_for(instance)
        if decision.volume_format('disk') != 'qcow2':
            return
        base = os.path.join(CONF.instances_path,
                            CONF.image_cache.subdirectory_name, recorded[1])
        if not os.path.islink(base):
            return
        state = volume_linking.linked_state(base)
        if state is not None and state.get('format') == 'raw':
            # Opened as raw whatever it holds now: nothing to read again
            # at each start.
            return

        @utils.synchronized(recorded[1], external=True,
                            lock_path=os.path.join(CONF.instances_path,
                                                   'locks'))
        def check() -> None:
            volume_linking.checked(base)

        check()

    def cache_image(self, *args: Any, **kwargs: Any) -> bool:
        """Pre-cache the template a new instance of the image would use.

        Stock caches the converted ``_base/<sha1>`` with ``fetch_to_raw``;
        here the image is cached as this host's resolver decides for its
        disk_format (in its own format where the mapping keeps it), through
        the template handler, under the lock a build takes for it.

        :returns: True when the template was fetched, False when it was
            already cached (its timestamp updated, as stock does).
        """
        call = compat.driver('cache_image', self, args, kwargs)
        context: Any = call['context']
        image_id: str = call['image_id']
        disk_format = images.IMAGE_API.get(context, image_id).get(
            'disk_format')
        decision = self._resolver.decide(disk_format)
        filename, native = imagecache.template_name(
            decision.native_formats, image_id, disk_format)
        cache_dir = os.path.join(CONF.instances_path,
                                 CONF.image_cache.subdirectory_name)
        path = os.path.join(cache_dir, filename)
        if os.path.exists(path):
            LOG.info('Image %(image_id)s already cached as %(path)s; '
                     'updating timestamp', {'image_id': image_id,
                                            'path': path})
            nova.privsep.path.utime(path)
            return False
        fileutils.ensure_tree(cache_dir)
        handler = self._handler_for(
            self.image_backend.class_for(decision), filename, image_id)
        LOG.info('Caching image %(image_id)s by request as %(path)s',
                 {'image_id': image_id, 'path': path})

        @utils.synchronized(filename, external=True,
                            lock_path=os.path.join(CONF.instances_path,
                                                   'locks'))
        def fetch() -> None:
            if not os.path.exists(path):
                handler.fetch_image(context, image_id, path, native)

        fetch()
        return True

    def _handler_for(self, backend: type, filename: str,
                     image_id: str) -> handlers.BaseTemplateImageHandler:
        """The template handler for a disk of the backend class ``backend``.

        A backend that would copy a linked template as a link (making the
        image volume the instance's disk) gets downloaded templates; one
        already linked under the same name is refused rather than aliased.
        """
        handler = self._template_handler
        if not handler.links_templates or backends.accepts_linked_templates(
                backend):
            return handler
        base = os.path.join(CONF.instances_path,
                            CONF.image_cache.subdirectory_name, filename)
        if os.path.islink(base):
            raise exception.LinkedTemplateUnsafe(
                template=base, backend=backend.__name__)
        LOG.info('Backend %(backend)s copies templates as files, a link as '
                 'a link: image %(image)s is downloaded, not linked',
                 {'backend': backend.__name__, 'image': image_id})
        return self._downloading_handler

    def manage_image_cache(self, *args: Any, **kwargs: Any) -> None:
        """Stock's image cache pass, then the templates of rbd pools that
        nothing uses any more (:func:`storage_rbd.remove_unused_templates`,
        with ``[image_cache]``'s rules)."""
        super().manage_image_cache(*args, **kwargs)
        if not CONF.image_cache.remove_unused_base_images:
            return
        base_dir = os.path.join(CONF.instances_path,
                                CONF.image_cache.subdirectory_name)
        for spec in pools_mod.host_specs(CONF,
                                         self._resolver.pool_backends()):
            if spec.type != 'rbd':
                continue
            try:
                storage_rbd.remove_unused_templates(
                    self._pools, self._pools.get(spec.name), base_dir,
                    CONF.image_cache.remove_unused_original_minimum_age_seconds)
            except Exception as e:  # noqa: BLE001 - the next pass retries
                LOG.error('Could not remove unused templates of storage pool '
                          '%(pool)s: %(e)s', {'pool': spec.name, 'e': e})

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
