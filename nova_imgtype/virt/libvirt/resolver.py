"""The one place that decides which image backend an instance uses.

A new instance gets its backend from the disk_format of its image:
``[libvirt]images_type_mapping`` when the format is mapped (and then the image
is used in its own format), ``[libvirt]images_type`` otherwise (converted as
stock Nova does). The decision is recorded in the instance's system metadata
and every later operation asks :meth:`BackendResolver.backend_for`, so a
change of configuration never moves an existing instance to another backend.

Instances without a record (created before nova-imgtype) behave exactly as
stock Nova: they follow ``images_type`` of the moment.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from collections.abc import Iterator

from nova import objects
from oslo_config import cfg
from oslo_log import log as logging
from oslo_serialization import jsonutils

from nova_imgtype import exception
from nova_imgtype import record as record_mod
from nova_imgtype.stock import assumed_decision
from nova_imgtype.virt.libvirt import backends
from nova_imgtype.virt.libvirt import mapping as mapping_mod
from nova_imgtype.virt.libvirt import pool_specs

SYSMETA_BACKEND = record_mod.BACKEND
SYSMETA_NATIVE = record_mod.NATIVE
SYSMETA_STORAGE = record_mod.STORAGE
SYSMETA_POOL = record_mod.POOL
SYSMETA_ARRIVAL = record_mod.ARRIVAL
POOLS = record_mod.POOLS
LEGACY = record_mod.LEGACY
#: Backends that storage pools implement: dir pools for the file formats,
#: a logical pool for lvm, an rbd pool for rbd.
POOL_BACKENDS = frozenset(pool_specs.POOL_TYPES)
#: Backends whose disks are files, or volumes of a dir pool: a live block
#: migration moves them between the two (the data are copied by libvirt).
FILE_BACKENDS = frozenset(b for b, t in pool_specs.POOL_TYPES.items()
                          if t == 'dir')
#: The LibvirtStorage backend's own name: mapped, it means "this format,
#: natively, on storage pools" whatever use_storage_pools says.
STORAGE_BACKEND = 'libvirt_storage'

LOG = logging.getLogger(__name__)


#: Glance formats whose bytes are a raw disk: stock never converts them.
RAW_FORMATS = frozenset(('raw', 'ami', 'ari', 'aki', 'iso'))
#: Formats qemu-img converts to raw under ``force_raw_images``.
CONVERTIBLE_FORMATS = frozenset(('vmdk', 'vdi', 'vhd', 'vhdx'))


BackendDecision = record_mod.BackendDecision


@dataclasses.dataclass(frozen=True)
class FormatPlan:
    """What happens to an image of one disk_format on this host."""

    disk_format: str
    backend: str
    converted: bool
    mapped: bool
    storage: str = LEGACY


#: A decision assumed, in this thread, for one instance (uuid, decision).
class BackendResolver:
    """Decides, records and looks up instances' image backends."""

    def __init__(self, conf: cfg.ConfigOpts,
                 locate: Callable[[str, str], str | None] | None = None
                 ) -> None:
        """:param locate: given a recorded pool's location and name, the
            name of this host's pool of that storage, the location itself
            when this host has only a pool of another storage by that name,
            None when it has neither (see :meth:`recorded`); without it
            (the CLIs), recorded pool names are taken as they are."""
        self._conf = conf
        self._locate = locate

    @property
    def mapping(self) -> mapping_mod.ImagesTypeMapping:
        return self._conf.libvirt.images_type_mapping

    def default_backend(self) -> str:
        """The backend of unmapped formats: ``images_type``, resolved."""
        return backends.resolve_name(self._conf.libvirt.images_type,
                                     self._conf.use_cow_images)

    def check_host(self) -> None:
        """Validate the configuration against this host.

        :raises InvalidImagesTypeMapping: for a mapped backend this host
            cannot serve.
        """
        mapping_mod.check_host(self.mapping, self._conf)

    def decide(self, disk_format: str | None) -> BackendDecision:
        """The backend a new instance booted from such an image gets.

        :param disk_format: the image's disk_format, None when booted from
            volume (its ephemeral and swap disks use ``images_type``).
        """
        mapped = self.mapping.get(disk_format) if disk_format else None
        native: tuple[str, ...]
        if mapped is None:
            backend, native = self.default_backend(), ()
        else:
            backend, native = mapped, self.mapping.formats_for(mapped)
        if backend == STORAGE_BACKEND:
            backend = 'qcow2' if disk_format == 'qcow2' else 'flat'
            return self.with_storage(self.with_config_drive(
                BackendDecision(backend, native)), POOLS)
        return self.with_storage(
            self.with_config_drive(BackendDecision(backend, native)),
            self.storage_for(backend))

    @staticmethod
    def with_config_drive(decision: BackendDecision) -> BackendDecision:
        """``decision`` with where the instance's config drive is made,
        when it is made anew (a build, a rebuild, an evacuation, an
        unshelve).

        An instance on rbd has its config drive where stock puts it (in
        Ceph on an rbd host: shared, as its disks are). Any other
        instance's is a raw file of the instance, as stock makes it on any
        host but an rbd one: its disks are not shared, and a host that
        destroys its disks (an evacuated instance's source coming back)
        removes every ``{uuid}*`` image in Ceph (stock's
        ``_cleanup_rbd``), which would include a config drive another host
        uses.
        """
        return dataclasses.replace(
            decision, config_drive='' if decision.backend == 'rbd'
            else record_mod.LOCAL)

    def pool_for(self, backend: str) -> str:
        """The name of this host's disks pool implementing ``backend``."""
        return pool_specs.disks_pool_name_for(self._conf, backend)

    def with_storage(self, decision: BackendDecision,
                     storage: str) -> BackendDecision:
        """``decision`` moved to ``storage`` (and this host's pool: its
        name here and the type and place of its storage)."""
        if storage != POOLS:
            return dataclasses.replace(decision, storage=storage, pool='',
                                       pool_location='')
        spec = pool_specs.disks_pool_spec(self._conf, decision.backend)
        return dataclasses.replace(
            decision, storage=storage, pool=spec.name,
            pool_location=pool_specs.location_key(spec))

    def pool_backends(self) -> list[str]:
        """Backends this host makes pool volumes for (images_type first)."""
        if not self._conf.libvirt.use_storage_pools:
            return []
        names = [self.default_backend(),
                 *('qcow2' if b == STORAGE_BACKEND else b
                   for b in self.mapping.values())]
        return [b for b in dict.fromkeys(names) if b in POOL_BACKENDS]

    def storage_for(self, backend: str) -> str:
        """Where this host makes new disks of ``backend``: ``pools`` when
        ``[libvirt]use_storage_pools`` is on and this host has a pool of
        the type that implements it (those of :meth:`pool_backends`, its
        ``images_type``'s and its mapping's); files otherwise, as stock
        makes them (an instance of a file backend unshelved or arriving on
        a host whose only pool is rbd)."""
        here = {pool_specs.POOL_TYPES[b] for b in self.pool_backends()}
        return (POOLS if backend in POOL_BACKENDS and
                pool_specs.POOL_TYPES[backend] in here else LEGACY)

    def plan(self, disk_format: str) -> FormatPlan:
        """What a new instance booted from a ``disk_format`` image gets."""
        decision = self.decide(disk_format)
        if decision.is_native(disk_format):
            converted = False
        else:
            # Stock: fetch_to_raw converts anything but raw when
            # force_raw_images is set, and nothing otherwise; a raw volume
            # of a pool is converted when it is made (createXMLFrom,
            # qemu-img into rbd).
            converted = disk_format not in RAW_FORMATS and (
                self._conf.force_raw_images or (
                    decision.storage == POOLS and
                    decision.backend != 'qcow2'))
        return FormatPlan(disk_format, decision.backend, converted,
                          disk_format in self.mapping, decision.storage)

    def supported_formats(self) -> set[str]:
        """Disk formats this host can boot, following the mapping.

        Stock rules for ``images_type`` (lvm and rbd take only raw unless
        ``force_raw_images`` converts; ploop needs parallels); images that
        ``force_raw_images`` converts with qemu-img (vmdk, vdi, vhd, vhdx)
        where it is on; lvm and rbd on storage pools, where libvirt or
        qemu-img converts to raw when the volume is made, take qcow2 too;
        and every mapped format.
        """
        formats = set(RAW_FORMATS)
        default = self.default_backend()
        force_raw = self._conf.force_raw_images
        on_pools = self.storage_for(default) == POOLS
        if force_raw or on_pools or default not in ('rbd', 'lvm'):
            formats.add('qcow2')
        if force_raw:
            formats.update(CONVERTIBLE_FORMATS)
        if self._conf.libvirt.virt_type == 'parallels':
            formats.add('ploop')
        formats.update(self.mapping)
        return formats

    def native_formats(self) -> set[str]:
        """Disk formats this host boots as they are, without conversion."""
        return {fmt for fmt in self.supported_formats()
                if not self.plan(fmt).converted}

    def recorded(self, instance: objects.Instance
                 ) -> BackendDecision | None:
        """The recorded decision, or None for an instance from before us.

        A pool instance's pool is this host's pool of the recorded storage
        (its type and place), whatever its name here or on the host that
        recorded it; on a host with no pool of it whose stock rbd disks
        are in the recorded Ceph pool, its disks are those
        (:meth:`_stock_rbd_holds`), and the decision says so. When this
        host has none otherwise, the recorded name stays unless this host
        has a pool of that name over other storage: then the pool is named
        by the location, which no pool here has (looking it up finds
        nothing, never another pool of the same name). Within
        :meth:`assume` for this instance: the assumed decision.
        """
        assumed: BackendDecision | None = assumed_decision.get(
            instance.uuid)
        if assumed is not None:
            return assumed
        # Pool instances recorded before pool names were: nova-disks-pool.
        decision = record_mod.read(instance.system_metadata,
                                   pool_specs.DISKS_POOL)
        if (decision is None or not decision.pool_location or
                self._locate is None):
            return decision
        here = self._rbd_pool_by_fsid(decision)
        if here is None:
            here = self._locate(decision.pool_location, decision.pool)
        if here is None or here == decision.pool_location:
            # No pool of that storage here.
            if self._stock_rbd_holds(decision):
                return self.with_storage(decision, LEGACY)
            if here is None:
                here = decision.pool
        return (decision if here == decision.pool else
                dataclasses.replace(decision, pool=here))

    def _rbd_pool_by_fsid(self, decision: BackendDecision) -> str | None:
        """This host's rbd disks pool when the recorded location is of
        its Ceph cluster by fsid; the location itself (which names no
        pool) when it is of another cluster; None when the fsid cannot
        tell (a record without one, a host without an rbd pool, a cluster
        that does not answer now): the pools are then looked up by their
        definitions, whose monitors libvirt keeps and whose fsid it does
        not."""
        if (not pool_specs.location_fsid(decision.pool_location) or
                'rbd' not in self.pool_backends()):
            return None
        try:
            here = self._rbd_location_here()
        except exception.StorageUnavailable as e:
            LOG.debug('Ceph cluster not identified, the rbd pool is looked '
                      'up by its monitors: %s', e)
            return None
        if pool_specs.same_storage(here, decision.pool_location):
            return self.pool_for('rbd')
        return decision.pool_location

    def _rbd_location_here(self) -> str:
        """The location key of this host's rbd disks pool (its Ceph pool,
        the monitors and the fsid its cluster reports: asked of the
        cluster once per process, :mod:`.ceph_cluster`)."""
        return pool_specs.location_key(
            pool_specs.disks_pool_spec(self._conf, 'rbd'))

    def _stock_rbd_holds(self, decision: BackendDecision) -> bool:
        """Whether the disks of an instance recorded on an rbd pool,
        which this host has no pool of, are stock's rbd disks here: this
        host makes no rbd pool volumes (a host that does has its rbd pool,
        and a missing one is an error that says so), serves rbd
        (``images_type`` or the mapping) and its
        ``images_rbd_pool`` is that Ceph pool of the same cluster (the
        fsid the cluster of ``images_rbd_ceph_conf`` reports; a monitor
        host in common for a record without one). They are the same RBD
        images by the same names (``{uuid}_{disk}``), so stock's Rbd
        backend serves them here as it serves its own.
        """
        if (decision.storage != POOLS or decision.backend != 'rbd' or
                not pool_specs.is_shared_location(decision.pool_location) or
                'rbd' in self.pool_backends()):
            return False
        if 'rbd' not in (self.default_backend(), *self.mapping.values()):
            return False
        return pool_specs.same_storage(self._rbd_location_here(),
                                       decision.pool_location)

    @staticmethod
    def record(instance: objects.Instance,
               decision: BackendDecision) -> None:
        """Record the decision in the instance (the caller saves it)."""
        record_mod.write(instance, decision)

    @staticmethod
    @contextlib.contextmanager
    def assume(instance: objects.Instance,
               decision: BackendDecision) -> Iterator[None]:
        """Within the block, in this thread only, the instance's decision
        is ``decision`` (nothing is recorded): the disks a destination makes
        for an instance that is not there yet, and removes if it never
        comes."""
        with assumed_decision.assumed(instance.uuid, decision):
            yield

    def arrival(self, decision: BackendDecision) -> BackendDecision:
        """Where this host makes the disks of an instance arriving by a
        live block migration.

        Disks of the file backends (qcow2, raw, flat) are volumes of this
        host's dir pool when it has storage pools and files in the instance
        directory when it has none, whatever they were on the source: the
        copy libvirt makes moves them (a legacy instance moves into the
        pools, as the spec wants). Other backends stay as they are.
        """
        if decision.backend not in FILE_BACKENDS:
            return decision
        return self.with_storage(decision, self.storage_for(decision.backend))

    def adopted(self, decision: BackendDecision,
                file_formats: dict[str, str]) -> BackendDecision:
        """A legacy instance whose disk files this host's dir pool adopts
        as they are, each in its format as stock recorded it
        (``file_formats``, from its ``disk.info``): the instance is
        ``qcow2`` when its root disk is a qcow2 file, ``flat`` otherwise,
        and each disk of another format than that backend's is recorded
        with its own."""
        backend = 'qcow2' if file_formats.get('disk') == 'qcow2' else 'flat'
        adopted = dataclasses.replace(decision, backend=backend,
                                      disk_formats=())
        own = tuple((name, fmt) for name, fmt in sorted(file_formats.items())
                    if adopted.volume_format(name) != fmt)
        return self.with_storage(
            dataclasses.replace(adopted, disk_formats=own), POOLS)

    def made_anew(self, decision: BackendDecision) -> BackendDecision:
        """An instance whose disks this host makes anew (unshelve): where
        it makes new disks of the backend."""
        return self.with_storage(decision,
                                 self.storage_for(decision.backend))

    @staticmethod
    def record_arrival(instance: objects.Instance, host: str,
                       decision: BackendDecision, directory: str) -> None:
        """Record where ``host`` makes the instance's disks for a live
        migration: ``decision`` there, the disks in ``directory`` (the
        caller saves the instance)."""
        record_mod.set_value(instance, SYSMETA_ARRIVAL, jsonutils.dumps(
            {'host': host, 'storage': decision.storage,
             'pool': decision.pool, 'directory': directory}))

    @staticmethod
    def recorded_arrival(instance: objects.Instance,
                         host: str) -> tuple[str, str] | None:
        """(storage, directory) recorded by :meth:`record_arrival` for
        ``host``; None if ``host`` recorded nothing (it does not run
        nova-imgtype, or the migration never reached it)."""
        raw = record_mod.get_value(instance, SYSMETA_ARRIVAL)
        if not raw:
            return None
        arrival = jsonutils.loads(raw)
        if arrival.get('host') != host:
            return None
        return arrival['storage'], arrival['directory']

    @staticmethod
    def drop_arrival(instance: objects.Instance) -> bool:
        """Forget the arrival record (the caller saves the instance if this
        returns True)."""
        return record_mod.set_value(instance, SYSMETA_ARRIVAL, None)

    def decision_for(self, instance: objects.Instance) -> BackendDecision:
        """The instance's decision: recorded, or stock's for legacy ones."""
        return self.recorded(instance) or BackendDecision(
            self.default_backend())

    def backend_for(self, instance: objects.Instance) -> str:
        """The name of the backend the instance's disks are on."""
        return self.decision_for(instance).backend

    def ensure_served(self, instance: objects.Instance, host: str,
                      arriving: bool = False) -> None:
        """Refuse an instance whose recorded backend this host can't serve.

        :param arriving: the instance arrives by a live block migration:
            its disks are what :meth:`arrival` says here.
        :raises BackendNotServedByHost: naming the instance, backend, host and
            the reason.
        """
        decision = self.recorded(instance)
        if decision is None:
            return
        if arriving:
            decision = self.arrival(decision)
        try:
            reason = backends.host_support_error(decision.backend,
                                                 self._conf)
            if not reason and decision.storage == POOLS:
                reason = backends.host_support_error(STORAGE_BACKEND,
                                                     self._conf)
        except exception.UnknownImageBackend as e:
            reason = str(e)
        if reason:
            raise exception.BackendNotServedByHost(
                instance_uuid=instance.uuid, backend=decision.backend,
                host=host, reason=reason)
