"""Templates in this host's image cache.

:class:`TemplateCache` decides what stock's image cache step fetches for
an instance's disk, and how: the template's name (the image's own format
where the instance keeps it, ``<sha1>_<format>``, else stock's
``<sha1>``), the template handler that fetches it (``[image_cache]
template_image_handler``, or downloading for a backend that would copy a
link as a link), and the root disk's template recorded, or a name other
than the recorded one refused. It pre-caches an image as a build would,
checks a linked template again before QEMU opens a disk reading through
it and around each snapshot that reads one, and removes the rbd pools'
templates nothing uses any more.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import nova.privsep.path
from nova import exception as nova_exception
from nova import objects
from nova import utils
from nova.compute import task_states
from nova.compute import utils as compute_utils
from nova.i18n import _
from nova.image import glance
from nova.virt import images
from nova.virt.libvirt import imagecache as nova_imagecache
from nova.virt.libvirt import utils as libvirt_utils
from oslo_concurrency import processutils
from oslo_config import cfg
from oslo_log import log as logging
from oslo_utils import fileutils

from nova_imgtype import exception
from nova_imgtype import record as record_mod
from nova_imgtype.stock import driver_steps
from nova_imgtype.virt.libvirt import backends
from nova_imgtype.virt.libvirt import imagecache
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import pools as pools_mod
from nova_imgtype.virt.libvirt import resolver as resolver_mod
from nova_imgtype.virt.libvirt import storage_rbd
from nova_imgtype.virt.libvirt.template_handlers import base as handlers
from nova_imgtype.virt.libvirt.template_handlers import volume_linking

LOG = logging.getLogger(__name__)

FetchFunc = Callable[..., None]


class TemplateCache:
    """This host's image cache, as the plugin fills and empties it.

    :param resolver: the instances' records and this host's decisions.
    :param image_backend: the per-instance backend factory.
    :param pools: this host's pools (``pools`` may be replaced).
    :param handler: the configured template image handler.
    :param downloading: the downloading handler.
    :param conf: the configuration nova-compute runs with.
    :param stock: stock's steps of the driver (the rebase onto a native
        template fetches it and rebases with them).
    """

    def __init__(self, resolver: resolver_mod.BackendResolver,
                 image_backend: Any, pools: pools_mod.StoragePools,
                 handler: handlers.BaseTemplateImageHandler,
                 downloading: handlers.BaseTemplateImageHandler,
                 conf: cfg.ConfigOpts,
                 stock: driver_steps.StockSteps | None = None) -> None:
        self._resolver = resolver
        self._image_backend = image_backend
        self.pools = pools
        self.handler = handler
        self._downloading = downloading
        self._conf = conf
        self._stock = stock

    @property
    def cache_dir(self) -> str:
        return os.path.join(self._conf.instances_path,
                            self._conf.image_cache.subdirectory_name)

    def fetch_plan(self, backend: type, context: Any, filename: str,
                   image_id: str, instance: objects.Instance
                   ) -> tuple[FetchFunc, str]:
        """What stock's image cache step fetches for a disk of the image
        ``image_id`` it would cache as ``filename``: the fetch function
        and the template's name.

        :raises InvalidDiskInfo: ``filename`` is not a cache name of the
            image, or not the template recorded for the root disk.
        """
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
        handler = self.handler_for(backend, filename, image_id)

        def fetch_template(context: Any, target: str, image_id: str,
                           trusted_certs: Any = None) -> None:
            handler.fetch_image(context, image_id, target, native,
                                trusted_certs)

        return fetch_template, filename

    def rebase_onto_native(self, context: Any, instance: objects.Instance,
                           backend: Any) -> bool:
        """Stock's rebase of a qcow2 disk spawned from a snapshot (an
        unshelve, a cross-cell resize) onto the template of the original
        image, onto the template this host keeps for that image: its native
        file (``<sha1>_qcow2``) when the instance keeps the image natively,
        where stock looks for ``<sha1>``, which is not there.

        The template is fetched as every template is (the driver's
        ``_try_fetch_image_cache``), then stock's rebase runs on it. False
        (nothing done) for stock's case: an original image the image
        service no longer has, or one the instance does not keep natively.
        """
        stock = self._stock
        if stock is None:
            return False
        decision = self._resolver.decision_for(instance)
        base_ref = instance.system_metadata.get('image_base_image_ref')
        if (not decision.native_formats or not base_ref or
                not stock.needs_rebase_original_qcow2_image(instance,
                                                            backend)):
            return False
        try:
            disk_format = glance.API().get(context, base_ref).get(
                'disk_format')
        except nova_exception.ImageNotFound:
            return False
        name, native = imagecache.template_name(decision.native_formats,
                                                base_ref, disk_format)
        if native is None:
            return False
        stock.try_fetch_image_cache(
            backend, libvirt_utils.fetch_image, context,
            nova_imagecache.get_cache_fname(base_ref), base_ref, instance,
            None)
        LOG.info('Rebasing disk image onto %s.', name, instance=instance)
        path = os.path.join(self.cache_dir, name)
        if os.path.islink(path):
            self._rebase_onto_link(path, backend.path)
        else:
            stock.rebase_with_qemu_img(backend.path, path)
        return True

    @staticmethod
    def _image_disk_format(context: Any, instance: objects.Instance,
                           image_id: str) -> str | None:
        if image_id == instance.image_ref:
            meta = instance.image_meta
            return (meta.disk_format if meta.obj_attr_is_set('disk_format')
                    else None)
        return glance.API().get(context, image_id).get('disk_format')

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

    def _root_templates(self, instance: objects.Instance) -> list[str]:
        """The linked templates the instance's root disk reads through (a
        qcow2 disk's backing): the recorded one or, for an instance
        recorded before templates were, every cache name a build of its
        image uses here (stock's ``<sha1>``, its record's native ones).
        None is read from the disk, whose header its guest can write."""
        decision = self._resolver.decision_for(instance)
        if decision.volume_format('disk') != 'qcow2':
            return []       # a copy of its template (or none): not read
        recorded = record_mod.template(instance.system_metadata)
        if recorded is not None:
            names = [recorded[1]]
        elif instance.image_ref:
            names = [nova_imagecache.get_cache_fname(instance.image_ref)]
            names += [imagecache.native_cache_fname(instance.image_ref, fmt)
                      for fmt in decision.native_formats if fmt != 'raw']
        else:
            return []       # booted from a volume
        paths = [os.path.join(self.cache_dir, name) for name in names]
        return [path for path in paths if os.path.islink(path)]

    def _check_linked(self, path: str) -> str:
        """The linked template ``path`` checked again as accepted
        (:func:`.volume_linking.checked`), under stock's lock of it (the
        one the image cache manager holds to remove it); its format.

        :raises LinkedTemplateChanged: naming the image and what changed.
        """
        @utils.synchronized(os.path.basename(path), external=True,
                            lock_path=os.path.join(self._conf.instances_path,
                                                   'locks'))
        def check() -> str:
            return volume_linking.checked(path)[0]

        fmt: str = check()
        return fmt

    def check_linked_root_template(self, instance: objects.Instance) -> None:
        """Before QEMU opens the instance's disks (each start, reboot,
        rescue, arrival of a cold or live move): the linked template its
        qcow2 root disk reads through (:meth:`_root_templates`) still is
        what was accepted.

        The volume's owner can rewrite it while the link stays; QEMU reads
        the backing file's own header at each open, so a qcow2 template
        given a backing file would be followed. A raw template is opened as
        raw (the overlay names its format), and a copied disk has no
        backing: neither needs it.

        :raises LinkedTemplateChanged: the guest is not started.
        """
        for path in self._root_templates(instance):
            state = volume_linking.linked_state(path)
            if state is not None and state.get('format') == 'raw':
                # Opened as raw whatever it holds now: nothing to read
                # again at each start.
                continue
            self._check_linked(path)

    def checked_snapshot(self, instance: objects.Instance,
                         update_task_state: Callable[..., Any]
                         ) -> Callable[..., Any]:
        """Before a snapshot (or shelve) reads the instance's root disk,
        the linked templates it reads through are checked again as
        accepted, whatever their format (stock's live snapshot probes the
        template's format for its delta); and again once the disk is
        copied, before it is uploaded: the returned ``update_task_state``
        checks them at each move to ``image_uploading``, which every
        snapshot (stock's, :class:`.PoolSnapshots`) makes between its copy
        and its upload. A refused copy is never uploaded (stock's snapshot
        and ours remove it), and the disk is untouched.

        :raises LinkedTemplateChanged: naming the image and what changed.
        """
        paths = self._root_templates(instance)
        for path in paths:
            self._check_linked(path)
        if not paths:
            return update_task_state

        def checked_update(*args: Any, **kwargs: Any) -> Any:
            state = kwargs.get('task_state', args[0] if args else None)
            if state == task_states.IMAGE_UPLOADING:
                for path in paths:
                    self._check_linked(path)
            return update_task_state(*args, **kwargs)

        return checked_update

    def _rebase_onto_link(self, path: str, disk_path: str) -> None:
        """Stock's rebase of ``disk_path`` onto the linked template
        ``path``, its backing format the one the template was accepted in,
        checked again first; stock's probes the template for it."""
        fmt = self._check_linked(path)
        with compute_utils.disk_ops_semaphore:
            processutils.execute('qemu-img', 'rebase', '-f', 'qcow2',
                                 '-b', path, '-F', fmt, disk_path)

    def cache(self, context: Any, image_id: str) -> bool:
        """Pre-cache the template a new instance of the image would use,
        as this host's resolver decides for its disk_format (in its own
        format where the mapping keeps it), through the template handler,
        under the lock a build takes for it.

        :returns: True when the template was fetched, False when it was
            already cached (its timestamp updated, as stock does).
        """
        disk_format = images.IMAGE_API.get(context, image_id).get(
            'disk_format')
        decision = self._resolver.decide(disk_format)
        filename, native = imagecache.template_name(
            decision.native_formats, image_id, disk_format)
        path = os.path.join(self.cache_dir, filename)
        if os.path.exists(path):
            if os.path.islink(path):
                # Reported as cached, it must be usable as accepted.
                self._check_linked(path)
            LOG.info('Image %(image_id)s already cached as %(path)s; '
                     'updating timestamp', {'image_id': image_id,
                                            'path': path})
            nova.privsep.path.utime(path)
            return False
        fileutils.ensure_tree(self.cache_dir)
        handler = self.handler_for(
            self._image_backend.class_for(decision), filename, image_id)
        LOG.info('Caching image %(image_id)s by request as %(path)s',
                 {'image_id': image_id, 'path': path})

        @utils.synchronized(filename, external=True,
                            lock_path=os.path.join(self._conf.instances_path,
                                                   'locks'))
        def fetch() -> None:
            if not os.path.exists(path):
                handler.fetch_image(context, image_id, path, native)

        fetch()
        return True

    def handler_for(self, backend: type, filename: str,
                    image_id: str) -> handlers.BaseTemplateImageHandler:
        """The template handler for a disk of the backend class ``backend``.

        A backend that would copy a linked template as a link (making the
        image volume the instance's disk) gets downloaded templates; one
        already linked under the same name is refused rather than aliased.
        """
        handler = self.handler
        if not handler.links_templates or backends.accepts_linked_templates(
                backend):
            return handler
        base = os.path.join(self.cache_dir, filename)
        if os.path.islink(base):
            raise exception.LinkedTemplateUnsafe(
                template=base, backend=backend.__name__)
        LOG.info('Backend %(backend)s copies templates as files, a link as '
                 'a link: image %(image)s is downloaded, not linked',
                 {'backend': backend.__name__, 'image': image_id})
        return self._downloading

    def remove_unused_rbd_templates(self) -> None:
        """The templates of this host's rbd pools that nothing uses any
        more (:func:`storage_rbd.remove_unused_templates`, with
        ``[image_cache]``'s rules)."""
        cache = self._conf.image_cache
        if not cache.remove_unused_base_images:
            return
        for spec in pool_specs.host_specs(self._conf,
                                          self._resolver.pool_backends()):
            if spec.type != 'rbd':
                continue
            try:
                storage_rbd.remove_unused_templates(
                    self.pools, self.pools.get(spec.name), self.cache_dir,
                    cache.remove_unused_original_minimum_age_seconds)
            except Exception as e:  # noqa: BLE001 - the next pass retries
                LOG.error('Could not remove unused templates of storage pool '
                          '%(pool)s: %(e)s', {'pool': spec.name, 'e': e})
