"""Stock Nova's libvirt driver with per-instance image backends.

Enabled in a stock Nova with ``compute_driver = imgtype.LibvirtDriver``.

A request flows driver -> resolver -> backend: the driver asks the
:class:`~nova_imgtype.virt.libvirt.resolver.BackendResolver` which backend an
instance is on, and builds its disks through the per-instance
:class:`~nova_imgtype.virt.libvirt.imagebackend.Backend`. The overrides below
are the places where stock Nova reads the host-wide ``[libvirt]images_type``
for something that belongs to one instance.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any

import nova.privsep.path
from nova import context as nova_context
from nova import exception as nova_exception
from nova import objects
from nova import utils
from nova.compute import task_states
from nova.compute import vm_states
from nova.i18n import _
from nova.image import glance
from nova.scheduler.client import report
from nova.storage import rbd_utils
from nova.virt import driver as virt_driver
from nova.virt import images
from nova.virt.libvirt import driver as libvirt_driver
from nova.virt.libvirt import imagecache as nova_imagecache
from nova.virt.libvirt import utils as libvirt_utils
from oslo_config import cfg
from oslo_log import log as logging
from oslo_serialization import jsonutils
from oslo_utils import excutils
from oslo_utils import fileutils
from oslo_utils import uuidutils

import nova_imgtype.conf
from nova_imgtype import exception
from nova_imgtype import traits
from nova_imgtype.virt.libvirt import backends
from nova_imgtype.virt.libvirt import imagebackend
from nova_imgtype.virt.libvirt import imagecache
from nova_imgtype.virt.libvirt import live_migration
from nova_imgtype.virt.libvirt import mapping as mapping_mod
from nova_imgtype.virt.libvirt import pools as pools_mod
from nova_imgtype.virt.libvirt import resolver as resolver_mod
from nova_imgtype.virt.libvirt import template_handlers
from nova_imgtype.virt.libvirt.template_handlers import base as handlers

LOG = logging.getLogger(__name__)

#: The image the instance's disks were last made from: what a refused
#: rebuild puts back (the API has already replaced ``image_ref``).
SYSMETA_IMAGE = 'imgtype_image_ref'
CONF: cfg.ConfigOpts = nova_imgtype.conf.CONF


#: Legacy instance disk files that move into nova-disks-pool.
_MOVABLE_DISK = re.compile(r'^disk(\.local|\.swap|\.eph\d+)?$')


class LibvirtDriver(libvirt_driver.LibvirtDriver):
    """Libvirt driver whose image backend is a property of the instance."""

    def __init__(self, virtapi: Any, read_only: bool = False) -> None:
        super().__init__(virtapi, read_only)
        self._resolver = resolver_mod.BackendResolver(CONF)
        try:
            mapping = self._resolver.mapping
        except (cfg.ConfigFileValueError, ValueError) as e:
            LOG.error('Refusing to start: %s', e)
            raise
        try:
            self._template_handler = template_handlers.load(
                CONF.image_cache.template_image_handler)
        except (exception.UnknownTemplateImageHandler,
                exception.TemplateImageHandlerLoadFailed) as e:
            LOG.error('Refusing to start: %s', e)
            raise
        # For backends that cannot take linked templates (_handler_for).
        self._downloading_handler = template_handlers.load('downloading')
        self._pools = pools_mod.StoragePools(self._storage_connection)
        self.image_backend = imagebackend.Backend(
            CONF.use_cow_images, self._resolver, CONF, pools=self._pools)
        self.image_cache_manager = imagecache.ImageCacheManager(
            self._pool_backing_paths, self._template_handler)
        self._update_image_type_capabilities()
        if mapping:
            LOG.info('Image backends per image format: %s; other formats '
                     'use images_type=%s', mapping,
                     self._resolver.default_backend())

    # -- host ---------------------------------------------------------------

    def _update_image_type_capabilities(self) -> None:
        """Report image-format capabilities that follow the mapping, and
        decide our custom traits, from the config nova-compute started
        with (as stock's capabilities are)."""
        supported = self._resolver.supported_formats()
        for fmt in mapping_mod.SOURCE_FORMATS:
            key = 'supports_image_type_%s' % fmt
            if key in virt_driver.CAPABILITY_TRAITS_MAP:
                self.capabilities[key] = fmt in supported
        excluded = set(CONF.compute.image_type_exclude_list)
        self._custom_traits = frozenset(
            {traits.backend_trait(b) for b in self.served_backends()} |
            {traits.native_trait(f) for f in self._resolver.native_formats()
             if f not in excluded})

    def init_host(self, host: str) -> None:
        # Raises InvalidImagesTypeMapping naming the entry: nova-compute
        # does not start with a mapping this host cannot serve.
        try:
            self._resolver.check_host()
        except nova_exception.Invalid as e:
            LOG.error('Refusing to start: %s', e)
            raise
        super().init_host(host)
        self._template_handler.init(os.path.join(
            CONF.instances_path, CONF.image_cache.subdirectory_name))
        if CONF.libvirt.use_storage_pools:
            # Found again when they exist; a conflicting definition is an
            # error that stops nova-compute, never a silent redefinition.
            for spec in pools_mod.host_specs(
                    CONF, self._resolver.pool_backends()):
                self._pools.ensure(spec)
            self._log_legacy_instances(host)

    def _log_legacy_instances(self, host: str) -> None:
        context = nova_context.get_admin_context()
        instances = list(objects.InstanceList.get_by_host(
            context, host, expected_attrs=['system_metadata']))
        self._finish_interrupted_moves(instances)
        legacy = [inst.uuid for inst in instances
                  if self._can_move_to_pools(inst)]
        if legacy:
            LOG.warning('%d instance(s) on this host still use legacy image '
                        'files; they move into the storage pools on their '
                        'next hard reboot, resize, cold migration or '
                        'unshelve: %s', len(legacy), ', '.join(legacy))
        else:
            LOG.info('No instance on this host uses legacy image files')

    def served_backends(self) -> list[str]:
        """Every registered backend this host can serve."""
        return [name for name in backends.names()
                if backends.host_support_error(name, CONF) is None]

    def update_provider_tree(self, provider_tree: Any, nodename: str,
                             allocations: Any = None) -> None:
        super().update_provider_tree(provider_tree, nodename,
                                     allocations=allocations)
        # COMPUTE_IMAGE_TYPE_* follow self.capabilities (the resource
        # tracker adds and removes them); our custom ones are set here,
        # stale ones (after a config change) removed.
        wanted = set(self._custom_traits)
        stale = {t for t in provider_tree.data(nodename).traits
                 if traits.ours(t, traits.BACKEND_PREFIX) or
                 traits.ours(t, traits.NATIVE_PREFIX)} - wanted
        if stale:
            provider_tree.remove_traits(nodename, *stale)
        provider_tree.add_traits(nodename, *wanted)

    # -- instance lifecycle ---------------------------------------------------

    def spawn(self, context: Any, instance: objects.Instance,
              image_meta: objects.ImageMeta, injected_files: Any,
              admin_password: Any, allocations: Any, network_info: Any = None,
              block_device_info: Any = None, power_on: bool = True,
              accel_info: Any = None) -> None:
        # A build (the first host's, or a reschedule's) decides on this
        # host; a rebuild, evacuation or unshelve keeps the record.
        if (self._resolver.recorded(instance) is None or
                instance.vm_state == vm_states.BUILDING):
            booted_from_volume = self._is_booted_from_volume(
                block_device_info)
            disk_format = (None if booted_from_volume
                           else image_meta.obj_attr_is_set('disk_format') and
                           image_meta.disk_format or None)
            decision = self._resolver.decide(disk_format)
            self._resolver.record(instance, decision)
            instance.system_metadata[SYSMETA_IMAGE] = instance.image_ref
            instance.save()
            LOG.info('Image backend %(backend)s chosen for disk_format '
                     '%(fmt)s (native formats: %(native)s)',
                     {'backend': decision.backend, 'fmt': disk_format,
                      'native': ','.join(decision.native_formats) or '-'},
                     instance=instance)
        else:
            # Rebuild, evacuate, unshelve: the recorded backend stays.
            if instance.vm_state == vm_states.SHELVED_OFFLOADED:
                self._restore_storage_on_unshelve(instance)
            self._resolver.ensure_served(instance, CONF.host)
            self._use_this_hosts_pool(instance)
            # Saved by the compute manager once the disks are made.
            instance.system_metadata[SYSMETA_IMAGE] = instance.image_ref
        super().spawn(context, instance, image_meta, injected_files,
                      admin_password, allocations, network_info=network_info,
                      block_device_info=block_device_info, power_on=power_on,
                      accel_info=accel_info)

    def rebuild(self, context: Any, instance: objects.Instance,
                image_meta: Any, injected_files: Any, admin_password: Any,
                allocations: Any, bdms: Any, detach_block_devices: Any,
                attach_block_devices: Any, network_info: Any = None,
                evacuate: bool = False, block_device_info: Any = None,
                preserve_ephemeral: bool = False, accel_uuids: Any = None,
                reimage_boot_volume: bool = False) -> None:
        """Refuse a rebuild to an image this host cannot use, before the
        old disk is touched; otherwise stock's rebuild (destroy, spawn).

        Nova schedules no rebuild through request filters, so this is where
        an image of a format the host does not support (by its traits) is
        stopped. The instance stays as it was, with a fault naming the
        format.
        """
        disk_format = (image_meta.disk_format
                       if image_meta.obj_attr_is_set('disk_format') else None)
        # (reimage_boot_volume comes True from newer API microversions
        # whatever the root disk is: the root disk decides.)
        if disk_format and not self._is_booted_from_volume(
                block_device_info):
            supported = self._resolver.supported_formats() - set(
                CONF.compute.image_type_exclude_list)
            if disk_format not in supported:
                self._put_back_image(context, instance)
                raise nova_exception.InstanceFaultRollback(
                    nova_exception.ImageUnacceptable(
                        image_id=image_meta.id if image_meta.obj_attr_is_set(
                            'id') else '',
                        reason=_('host %(host)s cannot use disk_format '
                                 '%(fmt)s (it can use: %(ok)s)') % {
                            'host': CONF.host, 'fmt': disk_format,
                            'ok': ', '.join(sorted(supported))}))
        raise NotImplementedError()

    def _put_back_image(self, context: Any,
                        instance: objects.Instance) -> None:
        """Give a refused rebuild its image back.

        The API saved the new image (``image_ref``, the ``image_*`` system
        metadata) before the rebuild reached this host; stock's conductor
        puts them back only on its own NoValidHost. Left so, every later
        move would be scheduled for the refused image's format.
        """
        orig = instance.system_metadata.get(SYSMETA_IMAGE)
        if not orig or orig == instance.image_ref:
            return
        try:
            image = self._image_api.get(context, orig)
        except nova_exception.ImageNotFound:
            LOG.warning('Image %s of the refused rebuild is gone: only the '
                        'image_ref is put back', orig, instance=instance)
        else:
            for key in [k for k in instance.system_metadata
                        if k.startswith(utils.SM_IMAGE_PROP_PREFIX)]:
                del instance.system_metadata[key]
            instance.system_metadata.update(
                utils.get_system_metadata_from_image(image, instance.flavor))
            instance.system_metadata['image_base_image_ref'] = orig
        instance.image_ref = orig
        instance.save()

    def _pools_here(self, decision: resolver_mod.BackendDecision
                    ) -> resolver_mod.BackendDecision:
        """``decision`` on this host's pools: its recorded pool where this
        host has it (the record outlives a change of images_type), this
        host's pool of the backend otherwise (a pool of another name on the
        host the instance comes from)."""
        if decision.storage == resolver_mod.POOLS:
            try:
                self._pools.get(decision.pool)
                return decision
            except exception.PoolNotFound:
                pass
        return self._resolver.with_storage(decision, resolver_mod.POOLS)

    def _use_this_hosts_pool(self, instance: objects.Instance) -> None:
        """A pool instance rebuilt here (an evacuation) uses this host's
        pool; the compute manager saves the record with the rebuilt
        instance."""
        decision = self._resolver.decision_for(instance)
        if decision.storage != resolver_mod.POOLS:
            return
        here = self._pools_here(decision)
        if here != decision:
            LOG.info('Disks in storage pool %(here)s of this host (were in '
                     '%(was)s)', {'here': here.pool, 'was': decision.pool},
                     instance=instance)
            self._resolver.record(instance, here)

    def _restore_storage_on_unshelve(self,
                                     instance: objects.Instance) -> None:
        """Unshelve makes the disks anew: they go where this host keeps
        new disks of the instance's backend (a legacy instance moves into
        the pools, a pool instance on a host without pools gets files)."""
        decision = self._resolver.decision_for(instance)
        storage = self._resolver.storage_for(decision.backend)
        new = self._resolver.with_storage(decision, storage)
        if new == decision:
            return
        self._resolver.record(instance, new)
        instance.save()
        LOG.info('Unshelved disks of backend %(backend)s are made as '
                 '%(storage)s storage (were %(was)s)',
                 {'backend': decision.backend, 'storage': storage,
                  'was': decision.storage}, instance=instance)

    def _image_disk_format(self, context: Any, instance: objects.Instance,
                           image_id: str) -> str | None:
        if image_id == instance.image_ref:
            meta = instance.image_meta
            return (meta.disk_format if meta.obj_attr_is_set('disk_format')
                    else None)
        return glance.API().get(context, image_id).get('disk_format')

    def _try_fetch_image_cache(self, image: Any, fetch_func: Any,
                               context: Any, filename: str, image_id: str,
                               instance: objects.Instance, size: Any,
                               fallback_from_host: Any = None) -> None:
        if fetch_func is not libvirt_utils.fetch_image:
            # Kernel, ramdisk (fetch_raw_image) and made-up templates
            # (ephemeral, swap) stay stock's.
            return super()._try_fetch_image_cache(
                image, fetch_func, context, filename, image_id, instance,
                size, fallback_from_host=fallback_from_host)
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
        handler = self._handler_for(type(image), filename, image_id)

        def fetch_template(context: Any, target: str, image_id: str,
                           trusted_certs: Any = None) -> None:
            handler.fetch_image(context, image_id, target, native,
                                trusted_certs)

        super()._try_fetch_image_cache(
            image, fetch_template, context, filename, image_id, instance,
            size, fallback_from_host=fallback_from_host)

    def cache_image(self, context: Any, image_id: str) -> bool:
        """Pre-cache the template a new instance of the image would use.

        Stock caches the converted ``_base/<sha1>`` with ``fetch_to_raw``;
        here the image is cached as this host's resolver decides for its
        disk_format (in its own format where the mapping keeps it), through
        the template handler, under the lock a build takes for it.

        :returns: True when the template was fetched, False when it was
            already cached (its timestamp updated, as stock does).
        """
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

    def _cleanup(self, context: Any, instance: objects.Instance,
                 network_info: Any, block_device_info: Any = None,
                 destroy_vifs: bool = True, cleanup_instance_dir: bool = False,
                 cleanup_instance_disks: bool = False,
                 destroy_secrets: bool = True) -> None:
        decision = self._resolver.decision_for(instance)
        failed: Exception | None = None
        if (cleanup_instance_disks and
                decision.storage != resolver_mod.POOLS and
                decision.backend != CONF.libvirt.images_type and
                decision.backend in ('lvm', 'rbd')):
            # Stock removes lvm and rbd disks only when the *host* is on
            # lvm or rbd; an instance on one of those by the mapping needs
            # it too, while its domain is still defined (encrypted lvm
            # disks are found through it), as stock does.
            try:
                if decision.backend == 'lvm':
                    self._cleanup_lvm(instance, block_device_info)
                else:
                    self._cleanup_rbd(instance)
            except Exception as e:  # noqa: BLE001 - raised after stock's
                LOG.error('Failed to remove the %(backend)s disks: %(e)s',
                          {'backend': decision.backend, 'e': e},
                          instance=instance)
                failed = e
        # Stock's cleanup always runs (VIFs, volume connections, the
        # instance directory, the domain), whatever our storage says.
        with self.image_backend.scope(instance):
            super()._cleanup(
                context, instance, network_info,
                block_device_info=block_device_info,
                destroy_vifs=destroy_vifs,
                cleanup_instance_dir=cleanup_instance_dir,
                cleanup_instance_disks=cleanup_instance_disks,
                destroy_secrets=destroy_secrets)
        if cleanup_instance_disks and decision.storage == resolver_mod.POOLS:
            # The domain is gone: nothing uses the volumes any more.
            self._delete_pool_volumes(instance)
        if failed is not None:
            raise failed

    def _storage_connection(self) -> Any:
        """The libvirt connection that storage pools are managed on: the
        driver's own."""
        return self._host.get_connection()

    def _pool_backing_paths(self) -> set[str]:
        """Templates in use by volumes of the dir disks pools (none if
        there is no such pool).

        Any other state (an inactive pool, libvirt unreachable) raises, so
        the image cache manager removes nothing it cannot check.
        """
        paths: set[str] = set()
        names = {pools_mod.DISKS_POOL} | {
            spec.name for spec in pools_mod.host_specs(
                CONF, self._resolver.pool_backends())
            if spec.type == 'dir' and spec.name != pools_mod.BASE_POOL}
        for name in sorted(names):
            try:
                pool = self._pools.get(name)
            except exception.PoolNotFound:
                continue
            if pools_mod.pool_type(pool) == 'dir':
                paths |= self._pools.backing_paths(pool)
        return paths

    def _instance_pool(self, instance: objects.Instance) -> Any:
        """The started disks pool of a pool instance."""
        return self._pools.get(self._resolver.decision_for(instance).pool)

    def _delete_pool_volumes(self, instance: objects.Instance,
                             suffix: str = '') -> None:
        """Delete the instance's volumes (ending with ``suffix``)."""
        name = self._resolver.decision_for(instance).pool
        try:
            pool = self._pools.get(name)
        except exception.PoolNotFound:
            LOG.warning('Storage pool %s is gone: no volume of the instance '
                        'to delete', name, instance=instance)
            return
        for vol in list(self._pools.volumes(pool, instance.uuid + '_')):
            if vol.name().endswith(suffix):
                LOG.debug('Deleting volume %s', vol.name(),
                          instance=instance)
                vol.delete(0)

    # -- transition of legacy instances into pools ----------------------------

    def _can_move_to_pools(self, instance: objects.Instance) -> bool:
        decision = self._resolver.decision_for(instance)
        return (decision.storage == resolver_mod.LEGACY and
                decision.backend in self._resolver.pool_backends())

    def _move_to_pools(self, instance: objects.Instance) -> None:
        """Move a stopped legacy instance's disks into its pool.

        Files are renamed within one filesystem (instances_path), so the
        data stay as they are, overlays keep their absolute backing paths,
        and it costs nothing whatever the size; a failure puts back what was
        moved. lvm and rbd disks need no move: they have the pool's naming
        already, and the pool, once refreshed, lists them.
        """
        decision = self._resolver.decision_for(instance)
        pool_name = self._resolver.pool_for(decision.backend)
        pool = self._pools.get(pool_name)
        if pools_mod.pool_type(pool) != 'dir':
            pool.refresh(0)
            self._resolver.record(instance, self._resolver.with_storage(
                decision, resolver_mod.POOLS))
            instance.save()
            LOG.info('Disks now used through storage pool %s', pool_name,
                     instance=instance)
            return
        instance_dir = libvirt_utils.get_instance_path(instance)
        names = sorted(n for n in os.listdir(instance_dir)
                       if _MOVABLE_DISK.match(n))
        if not names:
            return
        fmt = images.qemu_img_info(
            os.path.join(instance_dir, names[0])).file_format
        backend = 'qcow2' if fmt == 'qcow2' else 'flat'
        moved = self._resolver.with_storage(
            dataclasses.replace(decision, backend=backend),
            resolver_mod.POOLS)
        # Recorded before any file moves: after a crash the record says
        # "pools" and the next start finishes the move
        # (_finish_interrupted_moves); a failure puts both back.
        self._resolver.record(instance, moved)
        instance.save()
        try:
            self._adopt_files(instance, pool, instance_dir, names)
        except Exception:
            with excutils.save_and_reraise_exception():
                self._resolver.record(instance, decision)
                instance.save()
        LOG.info('Moved disks %s into storage pool %s', ', '.join(names),
                 pool_name, instance=instance)

    @staticmethod
    def _adopt_files(instance: objects.Instance, pool: Any,
                     instance_dir: str, names: list[str]) -> None:
        """Rename the instance's disk files into the dir pool as its volumes
        (same filesystem: data and backing files unchanged, whatever the
        size). A file already moved is skipped, so a move interrupted by a
        crash can be finished; a failure puts back what this call moved.

        :raises VolumeExists: a volume of that name is there, its file too.
        """
        target_dir = pools_mod.pool_target(pool)
        moved: list[tuple[str, str]] = []
        try:
            for name in names:
                src = os.path.join(instance_dir, name)
                dest = os.path.join(target_dir, pools_mod.volume_name(
                    instance.uuid, name))
                if not os.path.exists(src):
                    continue
                if os.path.exists(dest):
                    raise exception.VolumeExists(
                        pool=pool.name(), volume=os.path.basename(dest))
                os.rename(src, dest)
                moved.append((src, dest))
            pool.refresh(0)
        except Exception:
            for src, dest in reversed(moved):
                os.rename(dest, src)
            raise

    def _finish_interrupted_moves(
            self, instances: list[objects.Instance]) -> None:
        """Finish the moves into a dir pool that a crash interrupted: the
        record says "pools" and disk files are still in the instance
        directory."""
        for inst in instances:
            decision = self._resolver.recorded(inst)
            if decision is None or decision.storage != resolver_mod.POOLS:
                continue
            instance_dir = libvirt_utils.get_instance_path(inst)
            names = sorted(n for n in os.listdir(instance_dir)
                           if _MOVABLE_DISK.match(n)) if os.path.isdir(
                instance_dir) else []
            if not names:
                continue
            try:
                pool = self._pools.get(decision.pool)
                if pools_mod.pool_type(pool) != 'dir':
                    continue
                self._adopt_files(inst, pool, instance_dir, names)
            except Exception as e:  # noqa: BLE001 - reported, start goes on
                LOG.error('Disks %(names)s of an interrupted move into '
                          'storage pool %(pool)s are still in %(dir)s: '
                          '%(e)s', {'names': ', '.join(names),
                                    'pool': decision.pool,
                                    'dir': instance_dir, 'e': e},
                          instance=inst)
                continue
            LOG.warning('Finished the interrupted move of disks %(names)s '
                        'into storage pool %(pool)s',
                        {'names': ', '.join(names), 'pool': decision.pool},
                        instance=inst)

    def _hard_reboot(self, context: Any, instance: objects.Instance,
                     network_info: Any, share_info: Any,
                     block_device_info: Any = None,
                     accel_info: Any = None) -> Any:
        if self._can_move_to_pools(instance) and \
                not self._is_booted_from_volume(block_device_info):
            # Stop the guest before its files move; stock's own destroy
            # that follows finds it stopped.
            self._destroy(instance)
            self._move_to_pools(instance)
        return super()._hard_reboot(
            context, instance, network_info, share_info,
            block_device_info=block_device_info, accel_info=accel_info)

    def unrescue(self, context: Any, instance: objects.Instance) -> None:
        super().unrescue(context, instance)
        if self._resolver.decision_for(instance).storage == \
                resolver_mod.POOLS:
            self._delete_pool_volumes(instance, suffix='.rescue')
        if (self._resolver.backend_for(instance) == 'rbd' and
                CONF.libvirt.images_type != 'rbd'):
            uuid = instance.uuid
            rbd_utils.RBDDriver().cleanup_volumes(
                lambda disk: (disk.startswith(uuid) and
                              disk.endswith('.rescue')))

    def _get_guest_config(self, instance: objects.Instance,
                          network_info: Any, image_meta: Any,
                          disk_info: Any, rescue: Any = None,
                          block_device_info: Any = None,
                          context: Any = None, mdevs: Any = None,
                          accel_info: Any = None, share_info: Any = None,
                          old_guest: Any = None) -> Any:
        guest = super()._get_guest_config(
            instance, network_info, image_meta, disk_info, rescue=rescue,
            block_device_info=block_device_info, context=context,
            mdevs=mdevs, accel_info=accel_info, share_info=share_info,
            old_guest=old_guest)
        if self._resolver.decision_for(instance).storage == \
                resolver_mod.POOLS:
            self._point_at_kernel_volumes(instance, guest)
        return guest

    def _point_at_kernel_volumes(self, instance: objects.Instance,
                                 guest: Any) -> None:
        """Stock writes ``<instance dir>/kernel[.rescue]`` (and ramdisk)
        into the guest; a pool instance's kernel and ramdisk are volumes of
        its dir pool."""
        for attr in ('os_kernel', 'os_initrd'):
            path = getattr(guest, attr, None)
            if not path or os.path.basename(path).split('.')[0] not in (
                    'kernel', 'ramdisk'):
                continue
            disk = self.image_backend.by_name(
                instance, os.path.basename(path), 'raw')
            if not disk.is_file_in_instance_path():
                setattr(guest, attr, disk.path)

    def _cleanup_resize(self, context: Any, instance: objects.Instance,
                        network_info: Any) -> None:
        with self.image_backend.scope(instance):
            super()._cleanup_resize(context, instance, network_info)

    def instance_on_disk(self, instance: objects.Instance) -> bool:
        with self.image_backend.scope(instance):
            return super().instance_on_disk(instance)

    # -- moves --------------------------------------------------------------

    def check_instance_shared_storage_local(self, context: Any,
                                            instance: objects.Instance
                                            ) -> Any:
        with self.image_backend.scope(instance):
            return super().check_instance_shared_storage_local(context,
                                                               instance)

    def check_can_live_migrate_destination(
            self, context: Any, instance: objects.Instance,
            src_compute_info: Any, dst_compute_info: Any,
            block_migration: bool = False,
            disk_over_commit: bool = False) -> Any:
        try:
            self._resolver.ensure_served(instance, CONF.host, arriving=True)
        except nova_exception.Invalid as e:
            raise nova_exception.MigrationPreCheckError(reason=str(e)) from e
        data = super().check_can_live_migrate_destination(
            context, instance, src_compute_info, dst_compute_info,
            block_migration=block_migration,
            disk_over_commit=disk_over_commit)
        # The source compares this with its instance's backend.
        data.image_type = self._resolver.backend_for(instance)
        return data

    def _is_shared_block_storage(self, instance: objects.Instance,
                                 dest_check_data: Any,
                                 block_device_info: Any = None) -> bool:
        with self.image_backend.scope(instance):
            if (dest_check_data.obj_attr_is_set('image_type') and
                    self._resolver.backend_for(instance) ==
                    dest_check_data.image_type and
                    self.image_backend.backend().is_shared_block_storage()):
                return True
            return super()._is_shared_block_storage(
                instance, dest_check_data,
                block_device_info=block_device_info)

    def _check_destination_serves(self, context: Any,
                                  instance: objects.Instance) -> bool:
        """Refuse a cold move to a host that can't serve the backend.

        Asked of placement before anything is touched: the destination
        node reports one ``CUSTOM_IMGTYPE_BACKEND_<NAME>`` trait per backend
        it can serve. A destination reporting none runs no nova-imgtype, and
        the move goes on as in stock Nova. A pool instance may move to a
        host without storage pools that serves its backend: its volumes
        become that backend's files there.

        :returns: False when the disks of a pool instance go to a host
            without storage pools (as files), True otherwise.
        """
        decision = self._resolver.recorded(instance)
        if decision is None or not instance.migration_context:
            return True
        migration = objects.Migration.get_by_id(
            context, instance.migration_context.migration_id)
        node = objects.ComputeNode.get_by_host_and_nodename(
            context, migration.dest_compute, migration.dest_node)
        node_traits = report.report_client_singleton().get_provider_traits(
            context, node.uuid).traits
        if not any(traits.ours(t, traits.BACKEND_PREFIX)
                   for t in node_traits):
            LOG.warning('Destination %s reports no image backends; it does '
                        'not run nova-imgtype and will treat this instance '
                        'as its images_type', migration.dest_compute,
                        instance=instance)
            return True
        if traits.backend_trait(decision.backend) not in node_traits:
            reason = _('destination host %(dest)s cannot serve image backend '
                       '%(backend)s of this instance') % {
                'dest': migration.dest_compute,
                'backend': decision.backend}
            raise nova_exception.InstanceFaultRollback(
                nova_exception.MigrationPreCheckError(reason=reason))
        return (decision.storage != resolver_mod.POOLS or
                traits.backend_trait(resolver_mod.STORAGE_BACKEND) in
                node_traits)

    def _refuse_on_pools(self, instance: objects.Instance,
                         operation: str) -> None:
        if self._resolver.decision_for(instance).storage == \
                resolver_mod.POOLS:
            raise exception.NotSupportedOnPools(
                operation=operation, instance_uuid=instance.uuid)

    def snapshot(self, context: Any, instance: objects.Instance,
                 image_id: str, update_task_state: Any) -> None:
        if self._resolver.decision_for(instance).storage != \
                resolver_mod.POOLS:
            return super().snapshot(context, instance, image_id,
                                    update_task_state)
        self._snapshot_from_pool(context, instance, image_id,
                                 update_task_state)

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

    def check_can_live_migrate_source(self, context: Any,
                                      instance: objects.Instance,
                                      dest_check_data: Any,
                                      block_device_info: Any = None) -> Any:
        decision = self._resolver.decision_for(instance)
        if decision.storage == resolver_mod.POOLS:
            kind = pools_mod.pool_type(self._instance_pool(instance))
            if kind != 'dir':
                reason = exception.NotSupportedOnPools(
                    operation='Live migration of disks on %s pools' % kind,
                    instance_uuid=instance.uuid)
                raise nova_exception.MigrationPreCheckError(
                    reason=str(reason))
        return super().check_can_live_migrate_source(
            context, instance, dest_check_data,
            block_device_info=block_device_info)

    def get_instance_disk_info(self, instance: objects.Instance,
                               *args: Any, **kwargs: Any) -> Any:
        """Stock's file disks, and the instance's volumes (stock skips
        ``<disk type='volume'>``): what a live block migration copies."""
        info = jsonutils.loads(super().get_instance_disk_info(
            instance, *args, **kwargs))
        for disk in self._local_disks(instance):
            if disk.source_type == 'volume':
                info.append(live_migration.volume_disk_info(
                    self._local_volume(instance, disk)))
        return jsonutils.dumps(info)

    def _local_disks(self, instance: objects.Instance,
                     guest: Any = None) -> list[live_migration.LocalDisk]:
        if self._resolver.decision_for(instance).storage != \
                resolver_mod.POOLS:
            return []
        guest = guest or self._host.get_guest(instance)
        return live_migration.local_disks(
            guest.get_xml_desc(), instance.uuid,
            libvirt_utils.get_instance_path(instance))

    def _local_volume(self, instance: objects.Instance,
                      disk: live_migration.LocalDisk) -> Any:
        name = pools_mod.volume_name(instance.uuid, disk.name)
        vol = self._pools.find_volume(self._pools.get(disk.pool), name)
        if vol is None:
            raise exception.VolumeNotFound(pool=disk.pool, volume=name)
        return vol

    def _live_migration_copy_disk_paths(self, context: Any,
                                        instance: objects.Instance,
                                        guest: Any) -> Any:
        paths, names = super()._live_migration_copy_disk_paths(
            context, instance, guest)
        for disk in self._local_disks(instance, guest):
            if disk.source_type == 'volume' and disk.target not in names:
                paths.append(self._local_volume(instance, disk).path())
                names.append(disk.target)
        return paths, names

    def pre_live_migration(self, context: Any, instance: objects.Instance,
                           block_device_info: Any, network_info: Any,
                           disk_info: Any, migrate_data: Any,
                           *args: Any, **kwargs: Any) -> Any:
        """Make the arriving instance's disks where this host keeps them.

        Volumes of this host's pool or files in the instance directory
        (:meth:`BackendResolver.arrival`), each made as stock makes it (an
        overlay on the template fetched into this host's image cache, or
        an empty disk of the same size) for libvirt to fill. Where they are
        is recorded in the instance for the source, which writes the guest
        XML this host gets.
        """
        decision = self._resolver.recorded(instance)
        if (decision is None or not migrate_data.block_migration or
                migrate_data.is_shared_instance_path or
                migrate_data.is_shared_block_storage):
            return super().pre_live_migration(
                context, instance, block_device_info, network_info,
                disk_info, migrate_data, *args, **kwargs)
        arrival = self._resolver.arrival(decision)
        directory = libvirt_utils.get_instance_path_at_destination(
            instance, migrate_data)
        infos = live_migration.arriving_disk_info(
            jsonutils.loads(disk_info) if disk_info else [], instance.uuid,
            directory)
        empty = [i for i in infos if not i['backing_file']]
        if arrival.storage == resolver_mod.POOLS:
            # Stock makes the others as files: they are volumes here.
            infos = [i for i in infos if i['backing_file']]
        with self._resolver.assume(instance, arrival):
            result = super().pre_live_migration(
                context, instance, block_device_info, network_info,
                jsonutils.dumps(infos), migrate_data, *args, **kwargs)
            if arrival.storage == resolver_mod.POOLS:
                pool = self._pools.get(arrival.pool)
                directory = pools_mod.pool_target(pool)
                for info in empty:
                    self._pools.create_empty(
                        pool, pools_mod.volume_name(
                            instance.uuid, os.path.basename(info['path'])),
                        info['type'], info['virt_disk_size'])
        self._resolver.record_arrival(instance, CONF.host, arrival,
                                      directory)
        instance.save()
        LOG.info('Live migration: disks made as %s%s', arrival.storage,
                 ' in pool %s' % arrival.pool if arrival.pool else '',
                 instance=instance)
        return result

    def _live_migration_operation(self, context: Any,
                                  instance: objects.Instance, dest: str,
                                  block_migration: Any, migrate_data: Any,
                                  guest: Any, *args: Any,
                                  **kwargs: Any) -> Any:
        guest = self._guest_for_destination(context, instance, dest,
                                            migrate_data, guest)
        return super()._live_migration_operation(
            context, instance, dest, block_migration, migrate_data, guest,
            *args, **kwargs)

    def _guest_for_destination(self, context: Any,
                               instance: objects.Instance, dest: str,
                               migrate_data: Any, guest: Any) -> Any:
        """The guest, sending the destination the XML of its disks there.

        :raises MigrationError: a pool instance going to a host that made
            no disks for it (one without nova-imgtype).
        """
        decision = self._resolver.recorded(instance)
        if (decision is None or not migrate_data.block_migration or
                migrate_data.is_shared_instance_path or
                migrate_data.is_shared_block_storage):
            return guest
        arrival = self._resolver.recorded_arrival(
            self._fresh(context, instance), dest)
        if arrival is None:
            if decision.storage == resolver_mod.POOLS:
                raise nova_exception.MigrationError(reason=_(
                    'destination %s made no disks for instance %s, whose '
                    'disks are storage volumes: it does not run '
                    'nova-imgtype') % (dest, instance.uuid))
            return guest
        disks = live_migration.local_disks(
            guest.get_xml_desc(), instance.uuid,
            libvirt_utils.get_instance_path(instance))
        return live_migration.RetargetedGuest(
            guest, lambda xml: live_migration.destination_xml(
                xml, instance.uuid, disks, *arrival))

    @staticmethod
    def _fresh(context: Any, instance: objects.Instance) -> Any:
        """The instance's system metadata as saved by another host."""
        return objects.Instance.get_by_uuid(
            context, instance.uuid, expected_attrs=['system_metadata'])

    def _end_arrival(self, context: Any,
                     instance: objects.Instance) -> tuple[str, str] | None:
        """Drop this host's arrival record; what it was."""
        fresh = self._fresh(context, instance)
        arrival = self._resolver.recorded_arrival(fresh, CONF.host)
        if self._resolver.drop_arrival(fresh):
            fresh.save()
        return arrival

    def rollback_live_migration_at_destination(
            self, context: Any, instance: objects.Instance,
            *args: Any, **kwargs: Any) -> Any:
        # The disks to remove are those pre_live_migration made here
        # (recorded or not: it may have failed half-way).
        decision = self._resolver.recorded(instance)
        if decision is None:
            return super().rollback_live_migration_at_destination(
                context, instance, *args, **kwargs)
        self._end_arrival(context, instance)
        with self._resolver.assume(instance,
                                   self._resolver.arrival(decision)):
            return super().rollback_live_migration_at_destination(
                context, instance, *args, **kwargs)

    def post_live_migration_at_destination(
            self, context: Any, instance: objects.Instance,
            *args: Any, **kwargs: Any) -> Any:
        super().post_live_migration_at_destination(
            context, instance, *args, **kwargs)
        decision = self._resolver.recorded(instance)
        if decision is None or self._end_arrival(context, instance) is None:
            # Shared storage: the disks are where they were.
            return
        # The disks are where pre_live_migration made them; the compute
        # manager saves the instance after this.
        arrival = self._resolver.arrival(decision)
        if arrival != decision:
            self._resolver.record(instance, arrival)
            LOG.info('Disks now %s%s', arrival.storage,
                     ' in pool %s' % arrival.pool if arrival.pool else '',
                     instance=instance)

    def migrate_disk_and_power_off(self, context: Any,
                                   instance: objects.Instance, dest: str,
                                   flavor: Any, network_info: Any,
                                   block_device_info: Any = None,
                                   timeout: int = 0,
                                   retry_interval: int = 0) -> Any:
        if (self._resolver.backend_for(instance) == 'lvm' and
                not self._is_booted_from_volume(block_device_info)):
            reason = _('Migration is not supported for LVM backed instances')
            raise nova_exception.InstanceFaultRollback(
                nova_exception.MigrationPreCheckError(reason=reason))
        dest_pools = self._check_destination_serves(context, instance)
        decision = self._resolver.decision_for(instance)
        if decision.storage != resolver_mod.POOLS or pools_mod.pool_type(
                self._pools.get(decision.pool)) != 'dir':
            # Legacy disks, or volumes on shared storage (rbd) that the
            # destination finds in its own pool of the same name.
            return super().migrate_disk_and_power_off(
                context, instance, dest, flavor, network_info,
                block_device_info=block_device_info, timeout=timeout,
                retry_interval=retry_interval)
        return self._migrate_pool_disks(
            context, instance, dest, flavor, network_info,
            block_device_info, timeout, retry_interval, dest_pools)

    def _migrate_pool_disks(self, context: Any, instance: objects.Instance,
                            dest: str, flavor: Any, network_info: Any,
                            block_device_info: Any, timeout: int,
                            retry_interval: int,
                            dest_pools: bool = True) -> str:
        """Stock's resize and cold migration, for disks on pool volumes.

        With the guest stopped, the volume files are moved (renamed, same
        filesystem) into the instance directory, which stock then keeps as
        ``<instance>_resize`` for a revert, as it does for legacy disks.
        From there each volume is copied to the same pool path on the
        destination, the way stock copies disk files (``cp`` when the pool
        directory is shared with the destination, ``rsync``/``scp`` when
        not). A destination without storage pools (``dest_pools`` False)
        gets each volume as the file stock would have there
        (``<instance>/disk``, ...), and makes the instance's disks files
        of its backend (``finish_migration``). A failure puts everything
        back where it was.
        """
        pool = self._instance_pool(instance)
        pool_dir = pools_mod.pool_target(pool)
        inst_base = libvirt_utils.get_instance_path(instance)
        inst_base_resize = inst_base + '_resize'
        vols = [(v.name(), pools_mod.volume_format(v))
                for v in self._pools.volumes(pool, instance.uuid + '_')
                if not v.name().endswith('.rescue')]
        # Stopped before its volumes are read; stock's own power_off that
        # follows finds it stopped, as for a stopped instance.
        self.power_off(instance, timeout, retry_interval)
        staged = self._stage_volumes(instance, pool, pool_dir, inst_base,
                                     [name for name, _fmt in vols])
        try:
            disk_info = jsonutils.loads(super().migrate_disk_and_power_off(
                context, instance, dest, flavor, network_info,
                block_device_info=block_device_info, timeout=timeout,
                retry_interval=retry_interval))
        except Exception:
            with excutils.save_and_reraise_exception():
                # Stock put the instance directory back in place.
                self._unstage_volumes(instance, pool, pool_dir, inst_base,
                                      staged)
        target_dir = pool_dir if dest_pools else inst_base
        shared_pool = self._is_path_shared_with(dest, target_dir)
        copied: list[str] = []
        try:
            for name, fmt in vols:
                target = os.path.join(
                    target_dir,
                    name if dest_pools else name[len(instance.uuid) + 1:])
                libvirt_utils.copy_image(
                    os.path.join(inst_base_resize, name), target,
                    host=None if shared_pool else dest,
                    on_execute=lambda p: self.job_tracker.add_job(
                        instance, p.pid),
                    on_completion=lambda p: self.job_tracker.remove_job(
                        instance, p.pid),
                    compression=fmt not in libvirt_driver.NO_COMPRESSION_TYPES)
                copied.append(target)
                disk_info.append({'type': fmt, 'path': target,
                                  'volume': name} if dest_pools else
                                 {'type': fmt, 'path': target})
        except Exception:
            with excutils.save_and_reraise_exception():
                for target in copied:
                    if shared_pool:
                        fileutils.delete_if_exists(target)
                    else:
                        self._remotefs.remove_file(dest, target)
                self._cleanup_remote_migration(
                    dest, inst_base, inst_base_resize,
                    self._is_path_shared_with(dest, inst_base))
                self._unstage_volumes(instance, pool, pool_dir, inst_base,
                                      staged)
        if shared_pool and dest_pools:
            # The copies are in this pool's directory too (same host, or a
            # shared one): make libvirt see them.
            pool.refresh(0)
        return jsonutils.dumps(disk_info)

    @staticmethod
    def _stage_volumes(instance: objects.Instance, pool: Any, pool_dir: str,
                       directory: str, names: list[str]) -> list[str]:
        """Move volume files of the pool into ``directory``."""
        moved: list[str] = []
        try:
            for name in names:
                os.rename(os.path.join(pool_dir, name),
                          os.path.join(directory, name))
                moved.append(name)
        except Exception:
            with excutils.save_and_reraise_exception():
                for name in moved:
                    os.rename(os.path.join(directory, name),
                              os.path.join(pool_dir, name))
        pool.refresh(0)
        LOG.debug('Moved volumes %s out of storage pool %s into %s',
                  ', '.join(moved), pool.name(), directory,
                  instance=instance)
        return moved

    @staticmethod
    def _unstage_volumes(instance: objects.Instance, pool: Any,
                         pool_dir: str, directory: str,
                         names: list[str]) -> None:
        """Move volume files from ``directory`` back into the pool."""
        for name in names:
            src = os.path.join(directory, name)
            if os.path.exists(src):
                os.rename(src, os.path.join(pool_dir, name))
        pool.refresh(0)
        LOG.info('Volumes %s are back in storage pool %s', ', '.join(names),
                 pool.name(), instance=instance)

    def finish_migration(self, context: Any, migration: Any,
                         instance: objects.Instance, disk_info: str,
                         network_info: Any, image_meta: Any,
                         resize_instance: bool, allocations: Any,
                         block_device_info: Any = None,
                         power_on: bool = True, share_info: Any = None
                         ) -> None:
        decision = self._resolver.decision_for(instance)
        if (decision.storage == resolver_mod.POOLS and
                self._resolver.storage_for(decision.backend) !=
                resolver_mod.POOLS):
            # No pools here: the volumes came as this backend's files
            # (_migrate_pool_disks), and the instance keeps its backend.
            decision = self._resolver.with_storage(decision,
                                                   resolver_mod.LEGACY)
            self._resolver.record(instance, decision)
            instance.save()
            LOG.info('Disks of backend %s are files on this host, which '
                     'has no storage pools for it', decision.backend,
                     instance=instance)
        self._resolver.ensure_served(instance, CONF.host)
        infos = jsonutils.loads(disk_info)
        if decision.storage == resolver_mod.POOLS:
            # This host's pool implementing the backend (the same storage:
            # the same directory, or the same Ceph pool).
            here = self._resolver.with_storage(decision, resolver_mod.POOLS)
            if here != decision:
                self._resolver.record(instance, here)
                instance.save()
            # The volume files came with the migration: show them to libvirt.
            self._instance_pool(instance).refresh(0)
        elif (self._can_move_to_pools(instance) and
                not self._is_booted_from_volume(block_device_info)):
            # Transition: the legacy files just copied here go into the pool
            # before the guest starts.
            self._move_to_pools(instance)
        # Stock rewrites raw disks listed here as qcow2 when use_cow_images;
        # the format of a volume is the instance's, leave volumes alone.
        infos = [i for i in infos
                 if 'volume' not in i and os.path.exists(i['path'])]
        super().finish_migration(
            context, migration, instance, jsonutils.dumps(infos),
            network_info, image_meta, resize_instance, allocations,
            block_device_info=block_device_info, power_on=power_on,
            share_info=share_info)

    def finish_revert_migration(self, context: Any,
                                instance: objects.Instance,
                                network_info: Any, migration: Any,
                                block_device_info: Any = None,
                                power_on: bool = True,
                                share_info: Any = None) -> None:
        """Put back the disks kept in ``<instance>_resize``.

        Volumes kept there go back into the pool, replacing the copies the
        migration made (same host or shared storage); an instance that moved
        into the pool during the migration is legacy again, its files being
        the ones stock puts back.
        """
        backup_dir = libvirt_utils.get_instance_path(instance) + '_resize'
        names = (os.listdir(backup_dir) if os.path.isdir(backup_dir)
                 else [])
        volumes = [n for n in names if n.startswith(instance.uuid + '_')]
        legacy = [n for n in names if _MOVABLE_DISK.match(n)]
        decision = self._resolver.decision_for(instance)
        if volumes:
            # Back into this host's pool: the destination recorded its own
            # (files on a host without pools, or its pool's name).
            here = self._pools_here(decision)
            if here != decision:
                decision = here
                self._resolver.record(instance, decision)
                instance.save()
        if volumes or (legacy and decision.storage == resolver_mod.POOLS):
            self._delete_pool_volumes(instance)
        if volumes:
            pool = self._instance_pool(instance)
            self._unstage_volumes(instance, pool, pools_mod.pool_target(pool),
                                  backup_dir, volumes)
        elif legacy and decision.storage == resolver_mod.POOLS:
            self._resolver.record(instance, self._resolver.with_storage(
                decision, resolver_mod.LEGACY))
            instance.save()
        super().finish_revert_migration(
            context, instance, network_info, migration,
            block_device_info=block_device_info, power_on=power_on,
            share_info=share_info)
