"""The driver's part for live migration: checks, and live block migration
of instances whose disks are (or become) volumes of a dir pool
(:mod:`~nova_imgtype.virt.libvirt.live_migration` holds the XML and disk
info rewriting).

One of the parts :class:`~nova_imgtype.virt.libvirt.driver.LibvirtDriver`
is made of.
"""

from __future__ import annotations

import os
from typing import Any

import libvirt
from nova import exception as nova_exception
from nova import objects
from nova.i18n import _
from nova.virt.libvirt import driver as libvirt_driver
from nova.virt.libvirt import utils as libvirt_utils
from oslo_config import cfg
from oslo_log import log as logging
from oslo_serialization import jsonutils

import nova_imgtype.conf
from nova_imgtype import compat
from nova_imgtype import exception
from nova_imgtype import record as record_mod
from nova_imgtype import traits
from nova_imgtype.stock import migration_xml
from nova_imgtype.virt.libvirt import live_migration
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import remote_storage
from nova_imgtype.virt.libvirt import resolver as resolver_mod

LOG = logging.getLogger(__name__)
CONF: cfg.ConfigOpts = nova_imgtype.conf.CONF


def _copies_disks(migrate_data: Any) -> bool:
    """Whether the migration copies the instance's disks (a block
    migration between hosts sharing neither instance path nor disks)."""
    return bool(migrate_data.block_migration and
                not migrate_data.is_shared_instance_path and
                not migrate_data.is_shared_block_storage)


class LiveMigration(libvirt_driver.LibvirtDriver):
    """Live migration of instances on pools and files."""

    def check_can_live_migrate_destination(self, *args: Any,
                                           **kwargs: Any) -> Any:
        instance: objects.Instance = compat.driver(
            'check_can_live_migrate_destination', self, args,
            kwargs)['instance']
        try:
            self._resolver.ensure_served(instance, CONF.host, arriving=True)
        except nova_exception.Invalid as e:
            raise nova_exception.MigrationPreCheckError(reason=str(e)) from e
        data = super().check_can_live_migrate_destination(*args, **kwargs)
        # The source compares this with its instance's backend.
        data.image_type = self._resolver.backend_for(instance)
        return data

    def _is_shared_block_storage(self, *args: Any, **kwargs: Any) -> bool:
        call = compat.driver('_is_shared_block_storage', self, args, kwargs)
        instance: objects.Instance = call['instance']
        dest_check_data = call['dest_check_data']
        with self.image_backend.scope(instance):
            if (dest_check_data.obj_attr_is_set('image_type') and
                    self._resolver.backend_for(instance) ==
                    dest_check_data.image_type and
                    self.image_backend.backend().is_shared_block_storage()):
                return True
            return super()._is_shared_block_storage(*args, **kwargs)

    def check_can_live_migrate_source(self, *args: Any,
                                      **kwargs: Any) -> Any:
        call = compat.driver('check_can_live_migrate_source', self, args,
                             kwargs)
        instance: objects.Instance = call['instance']
        self._check_destination_runs_imgtype(call['context'], instance)
        decision = self._resolver.decision_for(instance)
        if decision.storage == resolver_mod.POOLS:
            # dir volumes are copied (block migration); rbd ones are shared
            # by every host of the cluster and stay where they are.
            kind = pool_specs.pool_type(self._instance_pool(instance))
            if kind not in ('dir', 'rbd'):
                reason = exception.NotSupportedOnPools(
                    operation='Live migration of disks on %s pools' % kind,
                    instance_uuid=instance.uuid)
                raise nova_exception.MigrationPreCheckError(
                    reason=str(reason))
        return super().check_can_live_migrate_source(*args, **kwargs)

    def _check_destination_runs_imgtype(self, context: Any,
                                        instance: objects.Instance) -> None:
        """Refuse a live migration of an instance recorded by nova-imgtype
        to a host that runs no nova-imgtype (no ``CUSTOM_IMGTYPE_BACKEND_*``
        trait in placement), before anything is touched.

        The scheduler's ``instance_backend`` request filter never picks
        such a host; a forced live migration (microversions 2.30 to 2.67)
        bypasses the scheduler, and the destination's own check is then
        stock's. The destination is the one of the conductor's migration
        record, still ``accepted`` while the hosts are checked.
        """
        decision = self._resolver.recorded(instance)
        if decision is None:
            return
        migrations = objects.MigrationList.get_by_filters(context, {
            'instance_uuid': instance.uuid,
            'migration_type': 'live-migration',
            'status': ['accepted', 'queued', 'preparing']})
        for dest in {m.dest_compute for m in migrations if m.dest_compute}:
            nodes = objects.ComputeNodeList.get_all_by_host(context, dest)
            if not traits.runs_imgtype(
                    traits.reported(context, [n.uuid for n in nodes])):
                reason = str(exception.DestinationWithoutImgtype(
                    host=dest, instance_uuid=instance.uuid,
                    backend=decision.backend, storage=decision.storage))
                LOG.warning('Live migration refused: %s', reason,
                            instance=instance)
                raise nova_exception.MigrationPreCheckError(reason=reason)

    def get_instance_disk_info(self, *args: Any, **kwargs: Any) -> Any:
        """Stock's file disks, and the instance's volumes (stock skips
        ``<disk type='volume'>``): what a live block migration copies."""
        instance: objects.Instance = compat.driver(
            'get_instance_disk_info', self, args, kwargs)['instance']
        info = jsonutils.loads(super().get_instance_disk_info(
            *args, **kwargs))
        decision = self._resolver.decision_for(instance)
        for disk in self._local_disks(instance, with_config_drive=True):
            if disk.source_type == 'volume':
                info.append(live_migration.volume_disk_info(
                    self._local_volume(instance, disk),
                    decision.volume_format(disk.name)))
        return jsonutils.dumps(info)

    def _local_disks(self, instance: objects.Instance, guest: Any = None,
                     with_config_drive: bool = False
                     ) -> list[live_migration.LocalDisk]:
        """A pool instance's own disks: those libvirt copies, and its
        read-only config drive (the source sends it) if asked."""
        if self._resolver.decision_for(instance).storage != \
                resolver_mod.POOLS:
            return []
        xml = (guest or self._host.get_guest(instance)).get_xml_desc()
        path = libvirt_utils.get_instance_path(instance)
        disks = live_migration.local_disks(xml, instance.uuid, path)
        drive = live_migration.config_drive(xml, instance.uuid, path)
        return disks + [drive] if with_config_drive and drive else disks

    def _local_volume(self, instance: objects.Instance,
                      disk: live_migration.LocalDisk) -> Any:
        name = pool_specs.volume_name(instance.uuid, disk.name)
        vol = self._pools.find_volume(self._pools.get(disk.pool), name)
        if vol is None:
            raise exception.VolumeNotFound(pool=disk.pool, volume=name)
        return vol

    def _live_migration_copy_disk_paths(self, *args: Any,
                                        **kwargs: Any) -> Any:
        call = compat.driver('_live_migration_copy_disk_paths', self, args,
                             kwargs)
        instance: objects.Instance = call['instance']
        paths, names = super()._live_migration_copy_disk_paths(
            *args, **kwargs)
        for disk in self._local_disks(instance, call['guest']):
            if disk.source_type == 'volume' and disk.target not in names:
                paths.append(self._local_volume(instance, disk).path())
                names.append(disk.target)
        return paths, names

    def pre_live_migration(self, *args: Any, **kwargs: Any) -> Any:
        """Make the arriving instance's disks where this host keeps them.

        Volumes of this host's pool or files in the instance directory
        (:meth:`BackendResolver.arrival`), each made as stock makes it (an
        overlay on the template fetched into this host's image cache, or
        an empty disk of the same size) for libvirt to fill. Where they are
        is recorded in the instance for the source, which writes the guest
        XML this host gets.
        """
        call = compat.driver('pre_live_migration', self, args, kwargs)
        instance: objects.Instance = call['instance']
        migrate_data = call['migrate_data']
        disk_info = call['disk_info']
        decision = self._resolver.recorded(instance)
        if decision is None or not _copies_disks(migrate_data):
            return super().pre_live_migration(*args, **kwargs)
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
            args, kwargs = call.replaced(disk_info=jsonutils.dumps(infos))
            result = super().pre_live_migration(*args, **kwargs)
            if arrival.storage == resolver_mod.POOLS:
                pool = self._pools.get(arrival.pool)
                directory = pool_specs.pool_target(pool)
                for info in empty:
                    self._pools.create_empty(
                        pool, pool_specs.volume_name(
                            instance.uuid, os.path.basename(info['path'])),
                        info['type'], info['virt_disk_size'])
        self._arrivals[instance.uuid] = arrival
        self._resolver.record_arrival(instance, CONF.host, arrival,
                                      directory)
        instance.save()
        LOG.info('Live migration: disks made as %s%s', arrival.storage,
                 ' in pool %s' % arrival.pool if arrival.pool else '',
                 instance=instance)
        return result

    def _live_migration_operation(self, *args: Any, **kwargs: Any) -> Any:
        call = compat.driver('_live_migration_operation', self, args, kwargs)
        guest = self._guest_for_destination(
            call['context'], call['instance'], call['dest'],
            call['migrate_data'], call['guest'])
        args, kwargs = call.replaced(guest=guest)
        return super()._live_migration_operation(*args, **kwargs)

    def _guest_for_destination(self, context: Any,
                               instance: objects.Instance, dest: str,
                               migrate_data: Any, guest: Any) -> Any:
        """The guest, sending the destination the XML of its disks there.

        :raises MigrationError: a pool instance going to a host that made
            no disks for it (one without nova-imgtype).
        """
        decision = self._resolver.recorded(instance)
        if decision is None or not _copies_disks(migrate_data):
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
        xml = guest.get_xml_desc()
        path = libvirt_utils.get_instance_path(instance)
        disks = live_migration.local_disks(xml, instance.uuid, path)
        drive = live_migration.config_drive(xml, instance.uuid, path)
        if drive is not None:
            self._send_config_drive(instance, drive, migrate_data, dest,
                                    *arrival)
            disks.append(drive)
        return migration_xml.RetargetedGuest(
            guest, lambda xml: live_migration.destination_xml(
                xml, instance.uuid, disks, *arrival))

    def _send_config_drive(self, instance: objects.Instance,
                           drive: live_migration.LocalDisk,
                           migrate_data: Any, dest: str, storage: str,
                           directory: str) -> None:
        """Write the config drive into the empty one the destination made
        (libvirt copies no read-only disk), as a libvirt stream over the
        connection the migration itself opens.

        :raises MigrationError: the copy failed; the migration is rolled
            back (the destination removes what it made).
        """
        src = drive.path or self._local_volume(instance, drive).path()
        target = live_migration.destination_path(instance.uuid, drive,
                                                 storage, directory)
        # The address stock's _live_migration_operation connects to.
        if ('target_connect_addr' in migrate_data and
                migrate_data.target_connect_addr is not None):
            dest = migrate_data.target_connect_addr
        try:
            remote_storage.LibvirtRemoteFilesystem(
                self._live_migration_uri).fill(src, dest, target)
        except (libvirt.libvirtError, OSError) as e:
            raise nova_exception.MigrationError(reason=_(
                'cannot copy the config drive %(src)s of instance %(uuid)s '
                'to %(dest)s:%(target)s: %(error)s') % {
                    'src': src, 'uuid': instance.uuid, 'dest': dest,
                    'target': target, 'error': e}) from e

    @staticmethod
    def _fresh(context: Any, instance: objects.Instance) -> Any:
        """The instance's system metadata as saved by another host."""
        return objects.Instance.get_by_uuid(
            context, instance.uuid, expected_attrs=['system_metadata'])

    def _end_arrival(self, context: Any,
                     instance: objects.Instance) -> tuple[str, str] | None:
        """Drop this host's arrival record; what it was.

        ``instance`` (the copy the source sent, which the compute manager
        saves whole after this) gets the record as saved, less the
        arrival: its stale copy of the record is not saved back.
        """
        fresh = self._fresh(context, instance)
        arrival = self._resolver.recorded_arrival(fresh, CONF.host)
        if self._resolver.drop_arrival(fresh):
            fresh.save()
        record_mod.sync(instance, fresh.system_metadata)
        return arrival

    def rollback_live_migration_at_destination(self, *args: Any,
                                               **kwargs: Any) -> Any:
        call = compat.driver('rollback_live_migration_at_destination', self,
                             args, kwargs)
        instance: objects.Instance = call['instance']
        # The disks to remove are those pre_live_migration made here
        # (recorded or not: it may have failed half-way).
        decision = self._resolver.recorded(instance)
        self._arrivals.pop(instance.uuid, None)
        if decision is None:
            return super().rollback_live_migration_at_destination(
                *args, **kwargs)
        self._end_arrival(call['context'], instance)
        with self._resolver.assume(instance,
                                   self._resolver.arrival(decision)):
            return super().rollback_live_migration_at_destination(
                *args, **kwargs)

    def post_live_migration_at_destination(self, *args: Any,
                                           **kwargs: Any) -> Any:
        call = compat.driver('post_live_migration_at_destination', self,
                             args, kwargs)
        instance: objects.Instance = call['instance']
        # Where the disks are is recorded before stock's part, which can
        # fail: the compute manager saves the instance whatever happens
        # (its host is this one then), and its record must say where the
        # disks are here, not where they were on the source.
        self._record_arrival_here(call, instance)
        return super().post_live_migration_at_destination(*args, **kwargs)

    def _record_arrival_here(self, call: compat.StockCall,
                             instance: objects.Instance) -> None:
        made_here = self._arrivals.pop(instance.uuid, None)
        if self._resolver.recorded(instance) is None:
            return
        recorded_arrival = self._end_arrival(call['context'], instance)
        decision = self._resolver.decision_for(instance)
        # Whether this host made the disks: its own memory of its
        # pre_live_migration, else the arrival record it wrote there (a
        # restart in between), else stock's block_migration (None when the
        # API was asked for 'auto').
        if (made_here is None and recorded_arrival is None and
                not call['block_migration']):
            # Shared storage: the disks are where they were, in this host's
            # pool of the same storage (an rbd pool may have another name
            # here).
            here = (self._pools_here(decision)
                    if decision.storage == resolver_mod.POOLS else decision)
            if here != decision:
                self._resolver.record(instance, here)
            return
        # The disks are where pre_live_migration made them; the compute
        # manager saves the instance after this.
        arrival = made_here or self._resolver.arrival(decision)
        if arrival != decision:
            self._resolver.record(instance, arrival)
            LOG.info('Disks now %s%s', arrival.storage,
                     ' in pool %s' % arrival.pool if arrival.pool else '',
                     instance=instance)
