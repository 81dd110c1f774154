"""Helpers for the real tier: a throwaway libvirtd, real images, domains.

Nothing here is faked: images are made by ``qemu-img``/``qemu-io``
(:mod:`.images`), domains are started by a real libvirtd running real QEMU
(:mod:`.domains`; KVM when the daemon can use ``/dev/kvm``, TCG
otherwise). This module is the daemon; it also offers the images' and
domains' helpers under their names, as the tests know them.

The daemon (:func:`start_libvirtd`) is, in order of preference:

* ``system``: the privileged libvirtd, as root, isolated in a private mount
  namespace: its ``/etc/libvirt``, ``/run/libvirt``, ``/var/lib/libvirt`` and
  ``/var/log/libvirt`` are bind mounts of directories of a temporary
  directory, and ``/var/cache/libvirt`` a bind mount of a persistent cache
  directory (:data:`SYSTEM_CACHE_DIR`) so that QEMU's capabilities are probed
  once per machine rather than once per test session (4-8 s).
* ``session``: an unprivileged session libvirtd (``nobody`` when we are
  root), all its state in a temporary directory. No KVM then.

``NOVA_IMGTYPE_LIBVIRTD=system|session`` forces one of them (default:
``auto``, the system daemon as root, else the session daemon).

Either runs under a small reaper process (:data:`.procs.REAPER`) that reaps
QEMU at once and, should the test process die, stops libvirtd and its
QEMUs.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
import warnings

import libvirt

from nova_imgtype_testing import procs
from nova_imgtype_testing.domains import EMULATOR as EMULATOR
from nova_imgtype_testing.domains import destroy_domain as destroy_domain
from nova_imgtype_testing.domains import file_disk_xml as file_disk_xml
from nova_imgtype_testing.domains import kvm_usable as kvm_usable
from nova_imgtype_testing.domains import start_domain as start_domain
from nova_imgtype_testing.images import DEFAULT_PATTERN as DEFAULT_PATTERN
from nova_imgtype_testing.images import StrPath as StrPath
from nova_imgtype_testing.images import make_image as make_image
from nova_imgtype_testing.images import pattern_chunks as pattern_chunks
from nova_imgtype_testing.images import qemu_img as qemu_img
from nova_imgtype_testing.images import qemu_img_info as qemu_img_info
from nova_imgtype_testing.images import sha256_of_chunks as sha256_of_chunks
from nova_imgtype_testing.images import (
    sha256_of_guest_data as sha256_of_guest_data,
)

LIBVIRTD = 'libvirtd'
QEMU_USER = 'libvirt-qemu'
MODE_ENV = 'NOVA_IMGTYPE_LIBVIRTD'
SYSTEM_CACHE_DIR = '/var/tmp/nova-imgtype-libvirt-cache'
SESSION_CACHE_DIR = '/var/tmp/nova-imgtype-libvirt-cache-session-%d'
STARTUP_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0
NOBODY = 65534
# Daemon base directories: short, unix socket paths are at most 107 bytes.
BASE_DIR = '/tmp'
BASE_PREFIX = 'nilv-'
STALE_AFTER = 3600.0

# Bind mounts of the system daemon: subdirectory of the base -> host path.
_SYSTEM_MOUNTS = (
    ('etc', '/etc/libvirt'),
    ('run', '/run/libvirt'),
    ('lib', '/var/lib/libvirt'),
    ('cache', '/var/cache/libvirt'),
    ('log', '/var/log/libvirt'),
)


# --------------------------------------------------------------------------
# The throwaway daemon
# --------------------------------------------------------------------------

class DaemonStartError(RuntimeError):
    """The throwaway libvirtd did not come up; the message has its log."""


@dataclasses.dataclass
class LibvirtDaemon:
    """A running throwaway libvirtd and how to reach and stop it."""

    mode: str
    """``'system'`` or ``'session'``."""
    base: str
    """Temporary directory holding all its state (removed by stop)."""
    uri: str
    uid: int
    """The uid it (and QEMU) run as."""
    gid: int
    proc: subprocess.Popen[bytes]
    pidfile: str
    log_paths: tuple[str, ...]
    mnt_ns: str | None = None
    """Its private mount namespace (system mode), for the final sweep."""
    stopped: bool = False

    def log(self) -> str:
        """The daemon's log files and its stdout/stderr, for errors."""
        parts = []
        for path in self.log_paths:
            try:
                with open(path, errors='replace') as f:
                    parts.append('==> %s <==\n%s' % (path, f.read()[-20000:]))
            except OSError as e:
                parts.append('==> %s <== (%s)' % (path, e))
        return '\n'.join(parts)

    def give(self, *paths: StrPath) -> None:
        """Hand files/directories (recursively) over to the daemon's uid.

        A no-op when the daemon runs as ourselves or as root; needed before
        QEMU or the daemon write to something we made when we are root and
        the daemon is ``nobody`` (the session fallback).
        """
        if self.uid in (0, os.geteuid()):
            return
        for path in paths:
            os.chown(path, self.uid, self.gid)
            for root, dirs, files in os.walk(path):
                for name in dirs + files:
                    os.chown(os.path.join(root, name), self.uid, self.gid,
                             follow_symlinks=False)

    def wait_ready(self, timeout: float) -> None:
        """Wait until the URI accepts a connection, or raise with the log."""
        deadline = time.monotonic() + timeout
        while True:
            rc = self.proc.poll()
            if rc is not None:
                raise DaemonStartError(
                    '%s libvirtd exited with status %s\n%s'
                    % (self.mode, rc, self.log()))
            try:
                conn = libvirt.open(self.uri)
            except libvirt.libvirtError as e:
                if time.monotonic() > deadline:
                    raise DaemonStartError(
                        '%s libvirtd not answering on %s after %.0f s: %s\n%s'
                        % (self.mode, self.uri, timeout, e, self.log())
                    ) from e
                time.sleep(0.02)
                continue
            try:
                conn.getLibVersion()
            finally:
                conn.close()
            if self.mnt_ns is None and self.mode == 'system':
                pid = procs.read_pid(self.pidfile)
                self.mnt_ns = procs.mnt_ns(pid) if pid else None
            return

    def stop(self) -> None:
        """Destroy its domains, stop it and its helpers, remove its state."""
        if self.stopped:
            return
        self.stopped = True
        if self.proc.poll() is None:
            self._destroy_domains()
        pid = procs.read_pid(self.pidfile)
        helper_pids = self._helper_pids() - {pid}
        own_ns = procs.mnt_ns(os.getpid())
        # libvirtd by its pidfile; the reaper then ends what is left of it
        # (a SIGTERM to the reaper is passed on to libvirtd).
        if not (pid and procs.is_libvirtd(pid) and
                procs.signal_pid(pid, signal.SIGTERM)):
            procs.signal_pid(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            if pid and procs.is_libvirtd(pid):
                helper_pids.add(pid)
        # Normally the reaper left nothing; pids may be reused by now, so
        # only what still is a helper of ours or in the daemon's namespace.
        leftovers = {p for p in helper_pids if procs.comm(p) in procs.HELPERS}
        if self.mnt_ns is not None and self.mnt_ns != own_ns:
            leftovers |= {p for p in procs.all_pids()
                          if procs.mnt_ns(p) == self.mnt_ns}
        procs.terminate(leftovers - {os.getpid()})
        shutil.rmtree(self.base, ignore_errors=True)

    def _destroy_domains(self) -> None:
        """Destroy running domains: libvirtd leaves QEMU running on exit."""
        try:
            conn = libvirt.open(self.uri)
        except libvirt.libvirtError:
            return
        try:
            for dom in conn.listAllDomains(
                    libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE):
                try:
                    dom.destroy()
                except libvirt.libvirtError:
                    pass
        finally:
            conn.close()

    def _helper_pids(self) -> set[int]:
        """QEMU, virtlogd, ... pids from the pidfiles under our run dir."""
        pids = set()
        for path in glob.glob(os.path.join(self.base, 'run', '**', '*.pid'),
                              recursive=True):
            pid = procs.read_pid(path)
            if pid:
                pids.add(pid)
        return pids


def _start_system(timeout: float,
                  tcp_address: str | None = None) -> LibvirtDaemon:
    """The privileged daemon in a private mount namespace (needs root),
    listening on ``tcp_address`` too (``qemu+tcp://<address>/system``, no
    authentication) when given."""
    for tool in ('unshare', 'mount', LIBVIRTD):
        if shutil.which(tool) is None:
            raise DaemonStartError('%s not found' % tool)
    try:
        pwd.getpwnam(QEMU_USER)
    except KeyError:
        # libvirtd's QEMU driver refuses to start without its default user.
        subprocess.run(['useradd', '--system', '--no-create-home',
                        QEMU_USER], check=True, capture_output=True)
    base = tempfile.mkdtemp(prefix=BASE_PREFIX, dir=BASE_DIR)
    try:
        for sub, _ in _SYSTEM_MOUNTS:
            os.mkdir(os.path.join(base, sub))
        cache = procs.persistent_dir(SYSTEM_CACHE_DIR, 0, 0)
        log = os.path.join(base, 'log', 'libvirtd.log')
        out = os.path.join(base, 'libvirtd.out')
        conf = os.path.join(base, 'etc', 'libvirtd.conf')
        pidfile = os.path.join(base, 'libvirtd.pid')
        procs.write(conf, (
            'unix_sock_dir = "%s/run"\n'
            'auth_unix_rw = "none"\n'
            'auth_unix_ro = "none"\n'
            'log_outputs = "3:file:%s"\n'
            # Its own host: libvirt refuses a migration between two daemons
            # of one host UUID.
            'host_uuid = "%s"\n' % (base, log, uuid.uuid4())) + (
            'listen_tls = 0\nlisten_tcp = 1\nauth_tcp = "none"\n'
            'listen_addr = "%s"\n' % tcp_address if tcp_address else ''))
        # stdio_handler=file: no virtlogd; no cgroups and no per-domain
        # namespaces: nothing left on the host, QEMU stays in our namespace.
        procs.write(os.path.join(base, 'etc', 'qemu.conf'), (
            'user = "root"\n'
            'group = "root"\n'
            'stdio_handler = "file"\n'
            'cgroup_controllers = [ ]\n'
            'namespaces = [ ]\n'))
        mounts = []
        for sub, target in _SYSTEM_MOUNTS:
            src = cache if sub == 'cache' and cache else os.path.join(base,
                                                                      sub)
            # Mount points; the Debian package normally ships them.
            os.makedirs(target, mode=0o755, exist_ok=True)
            mounts.append('mount --bind %s %s'
                          % (shlex.quote(src), shlex.quote(target)))
        script = ' && '.join(mounts + [
            'exec %s %s-f %s -p %s' % (
                LIBVIRTD, '--listen ' if tcp_address else '',
                shlex.quote(conf), shlex.quote(pidfile))])
        proc = procs.popen(base, ['unshare', '--mount', '--propagation',
                                  'private', 'sh', '-c', script], out)
    except BaseException:
        shutil.rmtree(base, ignore_errors=True)
        raise
    daemon = LibvirtDaemon(
        mode='system', base=base,
        uri='qemu+unix:///system?socket=%s/run/libvirt-sock' % base,
        uid=0, gid=0, proc=proc, pidfile=pidfile, log_paths=(out, log))
    return _ready_or_stop(daemon, timeout)


def _start_session(timeout: float) -> LibvirtDaemon:
    """An unprivileged session daemon (as nobody when we are root)."""
    if shutil.which(LIBVIRTD) is None:
        raise DaemonStartError('%s not found' % LIBVIRTD)
    root = os.geteuid() == 0
    uid, gid = (NOBODY, NOBODY) if root else (os.geteuid(), os.getegid())
    base = tempfile.mkdtemp(prefix=BASE_PREFIX, dir=BASE_DIR)
    try:
        dirs = {name: os.path.join(base, name)
                for name in ('run', 'config', 'home', 'log', 'cache')}
        for path in dirs.values():
            os.mkdir(path, 0o700)
        os.mkdir(os.path.join(dirs['config'], 'libvirt'))
        cache = procs.persistent_dir(SESSION_CACHE_DIR % uid, uid, gid)
        log = os.path.join(dirs['log'], 'libvirtd.log')
        out = os.path.join(base, 'libvirtd.out')
        conf = os.path.join(dirs['config'], 'libvirt', 'libvirtd.conf')
        pidfile = os.path.join(dirs['run'], 'libvirtd.pid')
        procs.write(conf, 'log_outputs = "3:file:%s"\n' % log)
        procs.write(os.path.join(dirs['config'], 'libvirt', 'qemu.conf'),
                    'stdio_handler = "file"\n')
        if root:
            os.chmod(base, 0o755)
            for path in [base, *dirs.values(),
                         os.path.join(dirs['config'], 'libvirt'), conf]:
                os.chown(path, uid, gid)
        env = dict(os.environ, HOME=dirs['home'],
                   XDG_RUNTIME_DIR=dirs['run'],
                   XDG_CONFIG_HOME=dirs['config'],
                   XDG_CACHE_HOME=cache or dirs['cache'])
        cmd = [LIBVIRTD, '-f', conf, '-p', pidfile]
        if root:
            cmd = ['setpriv', '--reuid=%d' % uid, '--regid=%d' % gid,
                   '--clear-groups', *cmd]
        proc = procs.popen(base, cmd, out, env)
    except BaseException:
        shutil.rmtree(base, ignore_errors=True)
        raise
    daemon = LibvirtDaemon(
        mode='session', base=base,
        uri='qemu+unix:///session?socket=%s/libvirt/libvirt-sock'
            % dirs['run'],
        uid=uid, gid=gid, proc=proc, pidfile=pidfile, log_paths=(out, log))
    return _ready_or_stop(daemon, timeout)


def _ready_or_stop(daemon: LibvirtDaemon, timeout: float) -> LibvirtDaemon:
    try:
        daemon.wait_ready(timeout)
    except BaseException:
        daemon.stop()
        raise
    return daemon


def _remove_stale_bases() -> None:
    """Remove base directories of daemons of test runs that were killed.

    Those whose reaper is gone (it took libvirtd and its QEMUs along), or
    that never got a reaper and are old.
    """
    for base in glob.glob(os.path.join(BASE_DIR, BASE_PREFIX + '*')):
        try:
            st = os.lstat(base)
        except OSError:
            continue
        if os.geteuid() != 0 and st.st_uid != os.geteuid():
            continue
        pid = procs.read_pid(os.path.join(base, procs.REAPER_PIDFILE))
        if pid is None:
            stale = time.time() - st.st_mtime > STALE_AFTER
        else:
            stale = not procs.runs_for(pid, base)
        if stale:
            shutil.rmtree(base, ignore_errors=True)


def start_libvirtd(mode: str | None = None,
                   timeout: float = STARTUP_TIMEOUT,
                   tcp_address: str | None = None) -> LibvirtDaemon:
    """Start a throwaway libvirtd and wait until it answers.

    ``mode``: ``'system'``, ``'session'`` or ``'auto'`` (default, from
    ``$NOVA_IMGTYPE_LIBVIRTD``): the isolated system daemon as root, the
    session daemon if that fails (with a warning) or if we are not root.
    ``tcp_address``: the system daemon also listens there (libvirt's TCP
    port, no authentication), as compute nodes do for migrations.
    Raises :class:`DaemonStartError` with the daemon's log on failure.
    """
    mode = mode or os.environ.get(MODE_ENV) or 'auto'
    _remove_stale_bases()
    if mode not in ('auto', 'system', 'session'):
        raise ValueError('%s: unknown libvirtd mode %r' % (MODE_ENV, mode))
    errors = []
    if mode == 'system' or (mode == 'auto' and os.geteuid() == 0):
        if os.geteuid() != 0:
            raise DaemonStartError('the system libvirtd needs root')
        try:
            return _start_system(timeout, tcp_address)
        except (DaemonStartError, OSError,
                subprocess.CalledProcessError) as e:
            if mode == 'system':
                raise
            errors.append('system libvirtd: %s' % e)
            warnings.warn('system libvirtd failed, falling back to a '
                          'session libvirtd (no KVM): %s' % e, stacklevel=2)
    try:
        return _start_session(timeout)
    except DaemonStartError as e:
        raise DaemonStartError('\n\n'.join(errors + [str(e)])) from e
