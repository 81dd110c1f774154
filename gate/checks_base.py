"""What the gate checks share: the cloud's computes, servers booted and
waited for, their disks seen from inside the computes' namespaces."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import urllib.parse
import uuid
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from typing import Any
from xml.etree import ElementTree

import pymysql
from openstack import exceptions as sdk_exceptions
from openstack import utils as sdk_utils

from gate import image
from gate.cloud import layout as L

Cloud = Mapping[str, Any]
MARKER = b'nova-imgtype gate marker'
TIMEOUT = 300.0


@dataclasses.dataclass(frozen=True)
class Report:
    """What a check found, with a table of its own (the gate's results
    show it under the check's name)."""

    summary: str
    columns: tuple[str, ...]
    rows: list[tuple[str, ...]]

    def as_json(self) -> dict[str, Any]:
        return {'columns': list(self.columns),
                'rows': [list(r) for r in self.rows]}


#: A gate check: (the cloud, an openstacksdk connection, the images and
#: flavors) -> what it found.
Check = Callable[[Cloud, Any, Mapping[str, Any]], 'str | Report']


class CheckFailed(Exception):
    """A check found the cloud not as it should be (and, for a check with
    a table, the table so far)."""

    def __init__(self, message: str, report: Report | None = None) -> None:
        super().__init__(message)
        self.report = report


def run_cmd(argv: list[str]) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise CheckFailed('%s: %s' % (' '.join(argv), proc.stderr.strip()))
    return proc.stdout


def compute(cloud: Cloud, host: str) -> Mapping[str, Any]:
    for c in cloud['computes']:
        if c['host'] == host:
            return c
    raise CheckFailed('no compute %s in cloud.json' % host)


def hosts(cloud: Cloud) -> tuple[str, str]:
    """(the pools host, the files host) of the plugin's configuration."""
    pools = [c['host'] for c in cloud['computes']
             if c.get('use_storage_pools')]
    files = [c['host'] for c in cloud['computes']
             if not c.get('use_storage_pools')]
    if not pools or not files:
        raise CheckFailed('the computes are not on the plugin')
    return pools[0], files[0]


# -- servers -----------------------------------------------------------------

#: Seconds between two looks at what a check waits for. The checks wait
#: hundreds of times (each leg of the move matrix waits for a stop, a
#: start, the move, its confirmation and a hard reboot of each of its
#: servers); at one second a wait overshot by half a second on average.
#: A look is one API call: the checks run while tempest does not, with at
#: most two servers moving at once.
POLL = 0.25


def poll(what: str, interval: float = POLL,
         detail: Callable[[], object] | None = None) -> Iterator[int]:
    """openstacksdk's ``iterate_timeout`` over the gate's TIMEOUT: the
    loop body polls until it returns or breaks; a timeout is a
    :class:`CheckFailed` saying ``what`` was waited for and, from
    ``detail``, what was seen last."""
    try:
        yield from sdk_utils.iterate_timeout(TIMEOUT, what, wait=interval)
    except sdk_exceptions.ResourceTimeout:
        raise CheckFailed('%s: not after %ds%s' % (
            what, TIMEOUT, ' (%s)' % detail() if detail else '')) from None


def wait(conn: Any, server: Any, status: str) -> Any:
    """The server once ``status`` with no task (openstacksdk's
    ``wait_for_server`` looks at the status alone: a live migration runs
    with the server ACTIVE)."""
    seen = [server]
    for _ in poll('server %s %s with no task' % (server.id, status),
                  detail=lambda: '%s, task %s' % (seen[0].status,
                                                  seen[0].task_state)):
        seen[0] = now = conn.compute.get_server(server.id)
        if now.status == status and not now.task_state:
            return now
        if now.status == 'ERROR' and status != 'ERROR':
            raise CheckFailed('server %s ERROR: %s' % (now.id, now.fault))
    raise AssertionError('unreachable: poll() raises on timeout')


def boot(conn: Any, res: Mapping[str, Any], fmt: str,
          host: str | None = None, status: str = 'ACTIVE',
          config_drive: bool = False) -> Any:
    kwargs: dict[str, Any] = {}
    if host:
        kwargs['availability_zone'] = 'nova:%s' % host
    if config_drive:
        kwargs['config_drive'] = True
    server = conn.compute.create_server(
        name='gate-check-%s' % uuid.uuid4().hex[:8],
        image_id=res['images'][fmt],
        flavor_id=res['flavors']['gate.tiny'], networks='none', **kwargs)
    return wait(conn, server, status)


@contextlib.contextmanager
def scheduled_elsewhere(conn: Any, host: str) -> Iterator[None]:
    """Within the block, the scheduler places nothing on ``host`` (its
    nova-compute disabled, as an operator steers a resize away from a
    host): a resize, which names no destination, leaves it for certain
    instead of where the weighers happen to prefer."""
    service = next(s for s in conn.compute.services(
        binary='nova-compute', host=host))
    conn.compute.disable_service(service,
                                 disabled_reason='gate: resize elsewhere')
    try:
        yield
    finally:
        conn.compute.enable_service(service)


def host_of(server: Any) -> str:
    return str(server.compute_host)


@dataclasses.dataclass(frozen=True)
class Disk:
    """A disk of a domain as QEMU is given it."""

    #: The compute whose domain it is.
    compute: Mapping[str, Any]
    #: Its ``<target dev>``: ``vda``, ``vdb``, ``sda``...
    target: str
    #: ``disk`` or ``cdrom`` (a config drive).
    device: str
    #: Its path inside the compute's namespace (``rbd:...`` in Ceph).
    path: str
    #: ``file``, ``volume`` (of a libvirt storage pool) or ``rbd``.
    kind: str
    #: The format the domain gives QEMU (``<driver type>``).
    fmt: str
    #: Whether the domain gives it read-only (``<readonly/>``).
    readonly: bool = False
    #: A volume's path as its pool gives it (``vms/<name>`` in an rbd
    #: pool): what ``virsh vol-dumpxml`` looks it up by.
    volume: str = ''

    @property
    def guest_writable(self) -> bool:
        """Whether its guest can write it: a disk, not read-only (a config
        drive is a CD-ROM)."""
        return self.device == 'disk' and not self.readonly

    @property
    def name(self) -> str:
        """Nova's name of the disk (``disk``, ``disk.eph0``, ``disk.swap``,
        ``disk.config``), whatever its storage calls it."""
        base = os.path.basename(self.path.split(':')[1] if
                                self.path.startswith('rbd:') else self.path)
        return base.split('_', 1)[1] if '_' in base else base


def domain_disks(cloud: Cloud, server: Any) -> list[Disk]:
    """Every disk of the server's domain where it runs, in the domain's
    order. The format is the one the domain gives QEMU (``<driver
    type>``): a guest's data are read in it, never in a format probed from
    the disk's bytes."""
    c = compute(cloud, host_of(server))
    virsh = [*c['nsenter'], 'virsh', '-c', c['libvirt_uri']]
    xml = ElementTree.fromstring(run_cmd([*virsh, 'dumpxml',
                                          server.instance_name]))
    found = []
    for disk in xml.findall('./devices/disk'):
        volume = ''
        device = disk.get('device', 'disk')
        target = disk.find('target')
        dev = target.get('dev', '') if target is not None else ''
        driver = disk.find('driver')
        fmt = driver.get('type', '') if driver is not None else ''
        if not fmt:
            raise CheckFailed('the %s %s of %s has no format in its domain'
                              % (device, dev, server.id))
        source = disk.find('source')
        if source is None:
            continue                    # an empty CD-ROM drive
        if disk.get('type') == 'network' and source.get('protocol') == 'rbd':
            # An RBD image (the ceph profile), as qemu-img and qemu-io
            # name it.
            path, kind = _rbd_spec(cloud, source.get('name', '')), 'rbd'
        elif disk.get('type') == 'volume':
            path = volume = run_cmd([*virsh, 'vol-path', '--pool',
                                     source.get('pool', ''),
                                     source.get('volume', '')]).strip()
            kind = 'volume'
            if not path.startswith('/'):        # a volume of an rbd pool
                path = _rbd_spec(cloud, path)
        else:
            path = source.get('file', '')
            # A volume named by its path (a live-migrated guest, until its
            # next start): libvirt knows the path as a volume of one of
            # its pools.
            by_path = subprocess.run([*virsh, 'vol-name', path],
                                     capture_output=True, text=True,
                                     check=False)
            kind = 'volume' if by_path.returncode == 0 else 'file'
            volume = path if kind == 'volume' else ''
        found.append(Disk(c, dev, device, path, kind, fmt,
                          disk.find('readonly') is not None, volume))
    return found


def disk(cloud: Cloud, server: Any,
         device: str = 'disk') -> tuple[Mapping[str, Any], str, str, str]:
    """(compute, path inside its namespace, kind, format) of the root disk
    (or of the first ``device``, ``cdrom`` for a config drive), as
    :func:`domain_disks` gives it."""
    for d in domain_disks(cloud, server):
        if d.device == device:
            return d.compute, d.path, d.kind, d.fmt
    raise CheckFailed('no %s in the domain of %s' % (device, server.id))


def record(server: Any) -> dict[str, str]:
    """The server's nova-imgtype record (its ``imgtype_*`` system
    metadata), read from the cell database: the API shows no system
    metadata."""
    url = urllib.parse.urlparse(L.db_url('nova').replace('mysql+pymysql',
                                                         'mysql'))
    conn = pymysql.connect(host=url.hostname, port=url.port,
                           user=url.username, password=url.password,
                           database=url.path.lstrip('/'))
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT `key`, `value` FROM instance_system_metadata"
                        " WHERE instance_uuid = %s AND deleted = 0 AND "
                        "`key` LIKE 'imgtype\\_%%'", (server.id,))
            return {str(k): str(v) for k, v in cur.fetchall()}
    finally:
        conn.close()


def _rbd_spec(cloud: Cloud, name: str) -> str:
    """``rbd:<pool>/<image>:conf=<ceph.conf>`` of an image of the ceph
    profile's cluster (its ceph.conf is seen from every namespace)."""
    return 'rbd:%s:conf=%s' % (name, cloud['ceph']['conf'])


def config_drive(cloud: Cloud, server: Any) -> tuple[str, str]:
    """(path, sha256) of the server's config drive where it runs, an
    ISO 9660 image."""
    c, path, _kind, _fmt = disk(cloud, server, 'cdrom')
    if path.startswith('rbd:'):
        # In Ceph: its bytes as a local file of the compute's namespace.
        local = '/tmp/gate-config-drive-%s' % server.id
        run_cmd([*c['nsenter'], 'qemu-img', 'convert', '-U', '-f', 'raw',
                 '-O', 'raw', path, local])
        try:
            return path, _iso_digest(c, server, local)
        finally:
            run_cmd([*c['nsenter'], 'rm', '-f', local])
    return path, _iso_digest(c, server, path)


def _iso_digest(c: Mapping[str, Any], server: Any, path: str) -> str:
    """sha256 of the ISO 9660 image at ``path`` of compute ``c``."""
    # The volume descriptor's identifier, at byte 32769.
    magic = run_cmd([*c['nsenter'], 'dd', 'if=%s' % path, 'bs=1',
                     'skip=32769', 'count=5', 'status=none'])
    if magic != 'CD001':
        raise CheckFailed('the config drive %s of %s is no ISO 9660 image '
                          '(%r at 32769)' % (path, server.id, magic))
    return run_cmd([*c['nsenter'], 'sha256sum', path]).split()[0]


def chain(c: Mapping[str, Any], path: str) -> list[dict[str, Any]]:
    out = run_cmd([*c['nsenter'], 'qemu-img', 'info', '-U', '--backing-chain',
                '--output=json', path])
    chain: list[dict[str, Any]] = json.loads(out)
    return chain


def mark(cloud: Cloud, conn: Any, server: Any) -> tuple[Any, bytes]:
    """Stop the server and write a new marker into its disk; (the stopped
    server, the marker)."""
    conn.compute.stop_server(server)
    server = wait(conn, server, 'SHUTOFF')
    c, path, _kind, fmt = disk(cloud, server)
    marker = MARKER + uuid.uuid4().hex[:6].encode()
    image.write_marker(path, marker, fmt=fmt, argv_prefix=c['nsenter'])
    return server, marker


def read_back(cloud: Cloud, server: Any,
              marker: bytes) -> tuple[bytes, Mapping[str, Any], str, str, str]:
    """What the server's root disk holds where :func:`mark` wrote
    ``marker``, read in the format its domain gives QEMU; (the bytes, and
    the disk as :func:`disk` gives it: compute, path, kind, format)."""
    c, path, kind, fmt = disk(cloud, server)
    got = image.read_marker(path, len(marker), fmt=fmt,
                            argv_prefix=c['nsenter'])
    return got, c, path, kind, fmt



def left_on(cloud: Cloud, host: str, server: Any) -> list[str]:
    """What of the server is still on ``host``: its instance directory (or
    the one kept for a revert) and its volumes in the dir pool's
    directory."""
    root = compute(cloud, host)['host_instances_path']
    left = [p for p in (os.path.join(root, server.id),
                        os.path.join(root, server.id + '_resize'))
            if os.path.exists(p)]
    disks = os.path.join(root, 'disks')
    if os.path.isdir(disks):
        left += [os.path.join(disks, n) for n in sorted(os.listdir(disks))
                 if n.startswith(server.id + '_')]
    return left
