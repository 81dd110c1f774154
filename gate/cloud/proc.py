"""Processes of the gate cloud: start, record, wait for, stop.

Every long-running process is started in its own session (its own process
group), its output in ``<base>/logs/<name>.log``, and recorded with its
pid in ``<base>/state.json`` at once, so that ``down`` (maybe another
process, after ``up --keep``) finds and stops all of it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from gate.cloud.layout import DEFAULT_PROFILE
from gate.cloud.layout import Compute
from gate.cloud.layout import Layout
from gate.cloud.layout import computes as computes_of

# /proc as the real tier's daemons read it (pids, mount namespaces).
from nova_imgtype_testing.procs import all_pids as all_pids
from nova_imgtype_testing.procs import cmdline as cmdline
from nova_imgtype_testing.procs import mnt_ns as mnt_ns

_T0 = time.monotonic()
_print_lock = threading.Lock()
# Commands run to completion right now (killed when ``up`` fails).
RUNNING: set[subprocess.Popen[bytes]] = set()
# Set when ``up`` fails: no new process starts, every wait ends.
STOPPING = threading.Event()


def _check_stopping() -> None:
    if STOPPING.is_set():
        raise GateError('stopping: another part of the cloud failed')


class GateError(RuntimeError):
    """Something of the cloud did not come up; the message says what."""


def progress(message: str) -> None:
    """``[  12.3s] message``, seconds since the gate started."""
    with _print_lock:
        print('[%6.1fs] %s' % (time.monotonic() - _T0, message), flush=True)


class State:
    """The record of what a cloud runs (``<base>/state.json``)."""

    def __init__(self, layout: Layout, data: dict[str, Any] | None = None):
        self.layout = layout
        self.data: dict[str, Any] = data or {
            'base': layout.base, 'procs': {}, 'namespaces': {},
            'created': []}
        self._lock = threading.Lock()

    @property
    def profile(self) -> str:
        """The gate profile the cloud runs (:data:`.layout.PROFILES`)."""
        return str(self.data.get('profile', DEFAULT_PROFILE))

    @property
    def computes(self) -> tuple[Compute, ...]:
        """The computes of the cloud's profile."""
        return computes_of(self.profile)

    @classmethod
    def load(cls, base: str) -> State:
        layout = Layout(base)
        with open(layout.state) as f:
            return cls(layout, json.load(f))

    def reload(self) -> None:
        """What ``state.json`` says now (another process may have started
        or stopped something since this one read it)."""
        with self._lock, open(self.layout.state) as f:
            self.data = json.load(f)

    def save(self) -> None:
        tmp = self.layout.state + '.tmp'
        with open(tmp, 'w') as f:
            json.dump(self.data, f, indent=1, sort_keys=True)
        os.replace(tmp, self.layout.state)

    def add_proc(self, name: str, pid: int, argv: Sequence[str],
                 log: str) -> None:
        with self._lock:
            self.data['procs'][name] = {
                'pid': pid, 'argv': list(argv), 'log': log,
                'started': time.time()}
            self.save()

    def drop_proc(self, name: str) -> None:
        with self._lock:
            self.data['procs'].pop(name, None)
            self.save()

    def add_namespace(self, host: str, pid: int, mnt: str | None) -> None:
        with self._lock:
            self.data['namespaces'][host] = {'pid': pid, 'mnt': mnt}
            self.save()

    def add_created(self, path: str) -> None:
        with self._lock:
            self.data['created'].append(path)
            self.save()

    def pid(self, name: str) -> int | None:
        entry = self.data['procs'].get(name)
        return int(entry['pid']) if entry else None


def spawn(state: State, name: str, argv: Sequence[str],
          env: Mapping[str, str] | None = None,
          cwd: str | None = None) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session, output to its log, and record it."""
    _check_stopping()
    log = state.layout.log(name)
    full_env = dict(os.environ)
    full_env.update(env or {})
    with open(log, 'ab') as out:
        proc = subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=out,
            stderr=subprocess.STDOUT, env=full_env,
            cwd=cwd or state.layout.base, start_new_session=True)
    state.add_proc(name, proc.pid, argv, log)
    return proc


def run(argv: Sequence[str], log: str, env: Mapping[str, str] | None = None,
        timeout: float = 600) -> None:
    """Run a command to completion, output appended to ``log``."""
    _check_stopping()
    full_env = dict(os.environ)
    full_env.update(env or {})
    with open(log, 'ab') as out:
        out.write(('$ %s\n' % ' '.join(argv)).encode())
        out.flush()
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT,
                                env=full_env, start_new_session=True)
        with _print_lock:
            RUNNING.add(proc)
        try:
            rc = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        finally:
            with _print_lock:
                RUNNING.discard(proc)
    if rc:
        raise GateError('%s exited with %d\n%s'
                        % (' '.join(argv), rc, tail(log)))


def tail(path: str, lines: int = 30) -> str:
    try:
        with open(path, errors='replace') as f:
            text = f.readlines()[-lines:]
    except OSError as e:
        return '(%s: %s)' % (path, e)
    return '---- last lines of %s ----\n%s' % (path, ''.join(text))


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as gone)."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rsplit(')', 1)[1].split()[0] not in ('Z', 'X')
    except (OSError, IndexError):
        return False


def check_alive(proc: subprocess.Popen[bytes] | None, name: str,
                log: str) -> None:
    if proc is not None and proc.poll() is not None:
        raise GateError('%s exited with status %s\n%s'
                        % (name, proc.returncode, tail(log)))


def wait_for(what: str, probe: Any, timeout: float,
             proc: subprocess.Popen[bytes] | None = None,
             log: str = '', interval: float = 0.2) -> None:
    """Call ``probe()`` until it is true; fail if ``proc`` dies first."""
    deadline = time.monotonic() + timeout
    while True:
        _check_stopping()
        check_alive(proc, what, log)
        try:
            if probe():
                return
        except Exception:  # noqa: BLE001 - not ready yet, whatever it says
            pass
        if time.monotonic() > deadline:
            raise GateError('%s not ready after %.0f s\n%s'
                            % (what, timeout, tail(log) if log else ''))
        time.sleep(interval)


def port_open(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((host, port)) == 0


def http_answers(url: str) -> bool:
    """Whether something answers HTTP there (any status below 500)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return int(r.status) < 500
    except urllib.error.HTTPError as e:
        return e.code < 500


def terminate(pids: Iterable[int], grace: float = 10.0,
              groups: bool = False) -> None:
    """SIGTERM (the process groups of) ``pids``; SIGKILL after ``grace``."""
    me = os.getpid()
    targets = [p for p in set(pids) if p != me and alive(p)]

    def send(pid: int, sig: int) -> None:
        try:
            if groups:
                try:
                    os.killpg(pid, sig)
                except (ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            else:
                os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    for p in targets:
        send(p, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        _reap()
        targets = [p for p in targets if alive(p)]
        if not targets:
            return
        time.sleep(0.1)
    for p in targets:
        send(p, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(alive(p) for p in targets):
        _reap()
        time.sleep(0.1)


def _reap() -> None:
    """Reap our own exited children (those ``up`` started)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_running() -> None:
    """Kill the commands :func:`run` is waiting for (``up`` failed)."""
    STOPPING.set()
    with _print_lock:
        procs = list(RUNNING)
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
