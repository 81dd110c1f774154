"""``down``: stop everything a cloud runs and remove its base directory."""

from __future__ import annotations

import os
import shutil
import subprocess

from gate.cloud import proc as P
from gate.cloud.layout import Layout

# Stopped in this order, each group at once: the OpenStack services, then
# the compute hosts (libvirtd, QEMU, sshd), then the infrastructure (Ceph's
# daemons included).
_LAST = ('rabbitmq', 'mysqld')
_VERY_LAST = ('epmd',)


def _group(name: str) -> int:
    if name.endswith('-host'):
        return 1
    # Ceph's daemons (the ceph profile) once no QEMU uses their disks.
    if name in _LAST or name.startswith('ceph-'):
        return 2
    if name in _VERY_LAST:
        return 3
    return 0


def down(base: str, quiet: bool = False) -> list[str]:
    """Stop every process of the cloud at ``base``, remove ``base``.

    Returns what could not be cleaned (empty when all went).
    """
    base = os.path.abspath(base)
    if not os.path.basename(base).startswith('gate-'):
        raise P.GateError('%s is not a gate cloud directory' % base)
    try:
        state = P.State.load(base)
        procs = dict(state.data['procs'])
        namespaces = {ns['mnt'] for ns in state.data['namespaces'].values()
                      if ns.get('mnt')}
        created = list(state.data['created'])
    except (OSError, ValueError):
        procs, namespaces, created = {}, set(), []
    for group in range(4):
        pids = [int(e['pid']) for n, e in procs.items() if _group(n) == group]
        if pids:
            P.terminate(pids, grace=30 if group == 1 else 15, groups=True)
    # Whatever is left: in a compute's namespace, or run for this base.
    leftovers = _leftovers(base, namespaces)
    if leftovers:
        if not quiet:
            P.progress('stopping leftover processes: %s' % ', '.join(
                '%d %s' % (p, P.cmdline(p).split(b'\0')[0].decode(
                    errors='replace')) for p in leftovers))
        P.terminate(leftovers, grace=5)
    problems = []
    still = _leftovers(base, namespaces)
    if still:
        problems.append('processes still running: %s' % sorted(still))
    for path in sorted(created, key=len, reverse=True):
        try:
            _rmdirs(path)
        except OSError as e:
            problems.append('%s: %s' % (path, e))
    for mnt in _mounts_under(base):
        subprocess.run(['umount', '-l', mnt], check=False)
    shutil.rmtree(base, ignore_errors=True)
    if os.path.exists(base):
        problems.append('%s not removed' % base)
    if not quiet:
        P.progress('cloud at %s down%s' % (
            base, '' if not problems else ': ' + '; '.join(problems)))
    return problems


def _rmdirs(path: str) -> None:
    """Remove an (expected empty) tree of mount points we created."""
    for root, dirs, _files in os.walk(path, topdown=False):
        for d in dirs:
            os.rmdir(os.path.join(root, d))
    os.rmdir(path)


def _leftovers(base: str, namespaces: set[str]) -> list[int]:
    me = os.getpid()
    needle = os.fsencode(base + '/')
    out = []
    for p in P.all_pids():
        if p == me or not P.alive(p):
            continue
        if needle in P.cmdline(p) or (namespaces and
                                      P.mnt_ns(p) in namespaces):
            out.append(p)
    return out


def _mounts_under(base: str) -> list[str]:
    out = []
    try:
        with open('/proc/self/mountinfo') as f:
            for line in f:
                mnt = line.split()[4]
                if mnt == base or mnt.startswith(base + '/'):
                    out.append(mnt)
    except OSError:
        pass
    return sorted(out, key=len, reverse=True)


def layout_of(base: str) -> Layout:
    return Layout(os.path.abspath(base))
