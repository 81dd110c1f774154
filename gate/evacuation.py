"""Evacuating servers in the gate's cloud: their compute's nova-compute
stopped and forced down, each server evacuated, and the compute brought
back on the plugin (as it starts, it destroys what it had of them)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from gate import checks_base as B


def _service(conn: Any, host: str) -> Any:
    return next(conn.compute.services(binary='nova-compute', host=host))


def _forced_down(conn: Any, host: str, forced: bool) -> None:
    r = conn.compute.put('/os-services/%s' % _service(conn, host).id,
                         json={'forced_down': forced}, microversion='2.53')
    if r.status_code >= 400:
        raise B.CheckFailed('forced_down %s for %s: %s %s' % (
            forced, host, r.status_code, r.text))


def evacuations(conn: Any, server: Any) -> list[dict[str, Any]]:
    """The server's evacuations, as the API lists them."""
    migrations: list[dict[str, Any]] = conn.compute.get(
        '/os-migrations?instance_uuid=%s' % server.id,
        microversion='2.59').json()['migrations']
    return [m for m in migrations if m['migration_type'] == 'evacuation']


def _evacuated(conn: Any, server: Any, source: str) -> Any | None:
    """The server once its evacuation from ``source`` ended: on another
    host (done), or None when it failed (the server stays on source)."""
    for _ in B.poll('evacuation of %s from %s over' % (server.id, source)):
        found = evacuations(conn, server)
        last = max(found, key=lambda m: m['id']) if found else None
        if last and last['status'] in ('error', 'failed'):
            return None
        if last and last['status'] == 'done':
            return B.wait(conn, server, 'ACTIVE')
    raise AssertionError('unreachable: poll() raises on timeout')


def evacuate(cloud: B.Cloud, conn: Any, servers: Sequence[Any],
             source: str) -> list[Any | None]:
    """Stop ``source``'s nova-compute, force it down, evacuate the servers
    (all on ``source``) and bring ``source`` back whatever happened; each
    server evacuated, or None where its evacuation failed."""
    from gate.cloud import computes
    from gate.cloud import proc as P

    state = P.State.load(cloud['base'])
    computes.stop_nova_computes(state, [source])
    try:
        _forced_down(conn, source, True)
        for server in servers:
            conn.compute.post('/servers/%s/action' % server.id,
                              json={'evacuate': {}}, microversion='2.14')
        return [_evacuated(conn, server, source) for server in servers]
    finally:
        _bring_back(cloud, conn, servers, source)


def _bring_back(cloud: B.Cloud, conn: Any, servers: Sequence[Any],
                host: str) -> None:
    """``host``'s nova-compute started again, on the plugin: as it starts
    it destroys the instances evacuated from it (moving their evacuations
    from done to completed), and only then may it be forced up again."""
    from gate.cloud import computes
    from gate.cloud import layout as L
    from gate.cloud import proc as P

    state = P.State.load(cloud['base'])
    compute = next(c for c in state.computes if c.host == host)
    since = time.time()
    proc = computes.start_nova_compute(state, compute, L.PLUGIN_DRIVER)
    for _ in B.poll('%s completing the evacuations of %s' % (
            host, ', '.join(s.id for s in servers))):
        if not any(m['status'] == 'done' and m['source_compute'] == host
                   for s in servers for m in evacuations(conn, s)):
            break
        P.check_alive(proc, host + ' nova-compute',
                      state.layout.log(host + '-nova-compute'))
    _forced_down(conn, host, False)
    computes.wait_computes_reporting(state, since, {host: proc})
