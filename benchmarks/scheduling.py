"""Latency of stock Nova's ``SchedulerManager.select_destinations``.

Stock Nova 34's real scheduling path (request filters, placement allocation
candidates, HostManager host states, host filters, weighers, the claim in
placement) against in-process placement (openstack-placement, through
Nova's own ``PlacementFixture``) and in-memory SQLite API/cell databases
(Nova's ``Database``/``CellDatabases`` fixtures), with 100, 1,000 and
5,000 compute nodes, in three configurations measured side by side in the
same run:

* ``stock``: no image-type filtering (Nova's defaults, including its own
  ``[scheduler]query_placement_for_image_type_support = False``);
* ``request filter``: nova-imgtype's ``image_type_support`` request filter
  (``[scheduler]filter_hosts_by_image_type_support = True``), placement
  returns only hosts with ``COMPUTE_IMAGE_TYPE_QCOW2``;
* ``host filter``: ``ImageTypeSupportFilter`` first in
  ``[filter_scheduler]enabled_filters``, before Nova's defaults, as the
  operator's guide says to name it (toggle off): it reads each host's
  image-type traits in its compute node's stats (no placement request:
  every compute node here lists them, as nova-imgtype's driver does), and
  the filters after it see only the hosts it keeps.

Every second compute node carries the image's trait (in placement, and in
the compute node's stats as nova-imgtype's driver lists it; every
configuration's scheduler loads those stats, stock's too, one more short
string per node). The request boots one
qcow2 image with a 1 vCPU / 512 MiB / 1 GiB flavor, as the conductor asks
(one instance uuid, alternates wanted); its allocation is removed after
each call, untimed. ``[scheduler]max_placement_results`` is raised to
10,000 so placement's candidates are not truncated.

The compute nodes are data, not services: one template compute node is
made the ordinary way (resource provider, inventories and traits through
placement's REST API; Service, ComputeNode and HostMapping through Nova's
objects) and copied row by row into the placement and Nova databases in
bulk (placement's REST API takes ~35 ms per provider here, ~3 minutes for
5,000). The scheduler sees the steady state of running computes: services
up (``service_down_time`` raised so that the run's length does not take
them down), instance info in sync as nova-compute's periodic
``sync_instance_info`` leaves it (see :func:`_sync_instance_info`).

One warm-up call per configuration and scale is excluded; figures are the
median (and 90th percentile where there are at least 10 calls) of the
timed calls, configurations interleaved call by call (each round starting
with the next one; garbage collected before each call, untimed, so that no
configuration pays for the collections the calls before it made necessary);
the candidates and
passing hosts of every timed call are checked, untimed. Logging below
WARNING is disabled while measuring.

Inside each call, the time spent in nova-imgtype's own code is measured
too (``imgtype ms``): its request filters (``image_type_support``, and
``instance_backend``, which looks the request's instance up in the API
database in every configuration that loads nova-imgtype's filters, to keep
a moved instance on hosts serving its recorded backend) and, in the host
filter configuration, ``ImageTypeSupportFilter.filter_all``. That is what
the plugin adds to stock's work; what it takes away is stock's filters and
weighers on the hosts it leaves out.
"""

from __future__ import annotations

import copy
import datetime
import functools
import gc
import logging
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any
from unittest import mock

import fixtures
import nova.conf
import os_traits
import sqlalchemy as sa
from nova import context as nova_context
from nova import objects
from nova import thread_pool_factory
from nova.db.api import api as api_db_api
from nova.db.api import models as api_models
from nova.db.main import api as main_db_api
from nova.db.main import models as main_models
from nova.scheduler import manager as scheduler_manager
from nova.scheduler import request_filter
from nova.scheduler.client import report
from nova.tests import fixtures as nova_fixtures
from nova.tests.functional import fixtures as func_fixtures
from oslo_serialization import jsonutils
from placement import db_api as placement_db_api
from placement.db.sqlalchemy import models as placement_models

import nova_imgtype.conf  # noqa: F401  registers our scheduler option
from benchmarks import tables
from nova_imgtype import traits as imgtype_traits
from nova_imgtype.scheduler import filters as imgtype_filters

CONF = nova.conf.CONF

#: Compute nodes (= resource providers), in the order they are added.
SCALES = (100, 1000, 5000)
#: Every TRAIT_EVERY-th compute node supports the image's disk format.
TRAIT_EVERY = 2
DISK_FORMAT = 'qcow2'
IMAGE_TRAIT = os_traits.COMPUTE_IMAGE_TYPE_QCOW2

STOCK = 'stock (no image-type filtering)'
REQUEST = 'request filter (image_type_support)'
HOST = 'host filter (ImageTypeSupportFilter)'
CONFIGS = (STOCK, REQUEST, HOST)

#: Timed calls per scale and configuration (after one warm-up call): fewer
#: calls at large scales keep the whole module within a few minutes on two
#: cores.
RUNS: dict[int, dict[str, int]] = {
    100: {STOCK: 31, REQUEST: 31, HOST: 31},
    1000: {STOCK: 11, REQUEST: 11, HOST: 11},
    5000: {STOCK: 5, REQUEST: 5, HOST: 5},
}

MAX_PLACEMENT_RESULTS = 10000
#: New hosts per scale whose instance info goes through the real
#: ``sync_instance_info`` (see :func:`_sync_instance_info`).
SYNC_THROUGH_API = 50

NOVA_FILTERS = 'nova.scheduler.filters.all_filters'
OUR_FILTERS = 'nova_imgtype.scheduler.filters.all_filters'

#: What a libvirt/KVM compute node reports, apart from the image types.
COMMON_TRAITS = (
    os_traits.COMPUTE_NODE,
    os_traits.OWNER_NOVA,
    os_traits.COMPUTE_IMAGE_TYPE_RAW,
    os_traits.COMPUTE_IMAGE_TYPE_ISO,
    os_traits.COMPUTE_IMAGE_TYPE_AMI,
    os_traits.COMPUTE_IMAGE_TYPE_ARI,
    os_traits.COMPUTE_IMAGE_TYPE_AKI,
    os_traits.COMPUTE_NET_ATTACH_INTERFACE,
    os_traits.COMPUTE_NET_ATTACH_INTERFACE_WITH_TAG,
    os_traits.COMPUTE_VOLUME_ATTACH_WITH_TAG,
    os_traits.COMPUTE_VOLUME_EXTEND,
    os_traits.COMPUTE_VOLUME_MULTI_ATTACH,
    os_traits.COMPUTE_DEVICE_TAGGING,
    os_traits.COMPUTE_TRUSTED_CERTS,
    os_traits.HW_CPU_X86_SSE42,
    os_traits.HW_CPU_X86_AVX,
    os_traits.HW_CPU_X86_AVX2,
)
INVENTORY = {
    'VCPU': {'total': 32, 'max_unit': 32, 'allocation_ratio': 4.0},
    'MEMORY_MB': {'total': 131072, 'reserved': 512, 'max_unit': 131072,
                  'allocation_ratio': 1.0},
    'DISK_GB': {'total': 2000, 'max_unit': 2000, 'allocation_ratio': 1.0},
}
PLACEMENT_VERSION = '1.36'


class _Cloud(fixtures.Fixture):
    """Nova's config, RPC, API/cell databases and placement, in-process."""

    def _setUp(self) -> None:
        self.useFixture(nova_fixtures.ConfFixture(CONF))
        self.useFixture(nova_fixtures.OpenStackSDKFixture())
        self.useFixture(nova_fixtures.RPCFixture('nova.test'))
        objects.register_all()
        nova_context.reset_globals()
        objects.Service.clear_min_version_cache()
        self.useFixture(nova_fixtures.Database(database='api'))
        ctxt = nova_context.get_admin_context()
        cells = nova_fixtures.CellDatabases()
        for name, cell_uuid in (('cell0', objects.CellMapping.CELL0_UUID),
                                ('cell1', str(uuid.uuid4()))):
            cell = objects.CellMapping(
                context=ctxt, uuid=cell_uuid, name=name,
                transport_url='fake://nowhere/',
                database_connection=cell_uuid)
            cell.create()
            cells.add_cell_database(cell_uuid, default=name == 'cell1')
        self.cell = cell
        self.useFixture(cells)
        self.placement = self.useFixture(func_fixtures.PlacementFixture())
        report.PLACEMENTCLIENT = None
        self.addCleanup(setattr, report, 'PLACEMENTCLIENT', None)
        saved = list(request_filter.ALL_REQUEST_FILTERS)
        self.addCleanup(request_filter.ALL_REQUEST_FILTERS.__setitem__,
                        slice(None), saved)


class _Probe:
    """What the last select_destinations saw: placement's allocation
    candidates (and the seconds spent getting them) and the hosts that
    passed the host filters."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.candidates = -1
        self.passed = -1
        self.candidates_s = 0.0
        self.imgtype_s = 0.0

    def timed(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` (nova-imgtype's code the scheduler calls), its seconds
        added to :attr:`imgtype_s`."""
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.imgtype_s += time.perf_counter() - start
        return wrapper

    def wrap_candidates(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def get_allocation_candidates(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            res = fn(*args, **kwargs)
            self.candidates_s += time.perf_counter() - start
            self.candidates = len(res[0] or []) if res else 0
            return res
        return get_allocation_candidates

    def wrap_filtered(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def get_filtered_hosts(hosts: Any, spec_obj: Any,
                               index: int = 0) -> Any:
            res = fn(hosts, spec_obj, index)
            if index == 0:
                self.passed = len(res or [])
            return res
        return get_filtered_hosts


class _Nodes:
    """Compute nodes: a template made through the APIs, copies in bulk."""

    def __init__(self, cloud: _Cloud, ctxt: Any) -> None:
        self.cloud = cloud
        self.ctxt = ctxt
        self.hosts: list[str] = []
        self.template: dict[str, Any] = {}

    def _host(self, index: int) -> str:
        return 'compute-%05d' % index

    def _traits(self, index: int) -> list[str]:
        traits = list(COMMON_TRAITS)
        if index % TRAIT_EVERY == 0:
            traits.append(IMAGE_TRAIT)
        return traits

    def _stats(self, index: int) -> dict[str, str]:
        """The stats nova-imgtype's driver gives its compute node: the
        image-type traits it reports to placement."""
        return imgtype_traits.to_stats(self._traits(index))

    def _make_template(self) -> None:
        host = self._host(0)
        rp_uuid = str(uuid.uuid4())
        api = self.cloud.placement.api
        rp = api.post('/resource_providers', {'name': host, 'uuid': rp_uuid},
                      version=PLACEMENT_VERSION).body
        inv = api.put('/resource_providers/%s/inventories' % rp_uuid, {
            'resource_provider_generation': rp['generation'],
            'inventories': INVENTORY}, version=PLACEMENT_VERSION).body
        api.put('/resource_providers/%s/traits' % rp_uuid, {
            'resource_provider_generation':
                inv['resource_provider_generation'],
            'traits': self._traits(0)}, version=PLACEMENT_VERSION)
        with nova_context.target_cell(self.ctxt, self.cloud.cell) as cctxt:
            service = objects.Service(
                context=cctxt, host=host, binary='nova-compute',
                topic='compute', report_count=1, disabled=False)
            service.create()
            vcpus = INVENTORY['VCPU']['total']
            ram = INVENTORY['MEMORY_MB']['total']
            disk = INVENTORY['DISK_GB']['total']
            objects.ComputeNode(
                context=cctxt, host=host, hypervisor_hostname=host,
                uuid=rp_uuid, service_id=service.id, vcpus=vcpus,
                memory_mb=ram, local_gb=disk, vcpus_used=0,
                memory_mb_used=512, local_gb_used=0, free_ram_mb=ram - 512,
                free_disk_gb=disk, disk_available_least=disk,
                current_workload=0, running_vms=0,
                hypervisor_type='QEMU', hypervisor_version=7002000,
                cpu_info='{"arch": "x86_64", "model": "host-model"}',
                host_ip='192.0.2.1',
                supported_hv_specs=[
                    objects.HVSpec(arch=arch, hv_type='kvm', vm_mode='hvm')
                    for arch in ('x86_64', 'i686')],
                stats=self._stats(0), metrics='[]', numa_topology=None,
                pci_device_pools=objects.PciDevicePoolList(objects=[]),
                cpu_allocation_ratio=4.0, ram_allocation_ratio=1.0,
                disk_allocation_ratio=1.0).create()
        objects.HostMapping(context=self.ctxt, host=host,
                            cell_mapping=self.cloud.cell).create()
        self.hosts.append(host)

    @staticmethod
    def _rows(conn: Any, table: sa.Table, column: str,
              value: Any) -> list[dict[str, Any]]:
        rows = conn.execute(sa.select(table).where(
            table.c[column] == value)).mappings().all()
        return [dict(r) for r in rows]

    def grow(self, total: int) -> list[str]:
        """Add compute nodes up to ``total``; the hosts added."""
        start = len(self.hosts)
        if start == 0:
            self._make_template()
        new = [self._host(i) for i in range(len(self.hosts), total)]
        if not new:
            return self.hosts[start:]
        indexes = range(len(self.hosts), total)
        uuids = [str(uuid.uuid4()) for _ in new]
        now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
        self._copy_placement(indexes, new, uuids, now)
        self._copy_nova(indexes, new, uuids, now)
        self.hosts += new
        return self.hosts[start:]

    def _copy_placement(self, indexes: range, hosts: list[str],
                        uuids: list[str], now: datetime.datetime) -> None:
        rps = placement_models.ResourceProvider.__table__
        invs = placement_models.Inventory.__table__
        rp_traits = placement_models.ResourceProviderTrait.__table__
        traits = placement_models.Trait.__table__
        engine = placement_db_api.get_placement_engine()
        with engine.begin() as conn:
            rp = self._rows(conn, rps, 'name', self._host(0))[0]
            inv = self._rows(conn, invs, 'resource_provider_id', rp['id'])
            trait_ids = dict(conn.execute(sa.select(
                traits.c.name, traits.c.id).where(traits.c.name.in_(
                    COMMON_TRAITS + (IMAGE_TRAIT,)))).all())
            next_id = conn.execute(sa.select(
                sa.func.max(rps.c.id))).scalar_one() + 1
            rp_rows, inv_rows, trait_rows = [], [], []
            for n, (index, host, rp_uuid) in enumerate(
                    zip(indexes, hosts, uuids, strict=True)):
                rp_id = next_id + n
                rp_rows.append(dict(
                    rp, id=rp_id, uuid=rp_uuid, name=host, created_at=now,
                    updated_at=now, root_provider_id=rp_id))
                inv_rows += [
                    {k: v for k, v in row.items() if k != 'id'} | {
                        'resource_provider_id': rp_id, 'created_at': now,
                        'updated_at': now} for row in inv]
                trait_rows += [{'trait_id': trait_ids[name],
                                'resource_provider_id': rp_id,
                                'created_at': now}
                               for name in self._traits(index)]
            conn.execute(rps.insert(), rp_rows)
            conn.execute(invs.insert(), inv_rows)
            conn.execute(rp_traits.insert(), trait_rows)

    def _copy_nova(self, indexes: range, hosts: list[str], uuids: list[str],
                   now: datetime.datetime) -> None:
        services = main_models.Service.__table__
        nodes = main_models.ComputeNode.__table__
        mappings = api_models.HostMapping.__table__
        with nova_context.target_cell(self.ctxt, self.cloud.cell) as cctxt:
            with main_db_api.get_context_manager(cctxt).writer.using(
                    cctxt) as session:
                conn = session.connection()
                svc = self._rows(conn, services, 'host', self._host(0))[0]
                node = self._rows(conn, nodes, 'host', self._host(0))[0]
                svc_id = conn.execute(sa.select(
                    sa.func.max(services.c.id))).scalar_one() + 1
                node_id = conn.execute(sa.select(
                    sa.func.max(nodes.c.id))).scalar_one() + 1
                svc_rows, node_rows = [], []
                for n, (index, host, rp_uuid) in enumerate(
                        zip(indexes, hosts, uuids, strict=True)):
                    svc_rows.append(dict(
                        svc, id=svc_id + n, uuid=str(uuid.uuid4()),
                        host=host, created_at=now, updated_at=now,
                        last_seen_up=now))
                    node_rows.append(dict(
                        node, id=node_id + n, uuid=rp_uuid, host=host,
                        hypervisor_hostname=host, service_id=svc_id + n,
                        stats=jsonutils.dumps(self._stats(index)),
                        created_at=now, updated_at=now))
                conn.execute(services.insert(), svc_rows)
                conn.execute(nodes.insert(), node_rows)
        with api_db_api.context_manager.writer.using(self.ctxt) as session:
            conn = session.connection()
            mapping = self._rows(conn, mappings, 'host', self._host(0))[0]
            conn.execute(mappings.insert(), [
                {'cell_id': mapping['cell_id'], 'host': host,
                 'created_at': now} for host in hosts])

    def check(self, total: int) -> None:
        """Placement's own view (REST) of what was copied."""
        api = self.cloud.placement.api
        every = api.get('/resource_providers', version=PLACEMENT_VERSION)
        having = api.get('/resource_providers?required=%s' % IMAGE_TRAIT,
                         version=PLACEMENT_VERSION)
        counts = (len(every.body['resource_providers']),
                  len(having.body['resource_providers']))
        wanted = (total, len(range(0, total, TRAIT_EVERY)))
        if counts != wanted:
            raise RuntimeError('placement has %s providers (%s with %s), '
                               'expected %s' % (counts[0], counts[1],
                                                IMAGE_TRAIT, wanted))


def _manager(config: str) -> scheduler_manager.SchedulerManager:
    """A SchedulerManager started with ``config``'s options."""
    available = [NOVA_FILTERS]
    enabled = list(CONF.filter_scheduler.enabled_filters)
    if config != STOCK:
        available.append(OUR_FILTERS)
    if config == HOST:
        enabled.insert(0, 'ImageTypeSupportFilter')
    CONF.set_override('available_filters', available, 'filter_scheduler')
    CONF.set_override('enabled_filters', enabled, 'filter_scheduler')
    futures = []
    spawn = thread_pool_factory.spawn

    def spawn_and_keep(fn: Callable[..., Any], *args: Any,
                       **kwargs: Any) -> Any:
        future = spawn(fn, *args, **kwargs)
        futures.append(future)
        return future

    try:
        with mock.patch.object(thread_pool_factory, 'spawn',
                               spawn_and_keep):
            manager = scheduler_manager.SchedulerManager()
    finally:
        CONF.clear_override('available_filters', 'filter_scheduler')
        CONF.clear_override('enabled_filters', 'filter_scheduler')
    for future in futures:  # the HostManager's initial instance info
        future.result()
    return manager


def _sync_instance_info(ctxt: Any, host_manager: Any,
                        hosts: list[str]) -> None:
    """Leave ``hosts`` as nova-compute's periodic ``sync_instance_info``
    does: known to the HostManager, no instances, in sync.

    The first hosts go through ``HostManager.sync_instance_info`` (twice:
    unknown host, then in sync; two database queries per host and manager);
    the others are given the state that produced, which is all it keeps.
    """
    synced = {'instances': {}, 'updated': True}
    for host in hosts[:SYNC_THROUGH_API]:
        for _ in range(2):
            host_manager.sync_instance_info(ctxt, host, [])
        if host_manager._instance_info.get(host) != synced:
            raise RuntimeError('sync_instance_info left %s as %r' % (
                host, host_manager._instance_info.get(host)))
    for host in hosts[SYNC_THROUGH_API:]:
        host_manager._instance_info[host] = copy.deepcopy(synced)


def _spec(ctxt: Any, flavor: Any, image: dict[str, Any],
          instance_uuid: str) -> Any:
    spec = objects.RequestSpec.from_components(
        ctxt, instance_uuid, image, flavor, None, None, {}, None, None,
        project_id=ctxt.project_id, user_id=ctxt.user_id)
    spec.is_bfv = False
    return spec


def _percentile(values: list[float], pct: int) -> float | None:
    if len(values) < 10:
        return None
    return statistics.quantiles(values, n=100, method='inclusive')[pct - 1]


def _settings(config: str, ours: list[Any]) -> None:
    """Apply ``config``'s request-time options (no restart needed)."""
    CONF.set_override('filter_hosts_by_image_type_support',
                      config == REQUEST, 'scheduler')
    filters = request_filter.ALL_REQUEST_FILTERS
    for fn in ours:
        if config == STOCK and fn in filters:
            filters.remove(fn)
        elif config != STOCK and fn not in filters:
            filters.append(fn)


def run() -> list[dict[str, Any]]:
    """Measure; one row per scale and configuration."""
    rows: list[dict[str, Any]] = []
    logging.disable(logging.INFO)
    try:
        with _Cloud() as cloud:
            rows = _run(cloud)
    finally:
        logging.disable(logging.NOTSET)
    return rows


def _run(cloud: _Cloud) -> list[dict[str, Any]]:
    CONF.set_override('max_placement_results', MAX_PLACEMENT_RESULTS,
                      'scheduler')
    CONF.set_override('service_down_time', 24 * 3600)
    ctxt = nova_context.get_admin_context()
    ctxt.project_id = 'bench-project'
    ctxt.user_id = 'bench-user'
    before = list(request_filter.ALL_REQUEST_FILTERS)
    managers = {config: _manager(config) for config in CONFIGS}
    ours = [fn for fn in request_filter.ALL_REQUEST_FILTERS
            if fn not in before]
    if not ours:
        raise RuntimeError('nova-imgtype request filters not registered')
    probe = _Probe()
    # nova-imgtype's request filters and host filter, timed inside the
    # call: what the plugin itself costs there.
    filters = request_filter.ALL_REQUEST_FILTERS
    timed = [probe.timed(fn) for fn in ours]
    for fn, wrapped in zip(ours, timed, strict=True):
        filters[filters.index(fn)] = wrapped
    ours = timed
    host_filters = [f for f in managers[HOST].host_manager.enabled_filters
                    if isinstance(f, imgtype_filters.ImageTypeSupportFilter)]
    if len(host_filters) != 1:
        raise RuntimeError('ImageTypeSupportFilter not enabled in the host '
                           'filter configuration')
    # This instance's method only, wrapped as the request filters are.
    host_filters[0].filter_all = probe.timed(  # type: ignore[method-assign]
        host_filters[0].filter_all)
    client = report.report_client_singleton()
    client.get_allocation_candidates = probe.wrap_candidates(
        client.get_allocation_candidates)
    for manager in managers.values():
        hm = manager.host_manager
        hm.get_filtered_hosts = probe.wrap_filtered(hm.get_filtered_hosts)
    flavor = objects.Flavor(
        id=1, flavorid='bench', name='bench.small', vcpus=1, memory_mb=512,
        root_gb=1, ephemeral_gb=0, swap=0, rxtx_factor=1.0,
        vcpu_weight=0, disabled=False, is_public=True, extra_specs={},
        projects=[])
    image = {'id': str(uuid.uuid4()), 'name': 'bench', 'status': 'active',
             'disk_format': DISK_FORMAT, 'container_format': 'bare',
             'min_ram': 0, 'min_disk': 0, 'size': 1024 ** 3,
             'properties': {}}
    nodes = _Nodes(cloud, ctxt)

    def call(config: str) -> tuple[float, _Probe]:
        _settings(config, ours)
        manager = managers[config]
        instance_uuid = str(uuid.uuid4())
        meta = copy.deepcopy(image)
        spec = _spec(ctxt, flavor, meta, instance_uuid)
        probe.reset()
        # Untimed: the garbage of the calls before collected now, not in
        # whichever call happens to cross the collector's threshold.
        gc.collect()
        start = time.perf_counter()
        manager.select_destinations(
            ctxt, spec_obj=spec, instance_uuids=[instance_uuid],
            return_objects=True, return_alternates=True)
        seconds = time.perf_counter() - start
        cloud.placement.api.delete('/allocations/%s' % instance_uuid)
        return seconds, copy.copy(probe)

    rows: list[dict[str, Any]] = []
    for total in SCALES:
        t0 = time.perf_counter()
        added = nodes.grow(total)
        nodes.check(total)
        for manager in managers.values():
            _sync_instance_info(ctxt, manager.host_manager, added)
        sys.stderr.write('scheduling: %d compute nodes set up in %.1f s\n'
                         % (total, time.perf_counter() - t0))
        rows += _measure(total, call)
    return rows


def _measure(total: int,
             call: Callable[..., tuple[float, _Probe]]
             ) -> list[dict[str, Any]]:
    with_trait = len(range(0, total, TRAIT_EVERY))
    expected = {STOCK: (total, total), REQUEST: (with_trait, with_trait),
                HOST: (total, with_trait)}
    times: dict[str, list[float]] = {config: [] for config in CONFIGS}
    placement: dict[str, list[float]] = {config: [] for config in CONFIGS}
    imgtype: dict[str, list[float]] = {config: [] for config in CONFIGS}

    def check(config: str, seen: _Probe) -> None:
        # What was measured, checked outside the timed window.
        if (seen.candidates, seen.passed) != expected[config]:
            raise RuntimeError(
                '%s at %d nodes: %d candidates, %d hosts passed; expected '
                '%d, %d' % ((config, total, seen.candidates, seen.passed) +
                            expected[config]))

    t0 = time.perf_counter()
    runs = RUNS[total]
    configs = [config for config in CONFIGS if runs[config]]
    for config in configs:  # warm-up, not timed
        _, seen = call(config)
        check(config, seen)
    for n in range(max(runs.values())):
        # Each round starts with the next configuration: none always runs
        # right after the same one.
        for config in configs[n % len(configs):] + configs[:n % len(configs)]:
            if n < runs[config]:
                seconds, seen = call(config)
                check(config, seen)
                times[config].append(seconds)
                placement[config].append(seen.candidates_s)
                imgtype[config].append(seen.imgtype_s)
    sys.stderr.write('scheduling: %d compute nodes measured in %.1f s\n'
                     % (total, time.perf_counter() - t0))
    stock_ms = statistics.median(times[STOCK]) * 1000
    rows = []
    for config in configs:
        median_ms = statistics.median(times[config]) * 1000
        p90 = _percentile(times[config], 90)
        rows.append({
            'benchmark': 'scheduling',
            'compute_nodes': total,
            'with_image_trait': with_trait,
            'config': config,
            'runs': len(times[config]),
            'median_ms': round(median_ms, 1),
            'p90_ms': round(p90 * 1000, 1) if p90 is not None else None,
            'vs_stock': round(median_ms / stock_ms, 2),
            'allocation_candidates_ms': round(
                statistics.median(placement[config]) * 1000, 1),
            'imgtype_ms': round(statistics.median(imgtype[config]) * 1000, 2),
            'placement_candidates': expected[config][0],
            'hosts_passed': expected[config][1],
        })
    return rows


def to_markdown(rows: list[dict[str, Any]]) -> str:
    """The scheduling section of ``results/latest.md``."""
    lines = [
        '## Scheduling: `SchedulerManager.select_destinations`', '',
        'Stock Nova 34 `SchedulerManager.select_destinations` (request '
        'filters, placement allocation candidates, host states, host '
        'filters, weighers, claim) against in-process placement 16 '
        '(SQLite); ms per call booting one qcow2 image (1 vCPU, 512 MiB, '
        '1 GiB, alternates requested); every %s compute node has `%s`. '
        '`[scheduler]max_placement_results = %d` (the default 1000 would '
        'truncate the candidates). Configurations interleaved call by '
        'call in the same run, each round starting with the next '
        'configuration; garbage collected before each call, untimed; one '
        'warm-up call per row excluded; median, p90 '
        'only with 10 calls or more; '
        '`vs stock` is the ratio of medians; `a/c ms` is the median time '
        'of the GET /allocation_candidates inside the call; `imgtype ms` '
        'the median time spent inside the call in nova-imgtype\'s own '
        'code (its request filters, `instance_backend` looking the '
        'instance up in the API database, and the host filter). '
        'Fewer calls '
        'at larger scales (`runs`) keep the module within a few minutes '
        'on 2 cores; the host filter reads the image-type traits each '
        'compute node\'s stats list (as nova-imgtype\'s driver reports '
        'them, stock\'s row loading them too), no placement request. Compute '
        'nodes: one made through the placement REST API and Nova objects, '
        'the others copied from it in bulk; services up, instance info '
        'in sync (see `benchmarks/scheduling.py`).'
        % ('second' if TRAIT_EVERY == 2 else '%dth' % TRAIT_EVERY,
           IMAGE_TRAIT, MAX_PLACEMENT_RESULTS),
        '',
        tables.markdown(
            ['compute nodes', 'configuration', 'runs', 'median ms',
             'p90 ms', 'vs stock', 'a/c ms', 'imgtype ms',
             'placement candidates',
             'hosts passed'],
            (['%d' % r['compute_nodes'], r['config'], '%d' % r['runs'],
              '%.1f' % r['median_ms'],
              '%.1f' % r['p90_ms'] if r['p90_ms'] is not None else '-',
              '%.2f' % r['vs_stock'], '%.1f' % r['allocation_candidates_ms'],
              '%.2f' % r['imgtype_ms'] if 'imgtype_ms' in r else '-',
              '%d' % r['placement_candidates'], '%d' % r['hosts_passed']]
             for r in rows),
            left=['configuration'])]
    return '\n'.join(lines) + '\n'

