"""Live migration of instances recorded by nova-imgtype.

:class:`LiveMoves` is what each host does around stock's live migration
steps for an instance whose storage the record names:

- the checks: the destination serves the instance's backend, the source
  refuses a pool type libvirt cannot copy and a destination that runs no
  nova-imgtype (a forced live migration bypasses the scheduler);
- on a *block* migration (nothing shared), the destination makes the
  disks where it keeps them (volumes of its pool or files, as stock makes
  them) and records where (:meth:`arrive`); the source sends the guest
  XML naming them there and copies the read-only config drive, which
  libvirt does not copy (:meth:`guest_for_destination`);
- at the end, the destination records the instance's storage as it is
  there before stock's last step, which can fail (:meth:`record_here`),
  or removes what it made on a rollback (:meth:`roll_back`).

It holds the one piece of state of its own: :attr:`arrivals`, the
instances whose disks this host made for a migration arriving here, which
no save of the instance on another host can drop. The XML and disk info
rewriting are :mod:`.live_migration`'s; stock's steps run in the driver,
which hands them in as callables.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import libvirt
from nova import exception as nova_exception
from nova import objects
from nova.i18n import _
from nova.virt.libvirt import utils as libvirt_utils
from oslo_config import cfg
from oslo_log import log as logging
from oslo_serialization import jsonutils

from nova_imgtype import exception
from nova_imgtype import record as record_mod
from nova_imgtype import traits
from nova_imgtype.stock import driver_steps
from nova_imgtype.stock import migration_xml
from nova_imgtype.virt.libvirt import file_formats
from nova_imgtype.virt.libvirt import instance_disks
from nova_imgtype.virt.libvirt import live_migration
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import remote_storage
from nova_imgtype.virt.libvirt import resolver as resolver_mod

LOG = logging.getLogger(__name__)


def copies_disks(migrate_data: Any) -> bool:
    """Whether the migration copies the instance's disks (a block
    migration between hosts sharing neither instance path nor disks)."""
    return bool(migrate_data.block_migration and
                not migrate_data.is_shared_instance_path and
                not migrate_data.is_shared_block_storage)


class LiveMoves:
    """This host's part of the live migrations of recorded instances.

    :param resolver: the instances' records.
    :param disks: the instances' disks on this host's pools.
    :param stock: stock's steps of the driver (an instance's guest, the
        libvirt URI of a destination host).
    :param conf: the configuration nova-compute runs with.
    """

    def __init__(self, resolver: resolver_mod.BackendResolver,
                 disks: instance_disks.InstanceDisks,
                 stock: driver_steps.StockSteps,
                 conf: cfg.ConfigOpts) -> None:
        self._resolver = resolver
        self._disks = disks
        self._stock = stock
        self._conf = conf
        #: Instances whose disks this host made for a live migration
        #: arriving here (:meth:`arrive`), until it ends: this host's own
        #: knowledge, which no save of the instance elsewhere drops.
        self.arrivals: dict[str, resolver_mod.BackendDecision] = {}

    # -- checks -------------------------------------------------------------

    def check_destination(self, instance: objects.Instance) -> str:
        """The instance's backend, which this host (the destination)
        serves; the source compares it with its own.

        :raises MigrationPreCheckError: this host cannot serve it.
        """
        try:
            self._resolver.ensure_served(instance, self._conf.host,
                                         arriving=True)
        except nova_exception.Invalid as e:
            raise nova_exception.MigrationPreCheckError(reason=str(e)) from e
        return self._resolver.backend_for(instance)

    def shares_block_storage(self, instance: objects.Instance,
                             dest_check_data: Any,
                             backend_shared: Callable[[], bool]) -> bool:
        """Whether the destination reaches the instance's disks: it runs
        the same backend (its check data says which) and that backend is
        shared block storage (``backend_shared``, the instance's image
        backend's answer)."""
        return bool(dest_check_data.obj_attr_is_set('image_type') and
                    self._resolver.backend_for(instance) ==
                    dest_check_data.image_type and backend_shared())

    def check_source(self, context: Any, instance: objects.Instance) -> None:
        """Refuse, before anything is touched, a live migration of disks
        on a pool type libvirt cannot copy, or to a host without
        nova-imgtype.

        :raises MigrationPreCheckError: naming the instance and why.
        """
        self._check_destination_runs_imgtype(context, instance)
        decision = self._resolver.decision_for(instance)
        if decision.storage != resolver_mod.POOLS:
            return
        # dir volumes are copied (block migration); rbd ones are shared by
        # every host of the cluster and stay where they are.
        kind = pool_specs.pool_type(self._disks.instance_pool(instance))
        if kind not in ('dir', 'rbd'):
            reason = exception.NotSupportedOnPools(
                operation='Live migration of disks on %s pools' % kind,
                instance_uuid=instance.uuid)
            raise nova_exception.MigrationPreCheckError(reason=str(reason))

    def _check_destination_runs_imgtype(self, context: Any,
                                        instance: objects.Instance) -> None:
        """The scheduler's ``instance_backend`` request filter never picks
        a host without a ``CUSTOM_IMGTYPE_BACKEND_*`` trait; a forced live
        migration (microversions 2.30 to 2.67) bypasses the scheduler, and
        the destination's own check is then stock's. The destination is
        the one of the conductor's migration record, still ``accepted``
        while the hosts are checked.
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

    # -- the source ---------------------------------------------------------

    def volume_disk_info(self, instance: objects.Instance
                         ) -> list[dict[str, Any]]:
        """The disk info of the instance's volumes, which stock's
        ``get_instance_disk_info`` skips (``<disk type='volume'>``): what
        a live block migration copies besides stock's files."""
        decision = self._resolver.decision_for(instance)
        return [live_migration.volume_disk_info(
                    self._local_volume(instance, disk),
                    decision.volume_format(disk.name))
                for disk in self._local_disks(instance,
                                              with_config_drive=True)
                if disk.source_type == 'volume']

    def add_copy_paths(self, instance: objects.Instance, guest: Any,
                       paths: list[str], names: list[str]
                       ) -> tuple[list[str], list[str]]:
        """Stock's disk paths and target names for libvirt to copy, and
        the instance's volumes stock does not list."""
        for disk in self._local_disks(instance, guest):
            if disk.source_type == 'volume' and disk.target not in names:
                paths.append(self._local_volume(instance, disk).path())
                names.append(disk.target)
        return paths, names

    def guest_for_destination(self, context: Any,
                              instance: objects.Instance, dest: str,
                              migrate_data: Any, guest: Any) -> Any:
        """The guest, sending the destination the XML of its disks there
        (and the config drive's content, which libvirt does not copy).

        :raises MigrationError: a pool instance going to a host that made
            no disks for it (one without nova-imgtype), or the config
            drive's copy failed.
        """
        decision = self._resolver.recorded(instance)
        if decision is None or not copies_disks(migrate_data):
            return guest
        arrival = self._resolver.recorded_arrival(
            _fresh(context, instance), dest)
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
        """Write the config drive into the empty one the destination made,
        as a libvirt stream over the connection the migration itself
        opens; a failure rolls the migration back (the destination removes
        what it made)."""
        src = drive.path or self._local_volume(instance, drive).path()
        target = live_migration.destination_path(instance.uuid, drive,
                                                 storage, directory)
        # The address stock's _live_migration_operation connects to.
        if ('target_connect_addr' in migrate_data and
                migrate_data.target_connect_addr is not None):
            dest = migrate_data.target_connect_addr
        try:
            remote_storage.LibvirtRemoteFilesystem(
                self._stock.live_migration_uri).fill(src, dest, target)
        except (libvirt.libvirtError, OSError) as e:
            raise nova_exception.MigrationError(reason=_(
                'cannot copy the config drive %(src)s of instance %(uuid)s '
                'to %(dest)s:%(target)s: %(error)s') % {
                    'src': src, 'uuid': instance.uuid, 'dest': dest,
                    'target': target, 'error': e}) from e

    def _local_disks(self, instance: objects.Instance, guest: Any = None,
                     with_config_drive: bool = False
                     ) -> list[live_migration.LocalDisk]:
        """A pool instance's own disks: those libvirt copies, and its
        read-only config drive (the source sends it) if asked."""
        if self._resolver.decision_for(instance).storage != \
                resolver_mod.POOLS:
            return []
        xml = (guest or self._stock.guest(instance)).get_xml_desc()
        path = libvirt_utils.get_instance_path(instance)
        disks = live_migration.local_disks(xml, instance.uuid, path)
        drive = live_migration.config_drive(xml, instance.uuid, path)
        return disks + [drive] if with_config_drive and drive else disks

    def _local_volume(self, instance: objects.Instance,
                      disk: live_migration.LocalDisk) -> Any:
        pools = self._disks.pools
        name = pool_specs.volume_name(instance.uuid, disk.name)
        vol = pools.find_volume(pools.get(disk.pool), name)
        if vol is None:
            raise exception.VolumeNotFound(pool=disk.pool, volume=name)
        return vol

    # -- the destination ----------------------------------------------------

    def arrive(self, instance: objects.Instance, migrate_data: Any,
               disk_info: str | None,
               stock: Callable[[str | None], Any]) -> Any:
        """Make the arriving instance's disks where this host keeps them.

        Volumes of this host's pool or files in the instance directory
        (:meth:`BackendResolver.arrival`), each made as stock makes it (an
        overlay on the template fetched into this host's image cache, or an
        empty disk of the same size) for libvirt to fill. Where they are is
        recorded in the instance for the source, which writes the guest
        XML this host gets. ``stock`` is stock's ``pre_live_migration``
        given the disk info of the disks it makes; its answer is returned.
        An instance without a record, or a migration that copies nothing,
        is stock's alone.
        """
        decision = self._resolver.recorded(instance)
        if decision is None or not copies_disks(migrate_data):
            return stock(disk_info)
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
            result = stock(jsonutils.dumps(infos))
            if arrival.storage != resolver_mod.POOLS:
                # Each file stock made here in the format the source's
                # record gave it: named in the record where it is not the
                # backend's, listed in disk.info (never probed later from
                # the guest's bytes).
                arrival = file_formats.arrived(arrival, directory, infos)
                file_formats.write(arrival, directory)
            if arrival.storage == resolver_mod.POOLS:
                pools = self._disks.pools
                pool = pools.get(arrival.pool)
                directory = pool_specs.pool_target(pool)
                for info in empty:
                    pools.create_empty(
                        pool, pool_specs.volume_name(
                            instance.uuid, os.path.basename(info['path'])),
                        info['type'], info['virt_disk_size'])
        self.arrivals[instance.uuid] = arrival
        self._resolver.record_arrival(instance, self._conf.host, arrival,
                                      directory)
        instance.save()
        LOG.info('Live migration: disks made as %s%s', arrival.storage,
                 ' in pool %s' % arrival.pool if arrival.pool else '',
                 instance=instance)
        return result

    def roll_back(self, context: Any, instance: objects.Instance,
                  stock: Callable[[], Any]) -> Any:
        """Stock's rollback at this destination (``stock``), removing the
        disks :meth:`arrive` made here (recorded or not: it may have failed
        half-way), with the arrival record dropped."""
        decision = self._resolver.recorded(instance)
        self.arrivals.pop(instance.uuid, None)
        if decision is None:
            return stock()
        self._end_arrival(context, instance)
        with self._resolver.assume(instance,
                                   self._resolver.arrival(decision)):
            return stock()

    def record_here(self, context: Any, instance: objects.Instance,
                    block_migration: bool | None) -> bool:
        """Record where the disks are on this host, before stock's
        ``post_live_migration_at_destination``, which can fail: the
        compute manager saves the instance whatever happens (its host is
        this one then), and its record must say where the disks are here,
        not where they were on the source. Whether this host made the
        disks (a block migration: :meth:`define_arrived` then has work)."""
        made_here = self.arrivals.pop(instance.uuid, None)
        if self._resolver.recorded(instance) is None:
            return False
        recorded_arrival = self._end_arrival(context, instance)
        decision = self._resolver.decision_for(instance)
        # Whether this host made the disks: its own memory of its
        # pre_live_migration, else the arrival record it wrote there (a
        # restart in between), else stock's block_migration (None when the
        # API was asked for 'auto').
        if (made_here is None and recorded_arrival is None and
                not block_migration):
            # Shared storage: the disks are where they were, in this host's
            # pool of the same storage (an rbd pool may have another name
            # here).
            here = (self._disks.pools_here(decision)
                    if decision.storage == resolver_mod.POOLS else decision)
            if here != decision:
                self._resolver.record(instance, here)
            return False
        # The disks are where arrive() made them; the compute manager
        # saves the instance after this.
        arrival = made_here or self._resolver.arrival(decision)
        if arrival != decision:
            self._resolver.record(instance, arrival)
            LOG.info('Disks now %s%s', arrival.storage,
                     ' in pool %s' % arrival.pool if arrival.pool else '',
                     instance=instance)
        return True

    def define_arrived(self, instance: objects.Instance) -> None:
        """Once stock has ended the arrival here: the guest, which runs on
        its volumes named by path (:func:`.live_migration.destination_xml`),
        is defined on them as volumes of this host's dir pool, as a guest
        started here is. Its next stop leaves a definition every step
        finds its disks by (a cold move lists them while moving them out
        of the pool)."""
        decision = self._resolver.decision_for(instance)
        if decision.storage != resolver_mod.POOLS or not decision.pool:
            return
        pool = self._disks.pools.get(decision.pool)
        if pool_specs.pool_type(pool) != 'dir':
            return      # rbd: network disks, never named by path
        xml = self._stock.guest(instance).get_xml_desc(dump_inactive=True)
        defined = live_migration.persistent_xml(
            xml, instance.uuid, decision.pool, pool_specs.pool_target(pool))
        if defined != xml:
            self._stock.define(defined)
            LOG.debug('Defined on the volumes of pool %s', decision.pool,
                      instance=instance)

    def _end_arrival(self, context: Any,
                     instance: objects.Instance) -> tuple[str, str] | None:
        """Drop this host's arrival record; what it was.

        ``instance`` (the copy the source sent, which the compute manager
        saves whole after this) gets the record as saved, less the
        arrival: its stale copy of the record is not saved back.
        """
        fresh = _fresh(context, instance)
        arrival = self._resolver.recorded_arrival(fresh, self._conf.host)
        if self._resolver.drop_arrival(fresh):
            fresh.save()
        record_mod.sync(instance, fresh.system_metadata)
        return arrival


def _fresh(context: Any, instance: objects.Instance) -> Any:
    """The instance's system metadata as saved by another host."""
    return objects.Instance.get_by_uuid(
        context, instance.uuid, expected_attrs=['system_metadata'])
