"""Helpers for the real tier: a throwaway libvirtd, real images, domains.

Nothing here is faked: images are made by ``qemu-img``/``qemu-io``, domains
are started by a real libvirtd running real QEMU (KVM when the daemon can
use ``/dev/kvm``, TCG otherwise).

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

Either runs under a small reaper process (:data:`_REAPER`) that reaps QEMU
at once and, should the test process die, stops libvirtd and its QEMUs.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any
from xml.sax.saxutils import escape
from xml.sax.saxutils import quoteattr

import libvirt
from oslo_concurrency import processutils

StrPath = str | os.PathLike[str]

EMULATOR = '/usr/bin/qemu-system-x86_64'
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
DEFAULT_PATTERN = b'nova-imgtype real-tier test data\n'

# Bind mounts of the system daemon: subdirectory of the base -> host path.
_SYSTEM_MOUNTS = (
    ('etc', '/etc/libvirt'),
    ('run', '/run/libvirt'),
    ('lib', '/var/lib/libvirt'),
    ('cache', '/var/cache/libvirt'),
    ('log', '/var/log/libvirt'),
)
_QEMU_ENV = {'LC_ALL': 'C', 'LANG': 'C'}


# --------------------------------------------------------------------------
# qemu-img and images
# --------------------------------------------------------------------------

def qemu_img(*args: StrPath) -> str:
    """Run ``qemu-img`` with ``args`` and return its standard output.

    Raises ``processutils.ProcessExecutionError`` on a non-zero exit.
    """
    out, _err = processutils.execute(
        'qemu-img', *(os.fspath(a) for a in args),
        env_variables=_QEMU_ENV)
    return str(out)


def qemu_img_info(path: StrPath, backing_chain: bool = False,
                  force_share: bool = True) -> Any:
    """``qemu-img info --output=json`` of ``path``, decoded.

    A dict, or with ``backing_chain`` a list of dicts (the image first).
    ``force_share`` (``-U``) reads an image a running QEMU holds; without
    it ``qemu-img`` fails on such an image ("Failed to get shared lock").
    """
    args: list[StrPath] = ['info', '--output=json']
    if backing_chain:
        args.append('--backing-chain')
    if force_share:
        args.append('-U')
    args.append(path)
    return json.loads(qemu_img(*args))


def pattern_chunks(size_bytes: int, pattern: bytes) -> dict[int, bytes]:
    """Where :func:`make_image` writes ``pattern`` in an image of that size.

    At offset 0, at an unaligned offset in the fourth 64 KiB cluster, across
    the middle of the image and at its very end; offsets that would not fit
    or would overlap the previous one are left out.
    """
    if not pattern:
        raise ValueError('empty pattern')
    n = len(pattern)
    candidates = (0, 3 * 65536 + 7, size_bytes // 2 - n // 2,
                  size_bytes - n)
    chunks: dict[int, bytes] = {}
    end = 0
    for off in sorted(set(candidates)):
        if off >= end and off + n <= size_bytes:
            chunks[off] = pattern
            end = off + n
    return chunks


def sha256_of_chunks(size_bytes: int,
                     *chunk_maps: Mapping[int, bytes]) -> str:
    """sha256 of ``size_bytes`` of zeroes with the chunks written in order.

    The checksum :func:`sha256_of_guest_data` gives for an image made by
    :func:`make_image` (pass the chunks of its backing chain first).
    """
    data = bytearray(size_bytes)
    for chunks in chunk_maps:
        for off, chunk in chunks.items():
            data[off:off + len(chunk)] = chunk
    return hashlib.sha256(data).hexdigest()


def make_image(path: StrPath, fmt: str, size_bytes: int,
               pattern: bytes = DEFAULT_PATTERN, compressed: bool = False,
               backing_file: StrPath | None = None,
               backing_fmt: str | None = None,
               data_file: StrPath | None = None) -> dict[int, bytes]:
    """Make a real ``raw`` or ``qcow2`` image at ``path``.

    Its guest data are zeroes with ``pattern`` at the offsets of
    :func:`pattern_chunks`. A plain qcow2 is converted from such a raw file
    (``compressed``: ``qemu-img convert -c``). With ``backing_file`` the
    qcow2 is a thin overlay (``-b``/``-F``; ``backing_fmt`` is probed when
    not given) holding only the pattern writes; with ``data_file`` its data
    clusters are in that external file (``-o data_file=``). Both can be
    combined, neither with ``compressed``.

    Returns the chunks written (offset -> bytes), for
    :func:`sha256_of_chunks`.
    """
    if fmt not in ('raw', 'qcow2'):
        raise ValueError('unsupported format %r' % fmt)
    if size_bytes <= 0 or size_bytes % 512:
        raise ValueError('size must be a positive multiple of 512')
    layered = backing_file is not None or data_file is not None
    if fmt == 'raw' and (compressed or layered):
        raise ValueError('raw images take no compression/backing/data file')
    if compressed and layered:
        raise ValueError('compression needs a self-contained qcow2')
    chunks = pattern_chunks(size_bytes, pattern)
    path = os.fspath(path)
    if layered:
        _make_layered_qcow2(path, size_bytes, chunks, backing_file,
                            backing_fmt, data_file)
    elif fmt == 'raw':
        _write_raw(path, size_bytes, chunks)
    else:
        tmp = path + '.raw.tmp'
        try:
            _write_raw(tmp, size_bytes, chunks)
            args = ['convert', '-f', 'raw', '-O', 'qcow2']
            if compressed:
                args.append('-c')
            qemu_img(*args, tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return chunks


def _write_raw(path: str, size_bytes: int,
               chunks: Mapping[int, bytes]) -> None:
    """A sparse raw file of ``size_bytes`` with ``chunks`` written."""
    with open(path, 'wb') as f:
        f.truncate(size_bytes)
        for off, chunk in chunks.items():
            f.seek(off)
            f.write(chunk)


def _make_layered_qcow2(path: str, size_bytes: int,
                        chunks: Mapping[int, bytes],
                        backing_file: StrPath | None,
                        backing_fmt: str | None,
                        data_file: StrPath | None) -> None:
    """qcow2 with a backing file and/or data file, then qemu-io writes."""
    args: list[StrPath] = ['create', '-q', '-f', 'qcow2']
    if backing_file is not None:
        if backing_fmt is None:
            # qemu resolves a relative backing file against the overlay.
            probe = os.path.join(os.path.dirname(path) or '.',
                                 os.fspath(backing_file))
            backing_fmt = qemu_img_info(probe)['format']
        args += ['-b', backing_file, '-F', str(backing_fmt)]
    if data_file is not None:
        data_path = os.path.abspath(os.fspath(data_file))
        if ',' in data_path:
            raise ValueError('a comma in a data file path is not supported')
        args += ['-o', 'data_file=%s' % data_path]
    qemu_img(*args, path, str(size_bytes))
    with tempfile.TemporaryDirectory() as tmp:
        cmds: list[str] = []
        for i, (off, chunk) in enumerate(chunks.items()):
            src = os.path.join(tmp, str(i))
            with open(src, 'wb') as f:
                f.write(chunk)
            cmds += ['-c', 'write -q -s %s %d %d' % (src, off, len(chunk))]
        processutils.execute('qemu-io', '-f', 'qcow2', *cmds, path,
                             env_variables=_QEMU_ENV)


def sha256_of_guest_data(path: StrPath, fmt: str) -> str:
    """sha256 of the guest-visible data of an image (converted to raw)."""
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, 'guest.raw')
        qemu_img('convert', '-U', '-f', fmt, '-O', 'raw', path, raw)
        digest = hashlib.sha256()
        with open(raw, 'rb') as f:
            while block := f.read(1 << 20):
                digest.update(block)
        return digest.hexdigest()


# --------------------------------------------------------------------------
# Domains
# --------------------------------------------------------------------------

def file_disk_xml(path: StrPath, fmt: str, target: str = 'vda',
                  bus: str = 'virtio') -> str:
    """A ``<disk type='file'>`` element for :func:`start_domain`."""
    return (
        "<disk type='file' device='disk'>"
        "<driver name='qemu' type=%s/>"
        "<source file=%s/>"
        "<target dev=%s bus=%s/>"
        "</disk>" % (quoteattr(fmt), quoteattr(os.fspath(path)),
                     quoteattr(target), quoteattr(bus)))


def kvm_usable(conn: libvirt.virConnect) -> bool:
    """Whether the daemon offers domain type kvm for x86_64 guests."""
    caps = ET.fromstring(conn.getCapabilities())
    return any(
        domain.get('type') == 'kvm'
        for guest in caps.findall('guest')
        if guest.find("arch[@name='x86_64']") is not None
        for domain in guest.findall('arch/domain'))


def start_domain(conn: libvirt.virConnect, name: str,
                 disk_xml_snippets: Iterable[str], kvm: bool,
                 serial_path: StrPath | None = None) -> libvirt.virDomain:
    """Define and start a minimal x86_64 domain with the given disks.

    64 MiB, one vCPU, no network, no graphics, no USB, no balloon; the
    serial console goes to ``serial_path`` when given, else nowhere.
    Domain type ``kvm`` when ``kvm`` is true, else ``qemu`` (TCG).
    """
    if serial_path is None:
        serial = "<serial type='null'/>"
    else:
        serial = ("<serial type='file'><source path=%s/></serial>"
                  % quoteattr(os.fspath(serial_path)))
    xml = (
        "<domain type=%s>"
        "<name>%s</name>"
        "<memory unit='MiB'>64</memory>"
        "<vcpu>1</vcpu>"
        "<os><type arch='x86_64'>hvm</type><boot dev='hd'/></os>"
        "<devices>"
        "<emulator>%s</emulator>"
        "%s%s"
        "<controller type='usb' model='none'/>"
        "<memballoon model='none'/>"
        "</devices>"
        "</domain>" % (quoteattr('kvm' if kvm else 'qemu'), escape(name),
                       escape(EMULATOR), ''.join(disk_xml_snippets),
                       serial))
    dom = conn.defineXML(xml)
    try:
        dom.create()
    except libvirt.libvirtError:
        dom.undefine()
        raise
    return dom


def destroy_domain(dom: libvirt.virDomain) -> None:
    """Stop (hard) and undefine a domain; gone already is fine."""
    try:
        if dom.isActive():
            dom.destroy()
        if dom.isPersistent():
            dom.undefine()
    except libvirt.libvirtError as e:
        if e.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
            raise


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
                pid = _read_pid(self.pidfile)
                self.mnt_ns = _mnt_ns(pid) if pid else None
            return

    def stop(self) -> None:
        """Destroy its domains, stop it and its helpers, remove its state."""
        if self.stopped:
            return
        self.stopped = True
        if self.proc.poll() is None:
            self._destroy_domains()
        pid = _read_pid(self.pidfile)
        helper_pids = self._helper_pids() - {pid}
        own_ns = _mnt_ns(os.getpid())
        # libvirtd by its pidfile; the reaper then ends what is left of it
        # (a SIGTERM to the reaper is passed on to libvirtd).
        if not (pid and _is_libvirtd(pid) and _signal(pid, signal.SIGTERM)):
            _signal(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            if pid and _is_libvirtd(pid):
                helper_pids.add(pid)
        # Normally the reaper left nothing; pids may be reused by now, so
        # only what still is a helper of ours or in the daemon's namespace.
        leftovers = {p for p in helper_pids if _comm(p) in _HELPERS}
        if self.mnt_ns is not None and self.mnt_ns != own_ns:
            leftovers |= {p for p in _all_pids()
                          if _mnt_ns(p) == self.mnt_ns}
        _terminate(leftovers - {os.getpid()})
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
            pid = _read_pid(path)
            if pid:
                pids.add(pid)
        return pids


def _read_pid(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _signal(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


# Process names (15 characters at most) of what a daemon of ours spawns.
_HELPERS = frozenset({'libvirtd', 'virtlogd', 'qemu-system-x86'})


def _comm(pid: int) -> str | None:
    """Name of a live process (None when gone or a zombie)."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            stat = f.read()
    except OSError:
        return None
    comm, rest = stat.split('(', 1)[1].rsplit(')', 1)
    return None if rest.split()[0] in ('Z', 'X') else comm


def _is_libvirtd(pid: int) -> bool:
    """Whether ``pid`` is a libvirtd that has not exited (nor a zombie)."""
    return _comm(pid) == 'libvirtd'


def _mnt_ns(pid: int) -> str | None:
    try:
        return os.readlink('/proc/%d/ns/mnt' % pid)
    except OSError:
        return None


def _all_pids() -> list[int]:
    return [int(p) for p in os.listdir('/proc') if p.isdigit()]


def _terminate(pids: Iterable[int]) -> None:
    """SIGTERM the pids, SIGKILL what is left after a moment."""
    alive = [p for p in pids if _signal(p, signal.SIGTERM)]
    deadline = time.monotonic() + 3
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if _signal(p, 0)]
    for p in alive:
        _signal(p, signal.SIGKILL)


def _persistent_dir(path: str, uid: int, gid: int) -> str | None:
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


def _write(path: str, text: str) -> None:
    with open(path, 'w') as f:
        f.write(text)


# Runs the daemon as its child, as a child subreaper: QEMU (which libvirtd
# double-forks) is re-parented to it and reaped at once. Without it PID 1
# reaps it, and on some machines (containers) so late that every domain
# destroy waits seconds for the zombie to go. It also dies with the test
# process (parent-death signal) and then takes libvirtd and every QEMU of
# it along, so a killed test run leaves nothing running.
_REAPER = r"""
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


_REAPER_PIDFILE = 'reaper.pid'


def _popen(base: str, cmd: list[str], out_path: str,
           env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start the daemon (in the foreground) under :data:`_REAPER`."""
    with open(out_path, 'wb') as out:
        proc = subprocess.Popen(
            [sys.executable, '-I', '-c', _REAPER, str(os.getpid()), *cmd],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            env=env, start_new_session=True)
    _write(os.path.join(base, _REAPER_PIDFILE), '%d\n' % proc.pid)
    return proc


def _runs_for(pid: int, base: str) -> bool:
    """Whether ``pid`` is a live (not zombie) process run for ``base``."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            if f.read().rsplit(')', 1)[1].split()[0] in ('Z', 'X'):
                return False
        with open('/proc/%d/cmdline' % pid, 'rb') as f:
            return os.fsencode(base + '/') in f.read()
    except (OSError, IndexError):
        return False


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
        cache = _persistent_dir(SYSTEM_CACHE_DIR, 0, 0)
        log = os.path.join(base, 'log', 'libvirtd.log')
        out = os.path.join(base, 'libvirtd.out')
        conf = os.path.join(base, 'etc', 'libvirtd.conf')
        pidfile = os.path.join(base, 'libvirtd.pid')
        _write(conf, (
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
        _write(os.path.join(base, 'etc', 'qemu.conf'), (
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
        proc = _popen(base, ['unshare', '--mount', '--propagation', 'private',
                       'sh', '-c', script], out)
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
        cache = _persistent_dir(SESSION_CACHE_DIR % uid, uid, gid)
        log = os.path.join(dirs['log'], 'libvirtd.log')
        out = os.path.join(base, 'libvirtd.out')
        conf = os.path.join(dirs['config'], 'libvirt', 'libvirtd.conf')
        pidfile = os.path.join(dirs['run'], 'libvirtd.pid')
        _write(conf, 'log_outputs = "3:file:%s"\n' % log)
        _write(os.path.join(dirs['config'], 'libvirt', 'qemu.conf'),
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
        proc = _popen(base, cmd, out, env)
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
        pid = _read_pid(os.path.join(base, _REAPER_PIDFILE))
        if pid is None:
            stale = time.time() - st.st_mtime > STALE_AFTER
        else:
            stale = not _runs_for(pid, base)
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
