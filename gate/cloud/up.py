"""``up``: the whole cloud, independent parts started in parallel."""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

from gate.cloud import computes
from gate.cloud import configs
from gate.cloud import identity
from gate.cloud import infra
from gate.cloud import layout as L
from gate.cloud import proc as P
from gate.cloud import services
from gate.cloud.infra import _write

BASE_PREFIX = 'gate-'


def check_free_ports(profile: str = L.DEFAULT_PROFILE) -> None:
    busy = [(name, port) for name, port in L.PORTS.items()
            if port and P.port_open(L.HOST, port)]
    if profile == 'ceph' and P.port_open(L.HOST, L.CEPH_MON_PORT):
        busy.append(('ceph-mon', L.CEPH_MON_PORT))
    busy += [(c.host + ' ' + what, port) for c in L.COMPUTES
             for what, port in (('ssh', L.SSH_PORT),
                                ('libvirtd', L.LIBVIRT_PORT))
             if P.port_open(c.ip, port)]
    if busy:
        raise P.GateError(
            'ports in use (another gate cloud still up? stop it with '
            '`.venv/bin/python -m gate.cloud down <base>`): %s'
            % ', '.join('%s %d' % b for b in busy))


def new_base() -> str:
    base = tempfile.mkdtemp(prefix=BASE_PREFIX, dir='/tmp')
    os.chmod(base, 0o755)
    os.mkdir(os.path.join(base, 'logs'))
    return base


def up(state: P.State) -> dict[str, Any]:
    """Start everything; returns the content of ``cloud.json``."""
    t0 = time.monotonic()
    kvm = computes.kvm_usable()
    P.progress('base %s; profile %s; virt_type %s; 2 computes on %s'
               % (state.layout.base, state.profile,
                  'kvm' if kvm else 'qemu (no KVM)', L.PLUGIN_DRIVER))
    with cf.ThreadPoolExecutor(max_workers=12) as pool:
        def task(fn: Callable[..., Any], *after: cf.Future[Any],
                 args: tuple[Any, ...] = ()) -> cf.Future[Any]:
            def run() -> Any:
                for f in after:
                    f.result()
                return fn(state, *args)
            return pool.submit(run)

        try:
            mysql = task(infra.start_mariadb)
            rabbit = task(infra.start_rabbitmq)
            keys = task(computes.prepare)
            stub = task(services.neutron_stub)
            hosts = [task(computes.start_host, keys, args=(c,))
                     for c in state.computes]
            keystone = task(services.keystone, mysql)
            ids = task(lambda _s: identity.create_objects(), keystone)
            placement = task(services.placement, mysql)
            # Glance's store and the computes' disks are in Ceph there.
            storage = ([task(infra.start_ceph)]
                       if state.profile == 'ceph' else [])
            glance = task(services.glance, mysql, *storage)
            novadb = task(services.nova_databases, mysql)
            rpc = task(services.nova_rpc_services, novadb, rabbit)
            api = task(services.nova_api, rpc)
            # nova-compute reports to placement at once: users first.
            ncs = task(start_computes, rpc, ids, placement, *hosts,
                       *storage)
            for f in cf.as_completed([mysql, rabbit, keys, stub, *hosts,
                                      *storage, keystone, ids, placement,
                                      glance, novadb, rpc, api, ncs]):
                f.result()
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            P.kill_running()
            raise
    since, procs = ncs.result()
    computes.wait_computes_reporting(state, since, procs)
    computes.discover_and_wait(state)
    cloud = cloud_data(state, L.PLUGIN_DRIVER)
    write_cloud(state, cloud)
    P.progress('cloud up in %.0f s' % (time.monotonic() - t0))
    return cloud


def start_computes(state: P.State) -> tuple[float, dict[str, Any]]:
    since = time.time()
    procs = {c.host: computes.start_nova_compute(state, c, L.PLUGIN_DRIVER)
             for c in state.computes}
    P.progress('nova-compute starting on %s'
               % ', '.join(c.host for c in state.computes))
    return since, procs


def cloud_data(state: P.State, driver: str) -> dict[str, Any]:
    cloud: dict[str, Any] = {
        'base': state.layout.base,
        'profile': state.profile,
        'auth_url': L.AUTH_URL,
        'region': L.REGION,
        'admin': dict(L.ADMIN),
        'endpoints': dict(L.ENDPOINTS),
        'computes': computes.compute_entries(state, driver),
        'driver': driver,
        'nova_conf': state.layout.nova_conf,
        'venv': L.venv(),
        'virt_type': 'kvm' if computes.kvm_usable() else 'qemu',
        'logs': state.layout.logs,
        'openrc': state.layout.openrc,
        'state': state.layout.state,
    }
    if state.profile == 'ceph':
        cloud['ceph'] = {'conf': state.layout.ceph_conf,
                         'pool': L.CEPH_POOL, 'glance_pool': L.GLANCE_POOL}
    return cloud


def write_cloud(state: P.State, cloud: dict[str, Any]) -> None:
    tmp = state.layout.cloud_json + '.tmp'
    with open(tmp, 'w') as f:
        json.dump(cloud, f, indent=2, sort_keys=True)
    os.replace(tmp, state.layout.cloud_json)
    _write(state.layout.openrc, configs.openrc())


def memory_mib(state: P.State) -> float:
    """Resident memory of everything the cloud runs (PSS where known)."""
    pids = set()
    namespaces = {ns['mnt'] for ns in state.data['namespaces'].values()}
    base = os.fsencode(state.layout.base)
    for p in P.all_pids():
        if base in P.cmdline(p) or P.mnt_ns(p) in namespaces:
            pids.add(p)
    for entry in state.data['procs'].values():
        pids.add(int(entry['pid']))
    pids |= _descendants(pids)
    total = 0
    for p in pids:
        total += _pss_kib(p)
    return total / 1024


def _descendants(roots: set[int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for p in P.all_pids():
        try:
            with open('/proc/%d/stat' % p) as f:
                ppid = int(f.read().rsplit(')', 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(p)
    out: set[int] = set()
    todo = list(roots)
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def _pss_kib(pid: int) -> int:
    try:
        with open('/proc/%d/smaps_rollup' % pid) as f:
            for line in f:
                if line.startswith('Pss:'):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0
