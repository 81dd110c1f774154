"""Processes of the real tier's throwaway daemons: pids, names and mount
namespaces read from ``/proc``, signals, and the reaper each daemon runs
under (:data:`REAPER`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from collections.abc import Mapping


def read_pid(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def signal_pid(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


# Process names (15 characters at most) of what a daemon of ours spawns.
HELPERS = frozenset({'libvirtd', 'virtlogd', 'qemu-system-x86'})


def comm(pid: int) -> str | None:
    """Name of a live process (None when gone or a zombie)."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            stat = f.read()
    except OSError:
        return None
    comm, rest = stat.split('(', 1)[1].rsplit(')', 1)
    return None if rest.split()[0] in ('Z', 'X') else comm


def is_libvirtd(pid: int) -> bool:
    """Whether ``pid`` is a libvirtd that has not exited (nor a zombie)."""
    return comm(pid) == 'libvirtd'


def mnt_ns(pid: int) -> str | None:
    try:
        return os.readlink('/proc/%d/ns/mnt' % pid)
    except OSError:
        return None


def all_pids() -> list[int]:
    return [int(p) for p in os.listdir('/proc') if p.isdigit()]


def terminate(pids: Iterable[int]) -> None:
    """SIGTERM the pids, SIGKILL what is left after a moment."""
    alive = [p for p in pids if signal_pid(p, signal.SIGTERM)]
    deadline = time.monotonic() + 3
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if signal_pid(p, 0)]
    for p in alive:
        signal_pid(p, signal.SIGKILL)


def persistent_dir(path: str, uid: int, gid: int) -> str | None:
    """``path`` created 0700 for ``uid``, or None if it is not safe/usable."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        if os.geteuid() == 0:
            os.chown(path, uid, gid)
        st = os.lstat(path)
    except OSError:
        return None
    if st.st_uid != uid or st.st_mode & 0o022 or not os.path.isdir(path):
        return None
    return path


def write(path: str, text: str) -> None:
    with open(path, 'w') as f:
        f.write(text)


# Runs the daemon as its child, as a child subreaper: QEMU (which libvirtd
# double-forks) is re-parented to it and reaped at once. Without it PID 1
# reaps it, and on some machines (containers) so late that every domain
# destroy waits seconds for the zombie to go. It also dies with the test
# process (parent-death signal) and then takes libvirtd and every QEMU of
# it along, so a killed test run leaves nothing running.
REAPER = r"""
import ctypes, os, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(36, 1, 0, 0, 0)                 # PR_SET_CHILD_SUBREAPER
libc.prctl(1, signal.SIGTERM, 0, 0, 0)     # PR_SET_PDEATHSIG
stopping = False
def on_term(signum, frame):
    global stopping
    stopping = True
    try:
        os.kill(child, signal.SIGTERM)
    except ProcessLookupError:
        pass
child = os.fork()
if child == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
signal.signal(signal.SIGTERM, on_term)
signal.signal(signal.SIGINT, signal.SIG_IGN)
if os.getppid() != int(sys.argv[1]):
    on_term(None, None)
status = 1
while True:
    pid, st = os.wait()
    if pid == child:
        status = os.waitstatus_to_exitcode(st)
        break
def orphans():
    me = str(os.getpid())
    for p in os.listdir('/proc'):
        try:
            with open('/proc/%s/stat' % p) as f:
                if f.read().rsplit(')', 1)[1].split()[1] == me:
                    yield int(p)
        except (OSError, IndexError, ValueError):
            pass
for sig, pause in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 1.0)):
    for p in orphans():
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + pause
    while time.monotonic() < deadline:
        try:
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                time.sleep(0.02)
        except ChildProcessError:
            break
sys.exit(status)
"""


REAPER_PIDFILE = 'reaper.pid'


def popen(base: str, cmd: list[str], out_path: str,
          env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start the daemon (in the foreground) under :data:`REAPER`."""
    with open(out_path, 'wb') as out:
        proc = subprocess.Popen(
            [sys.executable, '-I', '-c', REAPER, str(os.getpid()), *cmd],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            env=env, start_new_session=True)
    write(os.path.join(base, REAPER_PIDFILE), '%d\n' % proc.pid)
    return proc


def cmdline(pid: int) -> bytes:
    """The command line of ``pid``, NUL-separated (empty when gone)."""
    try:
        with open('/proc/%d/cmdline' % pid, 'rb') as f:
            return f.read()
    except OSError:
        return b''


def runs_for(pid: int, base: str) -> bool:
    """Whether ``pid`` is a live (not zombie) process run for ``base``."""
    return comm(pid) is not None and os.fsencode(base + '/') in cmdline(pid)
