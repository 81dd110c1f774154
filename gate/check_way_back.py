"""``way-back``: each compute taken back to stock's driver as the manual's
uninstall page says, its guests hostile (issue 54).

On each compute in turn, two servers of the matrix's flavor (root,
ephemeral, swap, config drive): one booted there, one booted on the other
compute and cold-migrated in, so that the host holds disks of both formats
(the pools host raw volumes of a files host's instance, the files host
qcow2 files of a pools host's instance). Each is stopped with a hostile
guest's header in every raw disk and a marker in every disk
(:func:`gate.check_matrix._mark`). Then, as the operator does:

1. nova-compute stopped (and forced down: the command refuses a compute
   Nova says is up);
2. ``nova-imgtype prepare-uninstall --apply`` with the compute's
   ``nova.conf``, inside its namespace: it must say every instance
   ``moved`` or ``ready`` and exit 0;
3. nova-compute started on stock's ``libvirt.LibvirtDriver`` with the same
   ``images_type``.

Each server is then started by stock and checked as a matrix leg is
(:func:`gate.check_matrix._check`): every disk reads back, in the format
the domain gives QEMU, what its guest wrote, the host file nowhere; the
domain, the file, ``disk.info`` and the record agree on each disk's
format; then a hard reboot, the same checks, and a snapshot downloaded and
judged. The compute is then put back on the plugin.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Mapping
from typing import Any

from gate import check_matrix as M
from gate import checks_base as B
from gate import evacuation

#: Stock serves the instance as it is now (the command's outcomes).
BACK = ('moved', 'ready')
#: Nothing moves and every disk keeps its data and config drive.
LEG = M.Leg('way back', 'SHUTOFF', M.ALL, True, False, False,
            lambda t, to: None)


def _travellers(cloud: B.Cloud, res: Mapping[str, Any], host: str,
                other: str, hostile: M.Hostile) -> list[M.Traveller]:
    """A raw image's server cold-migrated in from ``other`` and a qcow2
    image's booted on ``host``, both there and running."""
    from gate import tempest
    travellers = []
    for i, (fmt, first) in enumerate((('raw', other), ('qcow2', host))):
        t = M.Traveller(cloud, tempest.connect(cloud), res, fmt,
                        hostile=hostile, variant_base=i)
        t.server = t.conn.compute.create_server(
            name='gate-way-back-%s-%s' % (fmt, host),
            image_id=res['images'][fmt],
            flavor_id=res['flavors']['gate.disks'], networks='none',
            availability_zone='nova:%s' % first, config_drive=True)
        travellers.append(t)
    for t in travellers:
        t.refresh('ACTIVE')
        if t.host != host:
            # Two computes: a cold migration goes to the other one.
            t.conn.compute.migrate_server(t.server)
            M._confirm(t, 'ACTIVE')
    return travellers


def _prepare_uninstall(cloud: B.Cloud, host: str) -> dict[str, str]:
    """``nova-imgtype prepare-uninstall --apply`` on ``host`` (its
    nova-compute down); each instance's outcome."""
    from gate.cloud import layout as L
    c = B.compute(cloud, host)
    proc = subprocess.run([*c['nsenter'], L.venv_bin('nova-imgtype'),
                           '--config-file', c['config'], 'prepare-uninstall',
                           '--apply', '--format', 'json'],
                          capture_output=True, text=True, check=False)
    try:
        found = json.loads(proc.stdout)
    except ValueError:
        raise B.CheckFailed('prepare-uninstall on %s: exit %d, %s' % (
            host, proc.returncode, proc.stderr.strip()[-500:])) from None
    outcomes = {i['uuid']: '%s (%s)' % (i['outcome'], i['detail'])
                for i in found['instances']}
    if proc.returncode:
        raise B.CheckFailed(
            'prepare-uninstall on %s: exit %d; instances %s, pools %s, '
            'traits left %s' % (host, proc.returncode, outcomes,
                                found.get('storage_pools'),
                                found.get('traits')))
    return outcomes


def _alone(conn: Any, host: str, ours: set[str]) -> None:
    """Until ``host`` holds no server but ``ours`` (those of the checks
    before, deleted, may still be going)."""
    for _ in B.poll('servers of earlier checks gone from %s' % host):
        there = {s.id for s in conn.compute.servers(all_projects=True,
                                                    host=host)}
        if there <= ours:
            return


def _on_stock(cloud: B.Cloud, conn: Any, host: str,
              ours: set[str]) -> dict[str, str]:
    """``host`` taken back to stock as the manual says; the command's
    outcome of each instance."""
    _alone(conn, host, ours)
    from gate.cloud import computes
    from gate.cloud import layout as L
    from gate.cloud import proc as P

    state = P.State.load(cloud['base'])
    compute = next(c for c in state.computes if c.host == host)
    computes.stop_nova_computes(state, [host])
    evacuation._forced_down(conn, host, True)
    try:
        outcomes = _prepare_uninstall(cloud, host)
    finally:
        since = time.time()
        proc = computes.start_nova_compute(state, compute, L.STOCK_DRIVER,
                                           images_type=compute.images_type)
        evacuation._forced_down(conn, host, False)
        computes.wait_computes_reporting(state, since, {host: proc})
    return outcomes


def _back_on_plugin(cloud: B.Cloud, host: str) -> None:
    from gate.cloud import computes
    from gate.cloud import layout as L
    from gate.cloud import proc as P
    computes.restart(P.State.load(cloud['base']), L.PLUGIN_DRIVER, [host])


def _host(cloud: B.Cloud, conn: Any, res: Mapping[str, Any], host: str,
          other: str, hostile: M.Hostile) -> list[dict[str, str]]:
    """The way back on ``host``; the rows of its servers."""
    travellers = _travellers(cloud, res, host, other, hostile)
    rows = []
    try:
        for t in travellers:
            t.legs = 0
            row = M._row(t, LEG, host, host)
            M._mark(t, LEG.status, row)
            rows.append(row)
        try:
            outcomes = _on_stock(cloud, conn, host,
                                 {t.server.id for t in travellers})
            for t, row in zip(travellers, rows, strict=True):
                said = outcomes.get(t.server.id, 'not listed')
                row['move'] = 'way back: ' + said.split(' ', 1)[0]
                if not said.startswith(BACK):
                    raise B.CheckFailed('prepare-uninstall on %s: %s %s' % (
                        host, t.server.id, said))
                t.conn.compute.start_server(t.server)
                M._check(t, LEG, 'ACTIVE', host, 'start on stock', row)
                M._rebooted(t, LEG, row)
        except Exception as e:  # noqa: BLE001 - said in the rows
            for row in rows:
                if row['result'] != 'pass':
                    row['result'] = 'FAIL: %s' % e
        finally:
            _back_on_plugin(cloud, host)
    finally:
        for t in travellers:
            t.conn.compute.delete_server(t.server)
    return rows


def check_way_back(cloud: B.Cloud, conn: Any,
                   res: Mapping[str, Any]) -> B.Report:
    pools_host, files_host = B.hosts(cloud)
    rows: list[dict[str, str]] = []
    with M._hostile(cloud) as hostile:
        for host, other in ((pools_host, files_host),
                            (files_host, pools_host)):
            rows += _host(cloud, conn, res, host, other, hostile)
    failed = [r for r in rows if r['result'] != 'pass']
    summary = ('%d instances taken back to stock on both computes (%d '
               'failed), each started, hard rebooted and snapshotted by '
               'stock; %s' % (len(rows), len(failed), M._hostile_legs(rows)))
    report = B.Report(summary, M.COLUMNS,
                      [tuple(r.get(c, '') for c in M.COLUMNS) for r in rows])
    if failed:
        raise B.CheckFailed(summary + ': ' + '; '.join(
            '%s on %s: %s' % (r.get('image'), r.get('to'), r['result'])
            for r in failed), report)
    return report
