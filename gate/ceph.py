"""A throwaway one-node Ceph cluster: the real tier's rbd storage pools and
the gate's ``ceph`` profile (Glance, Nova's rbd disks).

:func:`start_ceph` builds a fresh cluster in a short temporary directory
(``/tmp/ncph-*``, or the directory it is given) from Debian's ``ceph-mon``
and ``ceph-osd``: one monitor
on a free loopback port (msgr2 only), one OSD on ``memstore`` (data in RAM,
:data:`MEMSTORE_BYTES` at most), no authentication (``auth_*_required =
none``: libvirt then needs no ``<auth>`` nor secret, see
:func:`rbd_pool_xml`), pools of size 1, and one rbd pool made by ``ceph osd
pool create`` and ``rbd pool init``. No ``ceph-mgr`` unless asked for: pools
and rbd images work without one, only the usage statistics (``ceph df``;
the capacity/available libvirt reports for an rbd pool) stay 0 without it.

Nothing outlives the test process: every daemon runs in the foreground,
in its own session, with a parent-death signal (SIGKILL), and
:meth:`CephCluster.stop` kills them all and removes the directory; the
directories of killed test runs are removed by the next :func:`start_ceph`.
The gate gives its own way of starting a daemon instead (``spawn``: its
process record, which ``python -m gate.cloud down`` stops), a directory
under the cloud's base and a fixed monitor port.
"""

from __future__ import annotations

import ctypes
import dataclasses
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from typing import Any
from xml.sax.saxutils import escape
from xml.sax.saxutils import quoteattr

from nova_imgtype_testing import procs

StrPath = str | os.PathLike[str]
#: Starts one daemon: (name such as ``ceph-mon.a``, argv, environment),
#: returns its process; the caller records and stops it.
Spawn = Callable[[str, list[str], dict[str, str]], 'subprocess.Popen[bytes]']

BASE_DIR = '/tmp'
BASE_PREFIX = 'ncph-'
STALE_AFTER = 3600.0
STARTUP_TIMEOUT = 60.0
MON_HOST = '127.0.0.1'
MON_ID = 'a'
OSD_ID = 0
MGR_ID = 'x'
MEMSTORE_BYTES = 1 << 30
PG_NUM = 8
DEFAULT_POOL = 'nova-rbd'
DEFAULT_LIBVIRT_POOL = 'nova-disks-pool'
LOG_TAIL_LINES = 40
_PIDS = 'pids'
_TOOLS = ('ceph-mon', 'ceph-osd', 'ceph', 'rbd', 'monmaptool')
# The ceph CLI is a script of the system python: none of our venv's.
DROP_ENV = ('PYTHONPATH', 'PYTHONHOME', 'VIRTUAL_ENV')
_PR_SET_PDEATHSIG = 1

_CONF = """\
[global]
fsid = {fsid}
mon host = [v2:{host}:{port}]
public addr = {host}
cluster addr = {host}
ms bind msgr1 = false
auth cluster required = none
auth service required = none
auth client required = none
run dir = {base}/run
crash dir = {base}/crash
log file = {base}/log/$name.log
mon data = {base}/mon
osd data = {base}/osd
mgr data = {base}/mgr
osd objectstore = memstore
memstore device bytes = {memstore_bytes}
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = {pg_num}
osd pool default pgp num = {pg_num}
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon warn on insecure global id reclaim allowed = false
mon data avail crit = 0
mon data avail warn = 0
# Each osdmap change waits this (1 s by default): start 6.8 s -> 1.2 s.
paxos propose interval = 0.05

[client]
log file = {base}/log/client.log
# An op sent before the OSD is up waits for the next objecter tick (5 s).
objecter tick interval = 0.2
"""


class CephStartError(RuntimeError):
    """The throwaway cluster did not come up; the message has its logs."""


@dataclasses.dataclass
class CephCluster:
    """A running throwaway Ceph cluster and how to reach and stop it."""

    base: str
    """Temporary directory holding all its state (removed by stop)."""
    conf: str
    """Its ``ceph.conf``, for ``ceph``/``rbd -c`` and ``qemu-img``."""
    mon_host: str
    mon_port: int
    fsid: str
    pool: str
    """The rbd pool made by :func:`start_ceph`."""
    procs: dict[str, subprocess.Popen[bytes]] = dataclasses.field(
        default_factory=dict)
    """Daemon name (``mon.a``, ``osd.0``, ``mgr.x``) -> its process."""
    keyring: str | None = None
    """Admin keyring: always None, the cluster runs without cephx."""
    stopped: bool = False
    spawn: Spawn | None = None
    """How daemons are started (None: here, dying with this process)."""

    def __enter__(self) -> CephCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def mon_addr(self) -> str:
        """``host:port`` of the monitor (msgr2)."""
        return '%s:%d' % (self.mon_host, self.mon_port)

    def log(self, lines: int = LOG_TAIL_LINES) -> str:
        """The tails of the daemons' logs and outputs, for errors."""
        parts = []
        for path in sorted(glob.glob(os.path.join(self.base, 'log', '*'))):
            try:
                with open(path, errors='replace') as f:
                    tail = f.read()[-200 * lines:].splitlines()[-lines:]
            except OSError as e:
                parts.append('==> %s <== (%s)' % (path, e))
                continue
            parts.append('==> %s <==\n%s' % (path, '\n'.join(tail)))
        return '\n'.join(parts)

    def check_alive(self) -> None:
        """Raise :class:`CephStartError` if a daemon has exited."""
        for name, proc in self.procs.items():
            rc = proc.poll()
            if rc is not None:
                raise CephStartError('ceph %s exited with status %s\n%s'
                                     % (name, rc, self.log()))

    def run(self, *args: StrPath, timeout: float = 30.0,
            binary: str = 'rbd') -> str:
        """Run ``binary -c <conf> args`` (``rbd`` by default), its stdout.

        Raises ``subprocess.CalledProcessError`` (stderr in its output) on
        a non-zero exit, ``TimeoutError`` after ``timeout`` seconds.
        """
        return _run([binary, '-c', self.conf, *args], timeout)

    def rbd(self, *args: StrPath, timeout: float = 30.0) -> str:
        """``rbd -c <conf> args``, its stdout (see :meth:`run`)."""
        return self.run(*args, timeout=timeout)

    def rbd_json(self, *args: StrPath, timeout: float = 30.0) -> Any:
        """``rbd -c <conf> args --format json``, decoded."""
        return json.loads(self.rbd(*args, '--format', 'json',
                                   timeout=timeout))

    def image_spec(self, image: str) -> str:
        """``pool/image`` of an image of our pool."""
        return '%s/%s' % (self.pool, image)

    def qemu_spec(self, image: str) -> str:
        """The ``rbd:pool/image:conf=...`` filename of qemu-img/qemu-io."""
        return 'rbd:%s:conf=%s' % (self.image_spec(image), self.conf)

    def images(self) -> list[str]:
        """Names of the images of our pool (``rbd ls``)."""
        return list(self.rbd_json('ls', self.pool))

    def purge(self) -> None:
        """Remove every image of our pool, clones first, with snapshots."""
        images = self.images()
        parents = {}
        for image in images:
            parent = self.rbd_json('info', self.image_spec(image)).get(
                'parent')
            parents[image] = parent['image'] if parent else None
        removed: set[str] = set()
        while len(removed) < len(images):
            needed = {p for i, p in parents.items() if i not in removed}
            batch = [i for i in images if i not in removed | needed]
            if not batch:
                raise RuntimeError('clone loop in %s' % images)
            for image in batch:
                spec = self.image_spec(image)
                for snap in self.rbd_json('snap', 'ls', spec):
                    if snap.get('protected') == 'true':
                        self.rbd('snap', 'unprotect',
                                 '%s@%s' % (spec, snap['name']))
                self.rbd('snap', 'purge', '--no-progress', spec)
                self.rbd('rm', '--no-progress', spec)
                removed.add(image)

    def stop(self) -> None:
        """Kill the daemons (SIGKILL: memstore keeps nothing), remove all.

        Also kills any process still running for our directory (a daemon
        of ours whose :class:`subprocess.Popen` we no longer have).
        """
        if self.stopped:
            return
        self.stopped = True
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs.values():
            _wait(proc, 10.0)
        leftovers = [p for p in procs.all_pids()
                     if p != os.getpid() and procs.runs_for(p, self.base)]
        for pid in leftovers:
            procs.signal_pid(pid, signal.SIGKILL)
        shutil.rmtree(self.base, ignore_errors=True)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DROP_ENV}
    env.update(LC_ALL='C', LANG='C')
    return env


def _wait(proc: subprocess.Popen[bytes], timeout: float,
          watch: Callable[[], object] | None = None) -> bool:
    """Wait for ``proc`` to exit, calling ``watch`` while it runs.

    Whether it exited within ``timeout``. (Polls: under eventlet's
    monkey patching ``Popen.communicate``/``wait`` with a timeout raise a
    ``TimeoutExpired`` of another copy of the subprocess module.)
    """
    deadline = time.monotonic() + timeout
    delay = 0.002
    while proc.poll() is None:
        if time.monotonic() >= deadline:
            return False
        if watch is not None:
            watch()
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    return True


def _run(cmd: Sequence[StrPath], timeout: float,
         watch: Callable[[], object] | None = None,
         log_path: str | None = None) -> str:
    """Run ``cmd``, its stdout; see :meth:`CephCluster.run`.

    Its stderr is appended to ``log_path`` when given. ``watch`` is called
    while it runs (and may raise: the command is then killed).
    """
    argv = [os.fspath(a) for a in cmd]
    start = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=err, env=_env())
        try:
            done = _wait(proc, timeout, watch)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors='replace')
        stderr = err.read().decode(errors='replace')
    if log_path is not None:
        with open(log_path, 'a') as f:
            f.write('$ %s  # %.2f s\n%s' % (' '.join(argv),
                                            time.monotonic() - start,
                                            stderr))
    if not done:
        raise TimeoutError('%s: no answer after %.0f s\n%s'
                           % (' '.join(argv), timeout, stderr))
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, argv,
                                            stdout + stderr)
    return stdout


def _free_port(host: str) -> int:
    """A TCP port free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _die_with_parent(parent: int) -> Callable[[], None]:
    """A ``preexec_fn``: SIGKILL the child when its parent (thread) dies."""
    libc = ctypes.CDLL(None, use_errno=True)

    def preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def _remove_stale_bases() -> None:
    """Remove the directories of clusters of test runs that were killed.

    Those no live process runs for (their daemons died with the test
    process) that recorded a daemon pid or are old.
    """
    for base in glob.glob(os.path.join(BASE_DIR, BASE_PREFIX + '*')):
        try:
            st = os.lstat(base)
        except OSError:
            continue
        if os.geteuid() != 0 and st.st_uid != os.geteuid():
            continue
        pidfiles = glob.glob(os.path.join(base, _PIDS, '*'))
        pids = [procs.read_pid(p) for p in pidfiles]
        if any(p and procs.runs_for(p, base) for p in pids):
            continue
        if pidfiles or time.time() - st.st_mtime > STALE_AFTER:
            shutil.rmtree(base, ignore_errors=True)


class _Starter:
    """The steps of :func:`start_ceph`, all against one deadline."""

    def __init__(self, cluster: CephCluster, timeout: float) -> None:
        self.cluster = cluster
        self.deadline = time.monotonic() + timeout
        self.timeout = timeout

    def remaining(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise CephStartError('ceph cluster not ready after %g s\n%s'
                                 % (self.timeout, self.cluster.log()))
        return left

    def run(self, cmd: Sequence[str], what: str) -> str:
        """Run a command to completion while watching the daemons."""
        c = self.cluster
        try:
            return _run(cmd, self.remaining(), self.watch,
                        os.path.join(c.base, 'log', 'commands.log'))
        except TimeoutError as e:
            raise CephStartError('%s: not done after %g s\n%s'
                                 % (what, self.timeout, c.log())) from e
        except subprocess.CalledProcessError as e:
            raise CephStartError('%s failed (exit status %s): %s\n%s'
                                 % (what, e.returncode, e.output,
                                    c.log())) from e

    def watch(self) -> None:
        self.cluster.check_alive()
        self.remaining()

    def daemon(self, kind: str, ident: str | int) -> None:
        """Start ``ceph-<kind> -f -i <ident>`` and record its pid."""
        c = self.cluster
        name = '%s.%s' % (kind, ident)
        out_path = os.path.join(c.base, 'log', '%s.out' % name)
        argv = ['ceph-%s' % kind, '-f', '-c', c.conf, '-i', str(ident)]
        if c.spawn is not None:
            proc = c.spawn('ceph-' + name, argv, _env())
        else:
            with open(out_path, 'wb') as out:
                proc = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=out,
                    stderr=subprocess.STDOUT, env=_env(),
                    start_new_session=True,
                    preexec_fn=_die_with_parent(os.getpid()))
        c.procs[name] = proc
        procs.write(os.path.join(c.base, _PIDS, name), '%d\n' % proc.pid)

    def ceph(self, *args: str) -> str:
        c = self.cluster
        left = self.remaining()
        return self.run(['ceph', '-c', c.conf,
                         '--connect-timeout', '%d' % max(1, left), *args],
                        'ceph %s' % ' '.join(args))

    def wait_for_stats(self) -> None:
        """Wait until the mgr reports usage statistics (``ceph df``)."""
        while True:
            df = json.loads(self.ceph('df', '--format', 'json'))
            if df['stats']['total_bytes'] > 0 and any(
                    p['name'] == self.cluster.pool for p in df['pools']):
                return
            time.sleep(min(0.5, self.remaining()))

    def start(self, mgr: bool, more_pools: Sequence[str] = ()) -> None:
        c = self.cluster
        mon_data = os.path.join(c.base, 'mon')
        monmap = os.path.join(c.base, 'monmap')
        self.run(['monmaptool', '--create', '--fsid', c.fsid, '--addv',
                  MON_ID, '[v2:%s]' % c.mon_addr, monmap], 'monmaptool')
        self.run(['ceph-mon', '-c', c.conf, '--mkfs', '-i', MON_ID,
                  '--monmap', monmap, '--mon-data', mon_data],
                 'ceph-mon --mkfs')
        self.daemon('mon', MON_ID)
        # Pool creation only needs the monitor: it overlaps the OSD boot.
        for pool in (c.pool, *more_pools):
            self.ceph('osd', 'pool', 'create', pool, str(PG_NUM),
                      str(PG_NUM))
        osd_uuid = str(uuid.uuid4())
        osd_id = self.ceph('osd', 'new', osd_uuid).strip()
        if osd_id != str(OSD_ID):
            raise CephStartError('ceph osd new gave id %r' % osd_id)
        self.run(['ceph-osd', '-c', c.conf, '--mkfs', '-i', str(OSD_ID),
                  '--osd-uuid', osd_uuid], 'ceph-osd --mkfs')
        self.daemon('osd', OSD_ID)
        if mgr:
            self.daemon('mgr', MGR_ID)
        # Writes the pool's first objects: returns once its PGs are active.
        for pool in (c.pool, *more_pools):
            left = self.remaining()
            self.run(['rbd', '-c', c.conf, '--rados-osd-op-timeout',
                      '%d' % max(1, left), 'pool', 'init', pool],
                     'rbd pool init %s' % pool)
        if mgr:
            self.wait_for_stats()


def start_ceph(pool: str = DEFAULT_POOL, timeout: float = STARTUP_TIMEOUT,
               mgr: bool = False, base: str | None = None,
               port: int | None = None, more_pools: Sequence[str] = (),
               spawn: Spawn | None = None,
               memstore_bytes: int = MEMSTORE_BYTES) -> CephCluster:
    """Start a throwaway one-node cluster with an initialised rbd pool.

    ``mgr``: also start a ``ceph-mgr`` and wait for its statistics (some
    8 s more, ~300 MB), for pool capacity/usage figures (``ceph df``, which
    Nova's rbd computes report their disk from). ``base``: an empty
    directory for it (made if missing) instead of a new ``/tmp/ncph-*``;
    ``port``: the monitor's port instead of a free one; ``more_pools``:
    rbd pools made besides ``pool``; ``spawn``: how its daemons are started
    (see :data:`Spawn`); ``memstore_bytes``: the OSD's capacity (its data
    is in memory, as written). Raises :class:`CephStartError` with the
    daemons' logs if the cluster is not ready within ``timeout`` seconds.
    """
    tools = _TOOLS + (('ceph-mgr',) if mgr else ())
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise CephStartError('not found: %s (see bindep.txt)'
                             % ', '.join(missing))
    if base is None:
        _remove_stale_bases()
        base = tempfile.mkdtemp(prefix=BASE_PREFIX, dir=BASE_DIR)
    else:
        os.makedirs(base, exist_ok=True)
    try:
        for sub in ('mon', 'osd', 'mgr', 'run', 'log', 'crash', _PIDS):
            os.mkdir(os.path.join(base, sub))
        cluster = CephCluster(
            base=base, conf=os.path.join(base, 'ceph.conf'),
            mon_host=MON_HOST,
            mon_port=port if port is not None else _free_port(MON_HOST),
            fsid=str(uuid.uuid4()), pool=pool, spawn=spawn)
        procs.write(cluster.conf, ceph_conf(cluster, memstore_bytes))
    except BaseException:
        shutil.rmtree(base, ignore_errors=True)
        raise
    try:
        _Starter(cluster, timeout).start(mgr, more_pools)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def ceph_conf(cluster: CephCluster,
              memstore_bytes: int = MEMSTORE_BYTES) -> str:
    """The cluster's ``ceph.conf``: what every daemon and client reads."""
    return _CONF.format(
        fsid=cluster.fsid, host=cluster.mon_host, port=cluster.mon_port,
        base=cluster.base, memstore_bytes=memstore_bytes, pg_num=PG_NUM)


def rbd_pool_xml(cluster: CephCluster,
                 name: str = DEFAULT_LIBVIRT_POOL) -> str:
    """libvirt ``<pool type='rbd'>`` XML for the cluster's rbd pool.

    No ``<auth>``: without it libvirt connects with ``auth_supported =
    none``, which the cluster accepts. libvirt reads no ceph.conf, the
    monitor is given by host and port.
    """
    return (
        "<pool type='rbd'>"
        "<name>%s</name>"
        "<source>"
        "<name>%s</name>"
        "<host name=%s port=%s/>"
        "</source>"
        "</pool>" % (escape(name), escape(cluster.pool),
                     quoteattr(cluster.mon_host),
                     quoteattr(str(cluster.mon_port))))


def ceph_cluster_fixture(pool: str = DEFAULT_POOL,
                         mgr: bool = False) -> Iterator[CephCluster]:
    """Body of a pytest fixture: a started cluster, stopped afterwards.

    In a conftest::

        @pytest.fixture(scope='session')
        def ceph_cluster() -> Iterator[ceph.CephCluster]:
            yield from ceph.ceph_cluster_fixture()
    """
    cluster = start_ceph(pool, mgr=mgr)
    try:
        yield cluster
    finally:
        cluster.stop()
