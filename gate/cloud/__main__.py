"""``python -m gate.cloud up|down|computes``: the gate's real cloud."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from types import FrameType

from gate.cloud import computes
from gate.cloud import down as D
from gate.cloud import layout as L
from gate.cloud import proc as P
from gate.cloud import up as U


class Interrupted(BaseException):
    """SIGTERM/SIGHUP while the cloud starts."""


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signal.Signals(signum).name)


def start(keep_on_failure: bool = False,
          profile: str = L.DEFAULT_PROFILE
          ) -> tuple[P.State, dict[str, object]]:
    """Bring a cloud of ``profile`` up; on any failure or interrupt, take
    it down again."""
    if os.geteuid() != 0:
        raise P.GateError('the gate cloud needs root')
    L.computes(profile)      # an unknown profile, before anything starts
    U.check_free_ports(profile)
    state = P.State(L.Layout(U.new_base()))
    state.data['profile'] = profile
    state.save()
    old = {s: signal.signal(s, _raise_interrupted)
           for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        cloud = U.up(state)
    except BaseException as e:
        P.kill_running()
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        P.progress('start failed: %s: %s' % (type(e).__name__, e))
        if keep_on_failure:
            P.progress('kept for inspection: %s (logs in %s)'
                       % (state.layout.base, state.layout.logs))
        else:
            D.down(state.layout.base)
        raise
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return state, cloud


def report(state: P.State, cloud: dict[str, object]) -> None:
    print('cloud.json: %s' % state.layout.cloud_json)
    print('openrc:     %s' % state.layout.openrc)
    print('logs:       %s' % state.layout.logs)
    print('memory:     %.0f MiB (PSS of every process of the cloud)'
          % U.memory_mib(state))
    print('running:')
    for name, entry in sorted(state.data['procs'].items()):
        print('  %-24s pid %-8d log %s' % (name, entry['pid'], entry['log']))


def how_to_use(state: P.State) -> None:
    base = state.layout.base
    print('The cloud stays up. To use it:\n'
          '    source %s\n'
          '    .venv/bin/openstack compute service list\n'
          'To stop it and remove everything:\n'
          '    .venv/bin/python -m gate.cloud down %s' % (
              state.layout.openrc, base))


def cmd_up(args: argparse.Namespace) -> int:
    state, cloud = start(args.keep_on_failure, args.profile)
    report(state, cloud)
    how_to_use(state)
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    bases = args.base or _all_bases()
    rc = 0
    for base in bases:
        if D.down(base):
            rc = 1
    return rc


def _all_bases() -> list[str]:
    return sorted(os.path.join('/tmp', d) for d in os.listdir('/tmp')
                  if d.startswith(U.BASE_PREFIX)
                  and os.path.exists(os.path.join('/tmp', d, 'state.json')))


def cmd_computes(args: argparse.Namespace) -> int:
    base = args.base or _single_base()
    state = P.State.load(base)
    driver = L.DRIVERS[args.driver]
    computes.restart_all(state, driver)
    with open(state.layout.cloud_json) as f:
        cloud = json.load(f)
    cloud['driver'] = driver
    cloud['computes'] = computes.compute_entries(state, driver)
    U.write_cloud(state, cloud)
    P.progress('computes on %s; %s updated'
               % (driver, state.layout.cloud_json))
    return 0


def _single_base() -> str:
    bases = _all_bases()
    if len(bases) != 1:
        raise P.GateError('give the cloud base directory (found: %s)'
                          % (', '.join(bases) or 'none'))
    return bases[0]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog='python -m gate.cloud',
                                description=__doc__)
    sub = p.add_subparsers(dest='command', required=True)
    u = sub.add_parser('up', help='start a cloud and leave it running')
    u.add_argument('--keep-on-failure', action='store_true',
                   help='leave what started for inspection if up fails')
    u.add_argument('--profile', choices=sorted(L.PROFILES),
                   default=L.DEFAULT_PROFILE,
                   help='the cloud: default (files and pools on local '
                        'disks) or ceph (both computes on one Ceph '
                        'cluster, with Glance)')
    u.set_defaults(func=cmd_up)
    d = sub.add_parser('down', help='stop a cloud, remove its directory')
    d.add_argument('base', nargs='*',
                   help='cloud base directories (default: every /tmp/gate-*)')
    d.set_defaults(func=cmd_down)
    c = sub.add_parser('computes', help="restart both computes on stock's "
                       "driver or the plugin's")
    c.add_argument('--driver', choices=sorted(L.DRIVERS), required=True)
    c.add_argument('base', nargs='?', help='cloud base directory')
    c.set_defaults(func=cmd_computes)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except P.GateError as e:
        print('gate.cloud: %s' % e, file=sys.stderr)
        return 1
    except (KeyboardInterrupt, Interrupted):
        return 130


if __name__ == '__main__':
    sys.exit(main())
