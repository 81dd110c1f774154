"""``python -m gate [--keep]``: the whole gate.

1. the real cloud up (:mod:`gate.cloud`), both computes on the plugin;
2. the gate checks tempest cannot make (:mod:`gate.checks`);
3. tempest's selection and the project's scenarios (:mod:`gate.tempest`),
   label ``plugin``;
4. every server deleted, both computes restarted on stock
   ``libvirt.LibvirtDriver``, the same tempest selection again, label
   ``stock`` (with ``--stock where-needed``, as ``make test`` runs it, only
   the tests the plugin did not pass, and nothing at all when it passed
   every one: a verdict reads no more); with ``--timing`` (``make gate
   TIMING=1``) first the end-to-end boot times (:mod:`gate.timing`) on the
   plugin's computes and on stock's, their runs interleaved (both computes
   restarted on the other driver between them): about 7 minutes, reported
   and not judged, so not part of ``make test``;
5. all of it side by side in ``gate/results/latest.{md,json}``
   (:mod:`gate.results`); the gate fails on a test that passes on stock but
   not on the plugin, on a failed check, or on fewer upstream tests passing
   on both than the minimum (boot times are reported, not judged).

The cloud is taken down at the end, on failure and on Ctrl-C/SIGTERM too,
unless ``--keep`` (then it prints how to use and stop it); when the gate
fails, the logs of every service of the cloud (tempest's included) are kept
first, in ``<base>-logs`` next to it, and the path is printed.
``--skip-tempest`` runs the checks only. ``--profile ceph`` (``make gate
PROFILE=ceph``) runs the same steps on the ``ceph`` profile's cloud (both
computes and Glance on one Ceph cluster, :mod:`gate.cloud.layout`) with
its checks (:mod:`gate.check_ceph`), its results in
``gate/results/ceph/``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
from types import FrameType
from typing import Any

from gate import checks
from gate import results
from gate import tempest
from gate import timing
from gate.cloud import __main__ as cloud_cli
from gate.cloud import computes
from gate.cloud import down as D
from gate.cloud import layout as L
from gate.cloud import proc as P
from gate.cloud import up as U


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise cloud_cli.Interrupted(signal.Signals(signum).name)


def _delete_servers(cloud_path: str) -> None:
    from openstack import exceptions as sdk_exceptions

    conn = tempest.connect(tempest.load_cloud(cloud_path))
    servers = list(conn.compute.servers(all_projects=True))
    for server in servers:
        conn.compute.delete_server(server, force=True)
    try:
        for server in servers:
            conn.compute.wait_for_delete(server, wait=300)
    except sdk_exceptions.ResourceTimeout as e:
        raise P.GateError('servers left after 300 s: %s' % e) from None
    P.progress('%d servers deleted' % len(servers))


def _switch(state: P.State, driver: str) -> None:
    computes.restart_all(state, driver)
    cloud = tempest.load_cloud(state.layout.cloud_json)
    cloud['driver'] = driver
    cloud['computes'] = computes.compute_entries(state, driver)
    U.write_cloud(state, cloud)
    P.progress('computes on %s' % driver)


def _boot_times(state: P.State,
                cloud_path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Stock's and the plugin's boot times, their runs interleaved in
    :data:`gate.timing.ORDER` from the plugin's computes (as they run
    now); the computes are left on stock's driver."""
    runs: dict[str, list[dict[str, Any]]] = {'plugin': [], 'stock': []}
    current = 'plugin'
    for label in timing.ORDER:
        if label != current:
            _switch(state, L.DRIVERS[label])
            current = label
        runs[label].append(timing.measure(cloud_path, label, runs=1))
    if current != 'stock':
        _switch(state, L.STOCK_DRIVER)
    merged = {label: timing.merge(r) for label, r in runs.items()}
    for out in merged.values():
        timing.save(state.layout.base, out)
    return merged['stock'], merged['plugin']


def _stock_selection(plugin: str, stock_scope: str) -> str | None:
    """What stock runs: the whole selection (``all``), or with
    ``where-needed`` a selection file of the tests the plugin did not
    pass, next to its results; None when that is none."""
    if stock_scope == 'all':
        return tempest.SELECTION
    selection = os.path.join(os.path.dirname(plugin), 'not-passed.txt')
    count = tempest.not_passed_selection(plugin, selection)
    P.progress('stock runs where needed: the %d tests the plugin did not '
               'pass' % count)
    return selection if count else None


def _not_run(state: P.State) -> str:
    """An empty stock results.json: stock was not needed."""
    path = state.layout.path('stock-not-needed.json')
    with open(path, 'w') as f:
        json.dump({'label': 'stock', 'tests': {}, 'counts': {},
                   'wall_seconds': 0.0, 'returncode': 0}, f)
    return path


def judge(state: P.State, skip_tempest: bool = False,
          boot_times: bool = False, stock_scope: str = 'all') -> int:
    """Steps 2 to 5 on a running cloud (of the profile it was started
    with); 0 when the gate passes. ``stock_scope``: how much of the
    selection stock runs (:data:`gate.results.STOCK_SCOPES`)."""
    cloud_path = state.layout.cloud_json
    check_results = checks.run(cloud_path)
    checks_path = state.layout.path('checks.json')
    failed_checks = [c for c in check_results if c['status'] != 'pass']
    if skip_tempest:
        return int(bool(failed_checks))
    # The tests' durations in the results committed last, for stestr to
    # split them among tempest's workers by time.
    before = os.path.join(results.out_dir(state.profile), 'latest.json')
    plugin = tempest.run(cloud_path, 'plugin', durations=(
        tempest.previous_durations(before, 'plugin')))
    selection = _stock_selection(plugin, stock_scope)
    compared = None
    if boot_times or selection:
        _delete_servers(cloud_path)
    if boot_times:
        stock_times, plugin_times = _boot_times(state, cloud_path)
        compared = timing.compare(stock_times, plugin_times)
    elif selection:
        _switch(state, L.STOCK_DRIVER)
    stock = (tempest.run(cloud_path, 'stock', selection, durations=(
        tempest.previous_durations(before, 'stock'))) if selection
             else _not_run(state))
    md_path, json_path, cmp = results.write(
        stock, plugin, out_dir=results.out_dir(state.profile),
        checks_path=checks_path, timing=compared, logs=state.layout.logs,
        stock_scope=stock_scope)
    with open(md_path) as f:
        print(f.read().split('\n## Per test')[0])
    print('gate results: %s, %s' % (md_path, json_path))
    for problem in cmp['summary']['problems']:
        print('gate: %s' % problem, file=sys.stderr)
    for failure in results.failures(cmp):
        print('gate: why: %s' % failure, file=sys.stderr)
    for hit in cmp['stock_nova_defects']:
        print('gate: stock Nova defect met (not judged): %s (%s), server '
              '%s: %s' % (hit['id'], hit['run'], hit['instance'],
                          hit['bug']), file=sys.stderr)
    return 0 if cmp['summary']['ok'] else 1


def keep_logs(base: str) -> str | None:
    """Copy the logs of the cloud at ``base`` to ``<base>-logs`` (the
    cloud's directory goes with it); the copy's path, or None when there
    were none."""
    logs = os.path.join(base, 'logs')
    if not os.path.isdir(logs):
        return None
    kept = os.path.abspath(base).rstrip('/') + '-logs'
    shutil.copytree(logs, kept, dirs_exist_ok=True)
    P.progress('the gate failed: its logs kept in %s' % kept)
    return kept


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog='python -m gate', description=__doc__)
    p.add_argument('--keep', action='store_true',
                   help='leave the cloud running at the end')
    p.add_argument('--skip-tempest', action='store_true',
                   help='run the gate checks only')
    p.add_argument('--profile', choices=sorted(L.PROFILES),
                   default=L.DEFAULT_PROFILE,
                   help='the cloud to judge (default: %(default)s)')
    p.add_argument('--timing', action='store_true',
                   help='measure the boot times on both drivers too '
                        '(about 7 more minutes)')
    p.add_argument('--stock', choices=results.STOCK_SCOPES, default='all',
                   help='the tempest selection on stock: all of it (the '
                        'whole side-by-side report), or only where the '
                        "plugin did not pass (make test's gate tier; all "
                        'a verdict needs; default: %(default)s)')
    args = p.parse_args(argv)
    try:
        state, cloud = cloud_cli.start(profile=args.profile)
    except P.GateError as e:
        print('gate: %s' % e, file=sys.stderr)
        return 1
    except (KeyboardInterrupt, cloud_cli.Interrupted):
        return 130
    rc = 0
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)
    try:
        cloud_cli.report(state, cloud)
        rc = judge(state, args.skip_tempest, args.timing, args.stock)
    except (KeyboardInterrupt, cloud_cli.Interrupted):
        rc = 130
        args.keep = False
    except Exception as e:  # noqa: BLE001 - said, then taken down
        print('gate: %s: %s' % (type(e).__name__, e), file=sys.stderr)
        rc = 1
    finally:
        if args.keep:
            cloud_cli.how_to_use(state)
        else:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            if rc:
                keep_logs(state.layout.base)
            if D.down(state.layout.base):
                rc = rc or 1
    return rc


if __name__ == '__main__':
    sys.exit(main())
