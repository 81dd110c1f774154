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

import functools
import os
from typing import Any

from nova import context as nova_context
from nova import exception as nova_exception
from nova import objects
from nova.virt.libvirt import driver as libvirt_driver
from nova.virt.libvirt import utils as libvirt_utils
from oslo_config import cfg
from oslo_log import log as logging
from oslo_serialization import jsonutils

import nova_imgtype.conf
from nova_imgtype import compat
from nova_imgtype import exception
from nova_imgtype.stock import after_power_off
from nova_imgtype.stock import config_drive_link
from nova_imgtype.stock import driver_steps
from nova_imgtype.stock import remote_filesystem
from nova_imgtype.stock import withheld_disks
from nova_imgtype.virt.libvirt import cold_moves
from nova_imgtype.virt.libvirt import host_traits
from nova_imgtype.virt.libvirt import imagebackend
from nova_imgtype.virt.libvirt import imagecache
from nova_imgtype.virt.libvirt import instance_disks
from nova_imgtype.virt.libvirt import instance_record
from nova_imgtype.virt.libvirt import live_moves
from nova_imgtype.virt.libvirt import pool_snapshots
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import pools as pools_mod
from nova_imgtype.virt.libvirt import resolver as resolver_mod
from nova_imgtype.virt.libvirt import template_cache
from nova_imgtype.virt.libvirt import template_handlers
from nova_imgtype.virt.libvirt import way_back

LOG = logging.getLogger(__name__)

CONF: cfg.ConfigOpts = nova_imgtype.conf.CONF


class LibvirtDriver(libvirt_driver.LibvirtDriver):
    """Libvirt driver whose image backend is a property of the instance.

    Its overrides are thin: each asks one of its collaborators, built
    here, and forwards to stock: the instance's record
    (:class:`.InstanceRecord`), the instances' disks on this host's pools
    (:class:`.InstanceDisks`), the image cache's templates
    (:class:`.TemplateCache`), snapshots of volumes
    (:class:`.PoolSnapshots`), live and cold moves (:class:`.LiveMoves`,
    :class:`.ColdMoves`) and what the host reports (:class:`.HostTraits`).
    Where it steers stock's own code, it does so through one of the
    adapters of :mod:`nova_imgtype.stock`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A recorded pool is found on this host by its storage (type and
        # place), whatever its name here.
        self._resolver = resolver_mod.BackendResolver(
            CONF, locate=lambda key, name: self._pools.name_for(key, name))
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
        # For backends that cannot take linked templates
        # (TemplateCache.handler_for).
        self._downloading_handler = template_handlers.load('downloading')
        self._pools = pools_mod.StoragePools(self._storage_connection)
        self.image_backend = imagebackend.Backend(
            CONF.use_cow_images, self._resolver.decision_for, CONF,
            pools=self._pools)
        self._disks = instance_disks.InstanceDisks(
            self._resolver, self._pools, self.image_backend, CONF)
        self.image_cache_manager = imagecache.ImageCacheManager(
            self._disks.pool_backing_paths, self._template_handler)
        self._stock_steps = driver_steps.StockSteps(self)
        self._live = live_moves.LiveMoves(self._resolver, self._disks,
                                          self._stock_steps, CONF)
        self._templates = template_cache.TemplateCache(
            self._resolver, self.image_backend, self._pools,
            self._template_handler, self._downloading_handler, CONF,
            stock=self._stock_steps)
        self._snapshots = pool_snapshots.PoolSnapshots(
            self._resolver, self.image_backend, self._stock_steps, CONF)
        self._cold = cold_moves.ColdMoves(self._resolver, self._disks,
                                          self._stock_steps, CONF)
        self._record = instance_record.InstanceRecord(
            self._resolver, self._disks, self._image_api, CONF)
        self._host_traits = host_traits.HostTraits(self._resolver, CONF)
        self._way_back = way_back.WayBack(self._resolver, self._disks, CONF)
        self.capabilities.update(self._host_traits.image_type_capabilities())
        if mapping:
            LOG.info('Image backends per image format: %s; other formats '
                     'use images_type=%s', mapping,
                     self._resolver.default_backend())

    # -- host ---------------------------------------------------------------

    def init_host(self, *args: Any, **kwargs: Any) -> None:
        host: str = compat.driver('init_host', self, args, kwargs)['host']
        # Raises InvalidImagesTypeMapping naming the entry: nova-compute
        # does not start with a mapping this host cannot serve.
        try:
            self._resolver.check_host()
        except nova_exception.Invalid as e:
            LOG.error('Refusing to start: %s', e)
            raise
        super().init_host(*args, **kwargs)
        self._template_handler.init(os.path.join(
            CONF.instances_path, CONF.image_cache.subdirectory_name))
        if CONF.libvirt.use_storage_pools:
            # Found again when they exist; a conflicting definition is an
            # error that stops nova-compute, never a silent redefinition.
            for spec in pool_specs.host_specs(
                    CONF, self._resolver.pool_backends()):
                self._pools.ensure(spec)
            self._log_legacy_instances(host)

    def _log_legacy_instances(self, host: str) -> None:
        context = nova_context.get_admin_context()
        instances = list(objects.InstanceList.get_by_host(
            context, host, expected_attrs=['system_metadata']))
        self._disks.finish_interrupted_moves(instances)
        self._disks.record_pool_locations(instances)
        legacy = [inst.uuid for inst in instances
                  if self._disks.can_move_to_pools(inst)]
        if legacy:
            LOG.warning('%d instance(s) on this host still use legacy image '
                        'files; they move into the storage pools on their '
                        'next hard reboot, resize, cold migration or '
                        'unshelve: %s', len(legacy), ', '.join(legacy))
        else:
            LOG.info('No instance on this host uses legacy image files')
        going = [inst.uuid for inst in instances
                 if self._way_back.due(inst)]
        if going:
            LOG.warning('%d instance(s) on this host go back to stock\'s '
                        'layout at their next hard reboot (nova-imgtype '
                        'prepare-uninstall): %s', len(going),
                        ', '.join(going))

    def get_available_resource(self, *args: Any, **kwargs: Any) -> Any:
        resources = super().get_available_resource(*args, **kwargs)
        # Stock's resource tracker copies these into the compute node's
        # stats, which the scheduler gives ImageTypeSupportFilter.
        resources['stats'] = {
            **(resources.get('stats') or {}),
            **self._host_traits.stats(self.capabilities_as_traits())}
        return resources

    def update_provider_tree(self, *args: Any, **kwargs: Any) -> None:
        call = compat.driver('update_provider_tree', self, args, kwargs)
        super().update_provider_tree(*args, **kwargs)
        # COMPUTE_IMAGE_TYPE_* follow self.capabilities (the resource
        # tracker adds and removes them); our custom ones are set here.
        self._host_traits.update(call['provider_tree'], call['nodename'])

    # -- instance lifecycle ---------------------------------------------------

    def prepare_for_spawn(self, *args: Any, **kwargs: Any) -> None:
        """A build's backend, recorded for the image's disk_format; the
        compute manager saves it with the instance before ``spawn``."""
        self._record.before_prepare(compat.driver(
            'prepare_for_spawn', self, args, kwargs)['instance'])
        super().prepare_for_spawn(*args, **kwargs)

    def spawn(self, *args: Any, **kwargs: Any) -> None:
        call = compat.driver('spawn', self, args, kwargs)
        self._record.before_spawn(
            call['instance'], call['image_meta'],
            self._is_booted_from_volume(call['block_device_info']))
        super().spawn(*args, **kwargs)

    def _on_shared_block_storage(self, instance: objects.Instance) -> bool:
        """Whether the instance's disks are shared block storage (in
        Ceph), as its image backend says."""
        with self.image_backend.scope(instance):
            return bool(
                self.image_backend.backend().is_shared_block_storage())

    def _create_configdrive(self, *args: Any, **kwargs: Any) -> None:
        """Stock's config drive; one the instance keeps as a file (see
        :mod:`.config_drive`) is put back where stock made it after stock
        deleted it on an rbd host."""
        call = compat.driver('_create_configdrive', self, args, kwargs)
        instance: objects.Instance = call['instance']
        path = os.path.join(libvirt_utils.get_instance_path(instance),
                            'disk.config.rescue' if call['rescue']
                            else 'disk.config')
        with config_drive_link.kept(path):
            super()._create_configdrive(*args, **kwargs)

    def rebuild(self, *args: Any, **kwargs: Any) -> None:
        """Refuse a rebuild this host cannot do before the old disk is
        touched (:meth:`.InstanceRecord.check_rebuild`); otherwise stock's
        rebuild (destroy, spawn), which the compute manager runs when the
        driver's is not implemented."""
        call = compat.driver('rebuild', self, args, kwargs)
        instance: objects.Instance = call['instance']
        self._record.check_rebuild(
            call['context'], instance, call['image_meta'],
            self._is_booted_from_volume(call['block_device_info']),
            disks_made_anew=bool(call['evacuate']) and
            not self.instance_on_disk(instance))
        raise NotImplementedError()

    def _cleanup(self, *args: Any, **kwargs: Any) -> None:
        call = compat.driver('_cleanup', self, args, kwargs)
        instance: objects.Instance = call['instance']
        cleanup_instance_disks: bool = call['cleanup_instance_disks']
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
                    self._cleanup_lvm(instance, call['block_device_info'])
                else:
                    self._cleanup_rbd(instance)
            except Exception as e:  # noqa: BLE001 - raised after stock's
                LOG.error('Failed to remove the %(backend)s disks: %(e)s',
                          {'backend': decision.backend, 'e': e},
                          instance=instance)
                failed = e
        if (call['cleanup_instance_dir'] and not cleanup_instance_disks and
                CONF.libvirt.images_type == 'rbd' and
                CONF.workarounds.ensure_libvirt_rbd_instance_dir_cleanup and
                not self._on_shared_block_storage(instance)):
            # Stock's workaround removes the instance directory whenever
            # an rbd host keeps an instance's disks (a hard reboot, the
            # clean-up of an evacuation or a reverted resize): they are in
            # Ceph. This instance's disks are files of that directory.
            args, kwargs = call.replaced(cleanup_instance_dir=False)
        # Stock's cleanup always runs (VIFs, volume connections, the
        # instance directory, the domain), whatever our storage says.
        with self.image_backend.scope(instance):
            super()._cleanup(*args, **kwargs)
        if cleanup_instance_disks and decision.storage == resolver_mod.POOLS:
            # The domain is gone: nothing uses the volumes any more.
            self._disks.delete_pool_volumes(instance)
        if failed is not None:
            raise failed

    def _storage_connection(self) -> Any:
        """The libvirt connection that storage pools are managed on: the
        driver's own."""
        return self._host.get_connection()

    def _cleanup_resize(self, *args: Any, **kwargs: Any) -> None:
        """Stock's, for the instance's backend: stock removes the resize
        snapshot of a root disk whose backend clones (its Rbd, and a
        volume of an rbd pool)."""
        instance: objects.Instance = compat.driver(
            '_cleanup_resize', self, args, kwargs)['instance']
        with self.image_backend.scope(instance):
            super()._cleanup_resize(*args, **kwargs)

    def instance_on_disk(self, *args: Any, **kwargs: Any) -> bool:
        instance: objects.Instance = compat.driver(
            'instance_on_disk', self, args, kwargs)['instance']
        with self.image_backend.scope(instance):
            return super().instance_on_disk(*args, **kwargs)

    # -- images -----------------------------------------------------------

    def _try_fetch_image_cache(self, *args: Any, **kwargs: Any) -> None:
        """Stock's image cache step, fetching the template
        :meth:`.TemplateCache.fetch_plan` names, with its handler."""
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
        """Onto this host's native template of the original image
        (:meth:`.TemplateCache.rebase_onto_native`), else stock's."""
        call = compat.driver('_rebase_original_qcow2_image', self, args,
                             kwargs)
        if not self._templates.rebase_onto_native(
                call['context'], call['instance'], call['backend']):
            super()._rebase_original_qcow2_image(*args, **kwargs)

    def _get_guest_xml(self, *args: Any, **kwargs: Any) -> Any:
        """Stock's guest XML, once the linked template the instance's
        qcow2 root disk reads through is checked again."""
        self._templates.check_linked_root_template(
            compat.driver('_get_guest_xml', self, args, kwargs)['instance'])
        return super()._get_guest_xml(*args, **kwargs)

    def cache_image(self, *args: Any, **kwargs: Any) -> bool:
        """Pre-cache the template a new instance of the image would use
        (:meth:`.TemplateCache.cache`), not stock's ``<sha1>``."""
        call = compat.driver('cache_image', self, args, kwargs)
        return self._templates.cache(call['context'], call['image_id'])

    def manage_image_cache(self, *args: Any, **kwargs: Any) -> None:
        """Stock's image cache pass, then the templates of rbd pools that
        nothing uses any more."""
        super().manage_image_cache(*args, **kwargs)
        self._templates.remove_unused_rbd_templates()

    def snapshot(self, *args: Any, **kwargs: Any) -> None:
        """Stock's, but for a root disk on a volume
        (:class:`.PoolSnapshots`); a linked template the disk reads
        through checked before the copy and before its upload
        (:meth:`.TemplateCache.checked_snapshot`)."""
        call = compat.driver('snapshot', self, args, kwargs)
        instance: objects.Instance = call['instance']
        update_task_state = self._templates.checked_snapshot(
            instance, call['update_task_state'])
        if not self._snapshots.applies(instance):
            args, kwargs = call.replaced(update_task_state=update_task_state)
            return super().snapshot(*args, **kwargs)
        self._snapshots.take(call['context'], instance, call['image_id'],
                             update_task_state)
        return None

    # -- live migration -----------------------------------------------------

    def check_can_live_migrate_destination(self, *args: Any,
                                           **kwargs: Any) -> Any:
        instance: objects.Instance = compat.driver(
            'check_can_live_migrate_destination', self, args,
            kwargs)['instance']
        image_type = self._live.check_destination(instance)
        data = super().check_can_live_migrate_destination(*args, **kwargs)
        # The source compares this with its instance's backend.
        data.image_type = image_type
        return data

    def _is_shared_block_storage(self, *args: Any, **kwargs: Any) -> bool:
        call = compat.driver('_is_shared_block_storage', self, args, kwargs)
        instance: objects.Instance = call['instance']
        with self.image_backend.scope(instance):
            if self._live.shares_block_storage(
                    instance, call['dest_check_data'],
                    self.image_backend.backend().is_shared_block_storage):
                return True
            return super()._is_shared_block_storage(*args, **kwargs)

    def check_can_live_migrate_source(self, *args: Any,
                                      **kwargs: Any) -> Any:
        call = compat.driver('check_can_live_migrate_source', self, args,
                             kwargs)
        self._live.check_source(call['context'], call['instance'])
        return super().check_can_live_migrate_source(*args, **kwargs)

    def get_instance_disk_info(self, *args: Any, **kwargs: Any) -> Any:
        """Stock's file disks, and the instance's volumes (stock skips
        ``<disk type='volume'>``): what a live block migration copies."""
        instance: objects.Instance = compat.driver(
            'get_instance_disk_info', self, args, kwargs)['instance']
        info = jsonutils.loads(super().get_instance_disk_info(
            *args, **kwargs))
        return jsonutils.dumps(info + self._live.volume_disk_info(instance))

    def _live_migration_copy_disk_paths(self, *args: Any,
                                        **kwargs: Any) -> Any:
        call = compat.driver('_live_migration_copy_disk_paths', self, args,
                             kwargs)
        paths, names = super()._live_migration_copy_disk_paths(
            *args, **kwargs)
        return self._live.add_copy_paths(call['instance'], call['guest'],
                                         paths, names)

    def pre_live_migration(self, *args: Any, **kwargs: Any) -> Any:
        """Stock's, making the arriving disks where this host keeps them
        (:meth:`.LiveMoves.arrive`)."""
        call = compat.driver('pre_live_migration', self, args, kwargs)
        # The guest's disks are opened here (made here, or shared).
        self._templates.check_linked_root_template(call['instance'])

        def stock(disk_info: str | None) -> Any:
            args, kwargs = call.replaced(disk_info=disk_info)
            return super(LibvirtDriver, self).pre_live_migration(
                *args, **kwargs)

        return self._live.arrive(call['instance'], call['migrate_data'],
                                 call['disk_info'], stock)

    def _live_migration_operation(self, *args: Any, **kwargs: Any) -> Any:
        call = compat.driver('_live_migration_operation', self, args, kwargs)
        guest = self._live.guest_for_destination(
            call['context'], call['instance'], call['dest'],
            call['migrate_data'], call['guest'])
        args, kwargs = call.replaced(guest=guest)
        return super()._live_migration_operation(*args, **kwargs)

    def rollback_live_migration_at_destination(self, *args: Any,
                                               **kwargs: Any) -> Any:
        call = compat.driver('rollback_live_migration_at_destination', self,
                             args, kwargs)
        return self._live.roll_back(
            call['context'], call['instance'],
            lambda: super(LibvirtDriver, self)
            .rollback_live_migration_at_destination(*args, **kwargs))

    def post_live_migration_at_destination(self, *args: Any,
                                           **kwargs: Any) -> Any:
        call = compat.driver('post_live_migration_at_destination', self,
                             args, kwargs)
        made_here = self._live.record_here(
            call['context'], call['instance'], call['block_migration'])
        result = super().post_live_migration_at_destination(*args, **kwargs)
        if made_here:
            self._live.define_arrived(call['instance'])
        return result

    # -- cold moves ---------------------------------------------------------

    def migrate_disk_and_power_off(self, *args: Any, **kwargs: Any) -> Any:
        """Stock's, checked first, its disks sent through the
        destination's libvirtd (:meth:`.ColdMoves.migrate`)."""
        call = compat.driver('migrate_disk_and_power_off', self, args,
                             kwargs)
        return self._cold.migrate(
            call['context'], call['instance'], call['dest'],
            self._is_booted_from_volume(call['block_device_info']),
            functools.partial(super().migrate_disk_and_power_off, *args,
                              **kwargs))

    def finish_migration(self, *args: Any, **kwargs: Any) -> None:
        """Stock's, once the arrived disks are recorded where they are
        here (:meth:`.ColdMoves.finish`)."""
        call = compat.driver('finish_migration', self, args, kwargs)
        disk_info = self._cold.finish(
            call['instance'], call['disk_info'],
            self._is_booted_from_volume(call['block_device_info']))
        args, kwargs = call.replaced(disk_info=disk_info)
        super().finish_migration(*args, **kwargs)

    def finish_revert_migration(self, *args: Any, **kwargs: Any) -> None:
        """Stock's, once the disks kept in ``<instance>_resize`` are back
        (:meth:`.ColdMoves.revert`)."""
        self._cold.revert(compat.driver(
            'finish_revert_migration', self, args, kwargs)['instance'])
        super().finish_revert_migration(*args, **kwargs)

    def power_off(self, *args: Any, **kwargs: Any) -> None:
        super().power_off(*args, **kwargs)
        # Stock's cold move of a pool instance, the guest just stopped.
        after_power_off.fire()

    def _get_instance_disk_info(self, *args: Any, **kwargs: Any) -> Any:
        instance: objects.Instance = compat.driver(
            '_get_instance_disk_info', self, args, kwargs)['instance']
        info = super()._get_instance_disk_info(*args, **kwargs)
        if withheld_disks.active():
            # A move through libvirt (ColdMove.send_files): copied there.
            return withheld_disks.answer(info)
        if remote_filesystem.current() is None:
            return info
        # During the move of a pool instance: its volumes named by path (a
        # guest live-migrated here, until its next start) are copied by
        # ColdMove.send_pool_disks, through libvirt, not by stock.
        return [i for i in info if not os.path.basename(
            i['path']).startswith(instance.uuid + '_')]

    #: The destination's libvirtd during a cold move in this thread
    #: (:mod:`.remote_storage`), stock's (SSH or rsync) otherwise.
    _remotefs = remote_filesystem.RemoteFilesystemAttribute()

    # -- disks on pools -----------------------------------------------------

    def delete_instance_files(self, *args: Any, **kwargs: Any) -> bool:
        instance: objects.Instance = compat.driver(
            'delete_instance_files', self, args, kwargs)['instance']
        done = super().delete_instance_files(*args, **kwargs)
        # Stock removes the instance directory of a deleted instance (its
        # pending deletes, a move that failed on this host); its volumes in
        # this host's dir pool are files of this host as much, and go too.
        return self._disks.delete_dir_volumes(instance) and done

    def _hard_reboot(self, *args: Any, **kwargs: Any) -> Any:
        call = compat.driver('_hard_reboot', self, args, kwargs)
        instance: objects.Instance = call['instance']
        if self._is_booted_from_volume(call['block_device_info']):
            pass
        elif self._way_back.due(instance):
            # Marked by prepare-uninstall: back to stock's layout, the
            # guest stopped first (stock's own destroy then finds it so).
            self._destroy(instance)
            self._way_back.take_back(instance)
        elif self._disks.can_move_to_pools(instance):
            # Stop the guest before its files move; stock's own destroy
            # that follows finds it stopped.
            self._destroy(instance)
            self._disks.move_to_pools(instance)
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

    # -- moves --------------------------------------------------------------

    def check_instance_shared_storage_local(self, *args: Any,
                                            **kwargs: Any) -> Any:
        instance: objects.Instance = compat.driver(
            'check_instance_shared_storage_local', self, args,
            kwargs)['instance']
        with self.image_backend.scope(instance):
            return super().check_instance_shared_storage_local(*args,
                                                               **kwargs)
