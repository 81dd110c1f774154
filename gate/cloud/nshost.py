"""One compute "host": the first process of its own mount and UTS namespace.

Run by :mod:`gate.cloud.computes` as::

    unshare --mount --uts --propagation private -- \\
        python <this file> SPEC.json

by its path, outside the ``gate`` package: it imports nothing but the
standard library.

It sets the hostname, bind-mounts the host's own directories over the
shared paths (``/var/lib/nova/instances``, ``/etc/libvirt``, ...), then runs
the host's daemons (virtlogd, libvirtd, sshd) as its children. It is a child
subreaper: QEMU, which libvirtd double-forks, is re-parented to it and
reaped at once. On SIGTERM it stops its daemons, then every process left in
the namespace, and exits; the namespace and its mounts go with it.
Processes entered later with ``nsenter`` (nova-compute) are not its
children: they are stopped by whoever started them.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
from types import FrameType

PR_SET_CHILD_SUBREAPER = 36


def _mount(src: str, target: str) -> None:
    subprocess.run(['mount', '--bind', src, target], check=True)


def _ns_pids() -> list[int]:
    """Every other process in our mount namespace."""
    me = os.getpid()
    own = os.readlink('/proc/self/ns/mnt')
    pids = []
    for p in os.listdir('/proc'):
        if not p.isdigit() or int(p) == me:
            continue
        try:
            if os.readlink('/proc/%s/ns/mnt' % p) == own:
                pids.append(int(p))
        except OSError:
            pass
    return pids


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _stop(children: list[subprocess.Popen[bytes]]) -> None:
    """Daemons in reverse order, then whatever is left in the namespace."""
    for child in reversed(children):
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
    for sig, pause in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 2.0)):
        pids = _ns_pids()
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + pause
        while time.monotonic() < deadline and _ns_pids():
            _reap()
            time.sleep(0.05)
    _reap()


def main(spec_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    stopping = False

    def on_term(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    socket.sethostname(spec['hostname'])
    for src, target in spec['mounts']:
        _mount(src, target)
    children: list[subprocess.Popen[bytes]] = []
    for daemon in spec['daemons']:
        if stopping:
            break
        with open(daemon['log'], 'ab') as out:
            children.append(subprocess.Popen(
                daemon['argv'], stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT))
        if daemon.get('wait_for'):
            deadline = time.monotonic() + 30
            while (not os.path.exists(daemon['wait_for'])
                   and time.monotonic() < deadline
                   and children[-1].poll() is None):
                time.sleep(0.02)
    with open(spec['ready'], 'w') as f:
        f.write('%d\n' % os.getpid())
    while not stopping:
        _reap()
        time.sleep(0.2)
    _stop(children)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1]))
