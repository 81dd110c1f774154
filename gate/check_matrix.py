"""The move matrix (issue 33): every move between a compute with storage
pools and one with files, in both directions, of a raw and a qcow2 image,
with every kind of disk (root, ephemeral, swap, config drive), each leg
followed by a hard reboot and a snapshot; its guests hostile (issue 54).

Four servers travel (each image from each host); a leg marks every
writable disk anew (the server stopped, a marker written at 1 MiB in the
format the domain gives QEMU), makes one move, and checks, after the move
and again after a hard reboot:

* the server is in the state it was (``ACTIVE`` or ``SHUTOFF``) on the host
  the move names;
* each disk the move keeps reads back, **in the format the domain gives
  QEMU**, exactly what its guest wrote (header and marker); each disk the
  move makes anew does not;
* a config drive a move copies holds the same bytes; one made anew is an
  ISO 9660 image;
* each disk's format agrees everywhere: the domain, the file's own
  container (a qcow2 header the host wrote, or none), stock's
  ``disk.info`` (files) or the volume's XML (pools), and the nova-imgtype
  record (its storage, and its per-disk formats);
* nothing of the server is left on the host it left, once the move is
  confirmed (or reverted);
* no SSH session between the computes;

and after the hard reboot, a snapshot of the server (``server image
create``) whose Glance image, downloaded, holds no byte of the host file,
names no other file in the format Glance records, and holds the root
disk's data as the guest reads them. A failed snapshot fails its leg, but
leaves the server as it was: it travels on (a failed move ends its
journey), and the failure says what the services logged for its request.

**The hostile guest.** Before each move, every raw disk its guest can
write (by the format the domain gives QEMU, never a probe: root where raw,
ephemeral, swap; the config drive is a read-only CD-ROM in these domains)
gets, at offset 0 of what the guest sees, a whole qcow2 image naming
:data:`HOST_FILE` (a root-only file on each compute, repeating a secret
line) as its backing file, or as its external raw data file
(:func:`gate.image.hostile_header`); the marker then goes past it. The
guest's own data are the header and the marker: whatever takes them for
qcow2 reads the host file at the same offsets, so the host file's secret
is looked for in the first :data:`SECRET_SIZE` bytes of every disk as its
guest reads it, and in the whole snapshot. The container check then takes
a file's first bytes as the host's own header only when they are not one
the guest wrote (:func:`_container`).

Which of the two headers: the variant alternates from leg to leg, and the
two images' servers of a group start on opposite variants (the two groups
too): every leg, in each direction where its disks are raw, sees both
variants, one per image, and each server sees both along its journey, at
no cost in legs. In the gate's default cloud the raw disks are those of
the servers that start on the files host (the pools host makes qcow2
overlays, and the moves keep a disk's format): those 14 legs are hostile,
the other 14 benign.

**On Ceph** (the ceph profile, :mod:`gate.check_ceph`), the same legs
run between compute2's rbd pool and compute1's stock rbd disks and local
qcow2 overlays. A disk that is an RBD image before and after a cold
migration, a resize or an evacuation is the same image on the destination
(stock's rule for shared storage), so it keeps its data where a local disk
is made anew (:attr:`Leg.shared_keeps`); and after each leg Ceph holds
exactly the images the server's domain uses.

The servers with the same first host travel side by side (one thread
each), in step: each leg starts for both once the one before ended for
both, so that a resize keeps its source out of scheduling for both of them
and for nothing else.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable
from collections.abc import Collection
from collections.abc import Iterator
from collections.abc import Mapping
from typing import Any
from xml.etree import ElementTree

from openstack import exceptions as sdk_exceptions

from gate import check_moves
from gate import checks_base as B
from gate import image

#: Nova's names of the disks a leg writes a marker into.
WRITABLE = ('disk', 'disk.eph0', 'disk.swap')
CONFIG_DRIVE = 'disk.config'
QCOW2_MAGIC = b'QFI\xfb'
GiB = 1024 ** 3
COLUMNS = ('image', 'move', 'from', 'to', 'state', 'guest', 'root',
           'ephemeral', 'swap', 'config drive', 'record', 'snapshot',
           'left behind', 'result')
#: The formats of the disks a hostile guest writes a qcow2 header into:
#: those whose guest data are the file's (or volume's) own bytes.
HOSTILE_FORMATS = frozenset({'raw'})
#: The root-only file the hostile headers name, on every compute (its own
#: ``/var/lib/libvirt``, inside its namespace).
HOST_FILE = '/var/lib/libvirt/gate-host-secret'
#: The host file's size, and how much of each disk is read for its secret:
#: a header maps its guest's offsets to the host file's same offsets.
SECRET_SIZE = image.HOSTILE_SPAN
#: Where a leg's marker goes: past the hostile header.
MARKER_OFFSET = image.MiB


@dataclasses.dataclass(frozen=True)
class Hostile:
    """What the hostile guests of a matrix write, and what they must never
    read."""

    #: The line :data:`HOST_FILE` repeats: seen anywhere, it leaked.
    secret: bytes
    #: Per variant (:data:`gate.image.HOSTILE_VARIANTS`): the header, and
    #: a file of its bytes that every compute's namespace sees.
    headers: Mapping[str, tuple[bytes, str]]


@dataclasses.dataclass
class Traveller:
    """One server on its journey, and what its disks should hold."""

    cloud: B.Cloud
    conn: Any
    res: Mapping[str, Any]
    fmt: str
    server: Any = None
    markers: dict[str, bytes] = dataclasses.field(default_factory=dict)
    drive_digest: str = ''
    rows: list[dict[str, str]] = dataclasses.field(default_factory=list)
    #: Its guest's header and host file (None: a benign guest).
    hostile: Hostile | None = None
    #: The variant of its first leg (:func:`_variant`).
    variant_base: int = 0
    #: Legs begun.
    legs: int = 0
    #: What its guest wrote at offset 0 of each disk, this leg.
    headers: dict[str, bytes] = dataclasses.field(default_factory=dict)
    #: Its root disk as the last check read it: (first bytes, marker).
    root_seen: tuple[bytes, bytes] = (b'', b'')
    #: Whether each disk was in shared storage (Ceph) before this leg.
    shared: dict[str, bool] = dataclasses.field(default_factory=dict)

    @property
    def host(self) -> str:
        return B.host_of(self.server)

    def refresh(self, status: str) -> None:
        self.server = B.wait(self.conn, self.server, status)


@dataclasses.dataclass(frozen=True)
class Leg:
    """One move: how it is made, and what it keeps."""

    name: str
    #: The server's state before the move (and after it).
    status: str
    #: The disks whose data it keeps (the others are made anew)...
    keeps: frozenset[str]
    #: Whether the config drive keeps its bytes.
    keeps_drive: bool
    #: Whether it goes to the other host (a rebuild stays)...
    goes: bool
    #: ...and whether it comes back (a reverted resize).
    returns: bool
    #: Makes the move of a server to a host.
    make: Callable[[Traveller, str], None]
    #: Whether the source is kept out of scheduling while it is made (a
    #: resize names no destination).
    steered: bool = False
    #: Whether a hostile guest writes its header into a raw root disk. Not
    #: before a shelve (the guest wipes the one it wrote before): its root
    #: travels as a snapshot that a host with
    #: force_raw_images converts back to raw, and Nova's own check then
    #: refuses the unshelve ("Converted to raw, but format is now qcow2"),
    #: as stock's does: the refusal is safe, the leg would end there.
    hostile_root: bool = True
    #: ...and those it keeps of a disk in shared storage (Ceph) before and
    #: after: the destination uses the same RBD image (stock's rule).
    shared_keeps: frozenset[str] = frozenset()

    def kept(self, name: str, shared_before: bool, shared_now: bool
             ) -> bool:
        """Whether the disk ``name`` keeps its data through the move."""
        return name in self.keeps or (
            shared_before and shared_now and name in self.shared_keeps)

    def ends(self, here: str, there: str) -> str:
        """Where a server that leaves ``here`` for ``there`` ends."""
        return here if self.returns or not self.goes else there


# -- the moves ---------------------------------------------------------------

def _confirm(t: Traveller, status: str) -> None:
    t.refresh('VERIFY_RESIZE')
    t.conn.compute.confirm_server_resize(t.server)
    t.refresh(status)


def _live(t: Traveller, to: str) -> None:
    t.conn.compute.live_migrate_server(t.server, host=to,
                                       block_migration='auto')
    for _ in B.poll('live migration of %s to %s' % (t.server.id, to)):
        t.refresh('ACTIVE')
        if t.host == to:
            return
        last = check_moves._last_migration(t.conn, t.server,
                                           'live-migration')
        if last and last['status'] in ('error', 'failed'):
            raise B.CheckFailed('live migration %s' % last['status'])


def _cold(t: Traveller, to: str) -> None:
    # Two computes: a cold migration can only go to the other one.
    t.conn.compute.migrate_server(t.server)
    _confirm(t, 'SHUTOFF')


def _resize(t: Traveller, to: str, revert: bool) -> None:
    # Its source is out of scheduling meanwhile (Leg.steered).
    t.conn.compute.resize_server(t.server,
                                 t.res['flavors']['gate.disks.big'])
    t.refresh('VERIFY_RESIZE')
    if t.host != to:
        raise B.CheckFailed('resized onto %s, not %s' % (t.host, to))
    if revert:
        t.conn.compute.revert_server_resize(t.server)
        t.refresh('ACTIVE')
    else:
        t.conn.compute.confirm_server_resize(t.server)
        t.refresh('SHUTOFF')


def _resize_up(t: Traveller, to: str) -> None:
    _resize(t, to, revert=False)


def _resize_revert(t: Traveller, to: str) -> None:
    _resize(t, to, revert=True)


def _shelve_unshelve(t: Traveller, to: str) -> None:
    t.conn.compute.shelve_server(t.server)
    # Offloaded at once (shelved_offload_time 0); stock saves the state
    # before it lets go of the host: wait for both.
    for _ in B.poll('%s shelved and offloaded' % t.server.id):
        t.server = t.conn.compute.get_server(t.server.id)
        if (t.server.status == 'SHELVED_OFFLOADED' and
                not t.server.task_state and not t.server.compute_host):
            break
    r = t.conn.compute.post('/servers/%s/action' % t.server.id,
                            json={'unshelve': {'host': to}},
                            microversion='2.91')
    if r.status_code >= 400:
        raise B.CheckFailed('unshelve to %s: %s %s' % (to, r.status_code,
                                                       r.text))
    t.refresh('ACTIVE')


def _rebuild(t: Traveller, to: str) -> None:
    t.conn.compute.rebuild_server(t.server, image=t.res['images'][t.fmt])
    t.refresh('SHUTOFF')


ALL = frozenset(WRITABLE)
#: A cold move copies the root and ephemeral disks; the swap disk is made
#: anew on the destination (stock's rule).
COPIED = frozenset({'disk', 'disk.eph0'})
#: In the order a server travels them: each leg leaves from where the one
#: before ended. The evacuation, last, is made for every server on a host
#: at once (its nova-compute stopped once): see :func:`_evacuate_all`.
LEGS = (
    Leg('live migration', 'ACTIVE', ALL, True, True, False, _live),
    Leg('cold migration', 'SHUTOFF', COPIED, True, True, False, _cold,
        shared_keeps=ALL),
    Leg('resize up, reverted', 'ACTIVE', ALL, True, True, True,
        _resize_revert, steered=True),
    Leg('resize up', 'SHUTOFF', COPIED, True, True, False, _resize_up,
        steered=True, shared_keeps=ALL),
    # The root disk travels as a snapshot in Glance; ephemeral and swap
    # disks are made anew (stock's rule), and so is the config drive.
    Leg('shelve, unshelve', 'ACTIVE', frozenset({'disk'}), False, True,
        False, _shelve_unshelve, hostile_root=False),
    Leg('rebuild', 'SHUTOFF', frozenset(), False, False, False, _rebuild),
)
#: Local disks are made anew from the image; one in Ceph is kept.
EVACUATE = Leg('evacuate', 'ACTIVE', frozenset(), False, True, False,
               lambda t, to: None, shared_keeps=ALL)


# -- the hostile guest --------------------------------------------------------

@contextlib.contextmanager
def _hostile(cloud: B.Cloud) -> Iterator[Hostile]:
    """:data:`HOST_FILE` (0600) on every compute, and both headers naming
    it, in a directory of the cloud's that every namespace sees; all of it
    removed afterwards."""
    work = tempfile.mkdtemp(prefix='matrix-hostile-', dir=cloud['base'])
    try:
        secret = b'nova-imgtype gate: root-only host file %s\n' % (
            uuid.uuid4().hex.encode())
        source = os.path.join(work, 'host-file')
        fd = os.open(source, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, 'wb') as f:
            f.write((secret * (SECRET_SIZE // len(secret) + 1))[
                :SECRET_SIZE])
        for c in cloud['computes']:
            B.run_cmd([*c['nsenter'], 'install', '-m', '0600', source,
                       HOST_FILE])
        os.unlink(source)
        headers = {}
        for variant in image.HOSTILE_VARIANTS:
            data = image.hostile_header(HOST_FILE, variant)
            path = os.path.join(work, variant.replace(' ', '-') + '.qcow2')
            with open(path, 'wb') as f:
                f.write(data)
            headers[variant] = (data, path)
        yield Hostile(secret, headers)
    finally:
        for c in cloud['computes']:
            subprocess.run([*c['nsenter'], 'rm', '-f', HOST_FILE],
                           capture_output=True, check=False)
        shutil.rmtree(work, ignore_errors=True)


def _variant(t: Traveller) -> str:
    """The header its guest writes this leg: the variants alternate from
    leg to leg, from :attr:`Traveller.variant_base`."""
    variants = image.HOSTILE_VARIANTS
    return variants[(t.variant_base + t.legs - 1) % len(variants)]


# -- what a leg checks -------------------------------------------------------

def _mark(t: Traveller, status: str, row: dict[str, str],
          hostile_root: bool = True) -> None:
    """New markers in every writable disk (a hostile guest's header first
    in each raw one, the root only with ``hostile_root``), the server then
    ``status``."""
    if t.server.status != 'SHUTOFF':
        t.conn.compute.stop_server(t.server)
        t.refresh('SHUTOFF')
    t.markers, t.headers, t.shared = {}, {}, {}
    variant = _variant(t)
    for d in B.domain_disks(t.cloud, t.server):
        t.shared[d.name] = _in_ceph(d)
        if d.name == CONFIG_DRIVE and d.guest_writable:
            raise B.CheckFailed('the config drive %s is a disk its guest '
                                'can write: the matrix checks a read-only '
                                'CD-ROM' % d.path)
        if d.name not in WRITABLE:
            continue
        prefix = d.compute['nsenter']
        if (t.hostile is not None and d.fmt in HOSTILE_FORMATS and
                d.guest_writable):
            if hostile_root or d.name != 'disk':
                data, source = t.hostile.headers[variant]
                image.write_file(d.path, source, fmt=d.fmt,
                                 argv_prefix=prefix)
                t.headers[d.name] = data
            else:
                # The header an earlier leg's guest wrote, wiped.
                image.zero_span(d.path, SECRET_SIZE, fmt=d.fmt,
                                argv_prefix=prefix)
        marker = B.MARKER + d.name.encode() + uuid.uuid4().hex[:6].encode()
        image.write_marker(d.path, marker, fmt=d.fmt, argv_prefix=prefix,
                           offset=MARKER_OFFSET)
        t.markers[d.name] = marker
    missing = set(WRITABLE) - set(t.markers)
    if missing:
        raise B.CheckFailed('no %s in the domain' % ', '.join(sorted(missing)))
    row['guest'] = ('%s header in %s' % (variant, ', '.join(
        n for n in WRITABLE if n in t.headers)) if t.headers
        else 'benign (no raw disk)')
    t.drive_digest = B.config_drive(t.cloud, t.server)[1]
    if status == 'ACTIVE':
        t.conn.compute.start_server(t.server)
        t.refresh('ACTIVE')


def _in_ceph(d: B.Disk) -> bool:
    """Whether the disk is an RBD image (stock's rbd disk or a volume of
    an rbd pool): storage every compute of the ceph profile shares."""
    return d.path.startswith('rbd:')


def _guest_view(t: Traveller, d: B.Disk, where: str) -> bytes:
    """The disk's first :data:`SECRET_SIZE` bytes as its guest reads them
    (the format the domain gives QEMU, following whatever that format
    names), which must hold nothing of the host file."""
    view = image.read_span(d.path, SECRET_SIZE, fmt=d.fmt,
                           argv_prefix=d.compute['nsenter'])
    if t.hostile is not None and t.hostile.secret in view:
        raise B.CheckFailed('%s: the guest reads the host file %s through '
                            'its %s %s (%s)' % (where, HOST_FILE, d.kind,
                                                d.path, d.fmt))
    return view


def _container(d: B.Disk, guest_headers: Collection[bytes] = ()) -> str:
    """The container format of the file (or volume) itself, from its first
    bytes read as they are (:func:`_first_bytes`, :func:`_container_of`).
    """
    return _container_of(_first_bytes(d, guest_headers), guest_headers)


def _first_bytes(d: B.Disk, guest_headers: Collection[bytes]) -> bytes:
    """The file's own first bytes, as many as the longest of
    ``guest_headers`` (qcow2's magic at least)."""
    length = max([len(h) for h in guest_headers] + [len(QCOW2_MAGIC)])
    return image.read_span(d.path, length, fmt='raw',
                           argv_prefix=d.compute['nsenter'])


def _rewritten(first: bytes, header: bytes) -> str:
    """What changed in the guest's ``header`` (written at the file's offset
    0) when the file no longer starts with it: whoever took it for a qcow2
    image wrote into it."""
    if not header or first[:len(header)] == header:
        return ''
    changed = [i for i, (a, b) in enumerate(zip(first, header,
                                                 strict=False)) if a != b]
    return ('; its first bytes are the qcow2 header its guest wrote, '
            'changed at %d byte(s) from offset %d to %d' % (
                len(changed), changed[0], changed[-1])
            if changed and first.startswith(QCOW2_MAGIC) else '')


def _container_of(first: bytes, guest_headers: Collection[bytes]) -> str:
    """The container format a file's ``first`` bytes show: a qcow2 file
    starts with the header its host wrote. A raw file starts with its
    guest's bytes, and a guest writes qcow2 headers too: first bytes that
    are one of ``guest_headers`` (the hostile guest's, each naming a host
    file, which no host writes) are its guest's data, so the file is raw;
    only other bytes are read for qcow2's magic (no ``guest_headers``: what
    a probe of the file sees)."""
    if any(first[:len(h)] == h for h in guest_headers):
        return 'raw'
    return 'qcow2' if first.startswith(QCOW2_MAGIC) else 'raw'


def _virtual_size(d: B.Disk) -> int:
    """The disk's size as its guest sees it (read in the domain's
    format)."""
    out = B.run_cmd([*d.compute['nsenter'], 'qemu-img', 'info', '-U', '-f',
                     d.fmt, '--output=json', d.path])
    return int(json.loads(out)['virtual-size'])


def _stored_format(d: B.Disk, server: Any) -> tuple[str, str]:
    """(where, format) of the disk as its storage records it: the volume's
    XML in a pool, stock's ``disk.info`` for a file it lists."""
    c = d.compute
    if d.kind == 'volume':
        xml = B.run_cmd([*c['nsenter'], 'virsh', '-c', c['libvirt_uri'],
                         'vol-dumpxml', d.volume or d.path])
        fmt = ElementTree.fromstring(xml).find('./target/format')
        return 'volume XML', fmt.get('type', '') if fmt is not None else ''
    info = os.path.join(c['host_instances_path'], server.id, 'disk.info')
    if os.path.exists(info):
        with open(info) as f:
            listed = json.load(f)
        if d.path in listed:
            return 'disk.info', str(listed[d.path])
    return '', ''


def _storage_agrees(d: B.Disk, record: Mapping[str, str]) -> bool:
    """Whether the record's storage is where the disk is: a volume of a
    pool ('pools'), a file of stock's ('legacy'); an RBD image either (in
    Ceph every host reaches the same pool, and the record says which: a
    'pools' record names that Ceph pool in its location)."""
    storage = record.get('imgtype_storage', '')
    if _in_ceph(d) and storage == 'pools':
        ceph_pool = d.path[len('rbd:'):].split('/', 1)[0]
        return record.get('imgtype_pool_location', '').startswith(
            'rbd:%s@' % ceph_pool)
    return storage == ('pools' if d.kind == 'volume' else 'legacy')


def _recorded_formats(record: Mapping[str, str]) -> dict[str, str]:
    pairs = record.get('imgtype_disk_formats', '')
    return dict(p.split('=', 1) for p in pairs.split(',') if '=' in p)


def _check(t: Traveller, leg: Leg, status: str, host: str, when: str,
           row: dict[str, str]) -> None:
    """The server's disks as the leg should leave them; the table's cells
    filled in (``when``: after the move, or the hard reboot)."""
    where = '%s, after the %s' % (leg.name, when)
    t.refresh(status)
    if t.host != host:
        raise B.CheckFailed('%s: on %s, not %s' % (where, t.host, host))
    disks = {d.name: d for d in B.domain_disks(t.cloud, t.server)}
    record = B.record(t.server)
    recorded = _recorded_formats(record)
    storage = record.get('imgtype_storage', '')
    # Whichever leg wrote them: a header the guest wrote is its data.
    guest = ([h for h, _ in t.hostile.headers.values()]
             if t.hostile is not None else [])
    for name, column in zip(WRITABLE + (CONFIG_DRIVE,),
                            ('root', 'ephemeral', 'swap', 'config drive'),
                            strict=True):
        d = disks.get(name)
        if d is None:
            raise B.CheckFailed('%s: no %s in the domain' % (where, name))
        view = _guest_view(t, d, where)
        stored_in, stored = _stored_format(d, t.server)
        first = _first_bytes(d, guest)
        formats = {'domain': d.fmt, 'container': _container_of(first, guest)}
        probed = ''
        if stored_in:
            # libvirt's dir pool calls an ISO 9660 file (a config drive)
            # "iso": raw bytes to QEMU.
            stored = 'raw' if stored == 'iso' else stored
            if (stored_in == 'volume XML' and d.path.startswith('/') and
                    formats['container'] != _container_of(first, ())):
                # A dir pool's volume format is libvirt's probe of the
                # file, here of its guest's header: shown, not judged.
                probed = stored
            else:
                formats[stored_in] = stored
        if name in recorded:
            formats['record'] = recorded[name]
        if len(set(formats.values())) != 1:
            raise B.CheckFailed('%s: the formats of %s %s disagree: %s%s' % (
                where, d.kind, d.path, formats,
                _rewritten(first, t.headers.get(name, b''))))
        if name == 'disk' and not _storage_agrees(d, record):
            raise B.CheckFailed('%s: recorded %r (%s), its root disk is a %s'
                                ' %s' % (where, storage, record.get(
                                    'imgtype_pool_location', ''), d.kind,
                                    d.path))
        if name in ('disk', 'disk.eph0'):
            want = int(getattr(t.server.flavor,
                               'disk' if name == 'disk' else 'ephemeral'))
            got_size = _virtual_size(d)
            if got_size != want * GiB:
                raise B.CheckFailed('%s: the %s %s is %d bytes, its flavor '
                                    'says %d GiB' % (where, d.kind, d.path,
                                                     got_size, want))
        if name == CONFIG_DRIVE:
            _path, digest = B.config_drive(t.cloud, t.server)
            if leg.keeps_drive and digest != t.drive_digest:
                raise B.CheckFailed('%s: the config drive %s changed' % (
                    where, d.path))
            state = 'same' if digest == t.drive_digest else 'new'
        else:
            marker = t.markers[name]
            got = image.read_marker(d.path, len(marker), fmt=d.fmt,
                                    argv_prefix=d.compute['nsenter'],
                                    offset=MARKER_OFFSET)
            header = t.headers.get(name, b'')
            keeps = leg.kept(name, t.shared.get(name, False), _in_ceph(d))
            if keeps and got != marker:
                raise B.CheckFailed('%s: the %s %s (%s) reads %r, not %r' % (
                    where, d.kind, d.path, d.fmt, got, marker))
            if keeps and not view.startswith(header):
                raise B.CheckFailed('%s: the %s %s (%s) does not start with '
                                    'the %s header its guest wrote' % (
                                        where, d.kind, d.path, d.fmt,
                                        _variant(t)))
            if not keeps and got == marker:
                raise B.CheckFailed('%s: the %s %s kept the data of the '
                                    'disk it replaces' % (where, d.kind,
                                                          d.path))
            state = 'kept' if got == marker else 'new'
            if name == 'disk':
                t.root_seen = (view, got)
        row[column] = '%s %s %s%s' % (state, d.fmt, d.kind, (
            ' (the pool probes %s)' % probed) if probed else '')
    row['record'] = storage + (' ' + ','.join(
        '%s=%s' % kv for kv in sorted(recorded.items())) if recorded else '')


def _kind(t: Traveller, host: str) -> str:
    """``compute1 (pools)``: a host and its kind."""
    pools = B.compute(t.cloud, host).get('use_storage_pools')
    return '%s (%s)' % (host, 'pools' if pools else 'files')


def _row(t: Traveller, leg: Leg, source: str, to: str) -> dict[str, str]:
    row = {'image': t.fmt, 'move': leg.name, 'from': _kind(t, source),
           'to': _kind(t, to),
           'state': leg.status, 'left behind': '', 'result': 'FAIL'}
    t.rows.append(row)
    t.legs += 1
    return row


def _left(t: Traveller, leg: Leg, host: str, row: dict[str, str]) -> None:
    left = B.left_on(t.cloud, host, t.server)
    if t.cloud.get('ceph'):
        # Ceph holds exactly the images the domain uses where it runs.
        from gate import check_ceph
        held = set(check_ceph.rbd_images(t.cloud, t.server))
        left += sorted(held - set(check_ceph.used_rbd_images(t.cloud,
                                                             t.server)))
    row['left behind'] = ', '.join(left) or 'nothing'
    if left:
        raise B.CheckFailed('after the %s, left on %s: %s' % (
            leg.name, host, ', '.join(left)))


def _rebooted(t: Traveller, leg: Leg, row: dict[str, str]) -> None:
    host = t.host
    t.conn.compute.reboot_server(t.server, 'HARD')
    _check(t, leg, 'ACTIVE', host, 'hard reboot', row)
    row['state'] += ', hard reboot'
    try:
        _snapshot(t, leg, row)
    except B.CheckFailed as e:
        # The server is as it was: the leg failed, the journey goes on
        # (the legs after it are evidence too).
        row['snapshot'] = 'FAIL'
        row['result'] = 'FAIL: %s' % e
        t.refresh('ACTIVE')
        return
    row['result'] = 'pass'


def _snapshot(t: Traveller, leg: Leg, row: dict[str, str]) -> None:
    """A snapshot of the server (running), its Glance image downloaded and
    judged (:func:`_judge_snapshot`), then deleted."""
    where = '%s, the snapshot' % leg.name
    name = 'gate-matrix-%s' % uuid.uuid4().hex[:8]
    # The API's request id, which Nova gives Glance: the logs' lines about
    # this snapshot.
    r = t.conn.compute.post('/servers/%s/action' % t.server.id,
                            json={'createImage': {'name': name}},
                            microversion='2.45')
    if r.status_code >= 400:
        raise B.CheckFailed('%s: %s %s' % (where, r.status_code, r.text))
    image_id = r.json()['image_id']
    request = r.headers.get('x-openstack-request-id', '')
    path = os.path.join(t.cloud['base'], name)
    try:
        try:
            img = _image_active(t.conn, image_id, where,
                                lambda: _logged(t.cloud, request))
        except B.CheckFailed as e:
            if not _glance_refused_guest_header(t, str(e)):
                raise
            t.refresh('ACTIVE')
            row['snapshot'] = ('refused by Glance (its raw root starts with '
                               'its guest\'s qcow2 header)')
            return
        t.refresh('ACTIVE')
        t.conn.image.download_image(img, output=path)
        row['snapshot'] = _judge_snapshot(
            path, img.disk_format, t.hostile.secret if t.hostile else b'',
            t.root_seen, where)
    finally:
        t.conn.image.delete_image(image_id, ignore_missing=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


#: What Glance logs when its format inspector refuses an image's data.
GLANCE_SAFETY = 'Safety checks failed'


def _glance_refused_guest_header(t: Traveller, failure: str) -> bool:
    """Whether a snapshot failed as it must: Glance's own safety check
    refused a raw root whose data (as its guest reads them) start with a
    qcow2 header its hostile guest wrote. Stock's snapshot is refused the
    same way; in Ceph a root disk's snapshot is raw (stock's direct
    snapshot), where files hosts set ``snapshot_image_format``."""
    if t.hostile is None or GLANCE_SAFETY not in failure:
        return False
    first = t.root_seen[0]
    return any(first.startswith(h) for h, _ in t.hostile.headers.values())


def _image_active(conn: Any, image_id: str, where: str,
                  why: Callable[[], str]) -> Any:
    """The image once active; one that is not, said with ``why``."""
    seen = ['']
    for _ in B.poll('%s: image %s active' % (where, image_id),
                    detail=lambda: '%s; %s' % (seen[0], why())):
        try:
            img = conn.image.get_image(image_id)
        except sdk_exceptions.NotFoundException:
            raise B.CheckFailed('%s: image %s deleted before it was active'
                                ' (%s)' % (where, image_id, why())) from None
        seen[0] = str(img.status)
        if img.status == 'active':
            return img
        if img.status in ('killed', 'deleted', 'deactivated'):
            raise B.CheckFailed('%s: image %s %s (%s)' % (
                where, image_id, img.status, why()))
    raise AssertionError('unreachable: poll() raises on timeout')


#: Log lines of a request worth saying when it failed.
_LOUD = (' ERROR ', ' WARNING ')
#: ...but for these, which every request logs.
_NOISE = ('neutronclient', 'thread_pool_factory', 'Unable to create trust')


def _logged(cloud: B.Cloud, request: str, most: int = 3) -> str:
    """The last warnings and errors the cloud's services logged for the API
    request ``request`` (its id follows it from nova-api to the compute and
    Glance), without their prefixes."""
    said: list[str] = []
    logs = cloud.get('logs', '')
    if not request or not logs or not os.path.isdir(logs):
        return 'no log'
    for name in sorted(os.listdir(logs)):
        with open(os.path.join(logs, name), errors='replace') as f:
            for line in f:
                if (request in line and any(w in line for w in _LOUD) and
                        not any(n in line for n in _NOISE)):
                    text = line.split('] ', 1)[-1].strip()
                    said.append('%s: %s' % (name[:-len('.log')]
                                            if name.endswith('.log')
                                            else name, text[:300]))
    return '; '.join(said[-most:]) or 'nothing logged'


def _judge_snapshot(path: str, disk_format: str, secret: bytes,
                    root_seen: tuple[bytes, bytes], where: str) -> str:
    """A snapshot's downloaded image: no byte of the host file in it
    (``secret``, looked for in every byte), no other file named by it in
    the format Glance records (its backing or data file: the host file
    copied by reference), and the root disk's data as its guest read them
    (``root_seen``: its first bytes and its marker), read in that format;
    the table's cell."""
    if secret and _file_holds(path, secret):
        raise B.CheckFailed('%s (%s) holds the host file %s' % (
            where, disk_format, HOST_FILE))
    info = json.loads(B.run_cmd(['qemu-img', 'info', '-f', disk_format,
                                 '--output=json', path]))
    named = info.get('backing-filename') or info.get(
        'format-specific', {}).get('data', {}).get('data-file')
    if named:
        raise B.CheckFailed('%s (%s) names %s' % (where, disk_format, named))
    first, marker = root_seen
    if first:
        got = image.read_span(path, len(first), fmt=disk_format)
        if got != first:
            raise B.CheckFailed('%s (%s) does not start with what the guest '
                                'reads of its root disk' % (where,
                                                            disk_format))
    if marker:
        got = image.read_span(path, len(marker), fmt=disk_format,
                              offset=MARKER_OFFSET)
        if got != marker:
            raise B.CheckFailed('%s (%s) reads %r at %d, the root disk %r' % (
                where, disk_format, got, MARKER_OFFSET, marker))
    return 'clean %s, %.1f MB' % (disk_format,
                                  os.path.getsize(path) / 1e6)


def _file_holds(path: str, needle: bytes, chunk: int = 4 * 1024 * 1024
                ) -> bool:
    """Whether ``needle`` is anywhere in the file (read in chunks that
    overlap by its length)."""
    keep = len(needle) - 1
    tail = b''
    with open(path, 'rb') as f:
        while block := f.read(chunk):
            seen = tail + block
            if needle in seen:
                return True
            tail = seen[-keep:] if keep else b''
    return False


def _travel(t: Traveller, leg: Leg, here: str, there: str) -> str:
    """One leg from ``here``: mark, move, check, hard reboot, check
    again; where the server ends."""
    to = there if leg.goes else here
    ends = leg.ends(here, there)
    row = _row(t, leg, here, to)
    _mark(t, leg.status, row, leg.hostile_root)
    leg.make(t, to)
    _check(t, leg, leg.status, ends, 'move', row)
    if leg.goes:
        _left(t, leg, there if leg.returns else here, row)
    _rebooted(t, leg, row)
    return ends


def _journey(travellers: list[Traveller], first: str,
             other: str) -> list[Traveller]:
    """Every leg but the evacuation, from ``first``, each coming back from
    where the one before went; the travellers side by side, one thread
    each, in step: a leg starts for all of them once the one before ended
    for all, so that a resize's source is out of scheduling for the whole
    leg of every one of them and for nothing else. A traveller whose leg
    failed goes no further; those that went through every leg."""
    here, going = first, list(travellers)
    with concurrent.futures.ThreadPoolExecutor(len(going)) as pool:
        for leg in LEGS:
            there = other if here == first else first
            steer = (B.scheduled_elsewhere(going[0].conn, here)
                     if leg.steered else contextlib.nullcontext())
            with steer:
                went = [f.result() for f in [
                    pool.submit(_safely, t, _travel, t, leg, here, there)
                    for t in going]]
            going = [t for t, ok in zip(going, went, strict=True) if ok]
            if not going:
                break
            here = leg.ends(here, there)
    return going


def _evacuate_all(travellers: list[Traveller], source: str,
                  dest: str) -> None:
    """The travellers (all on ``source``, running, new markers) evacuated
    to ``dest`` at once, their source brought back; each checked."""
    from gate import evacuation
    rows = [_row(t, EVACUATE, source, dest) for t in travellers]
    for t, row in zip(travellers, rows, strict=True):
        _mark(t, EVACUATE.status, row)
    t0 = travellers[0]
    moved = evacuation.evacuate(t0.cloud, t0.conn,
                                [t.server for t in travellers], source)
    failed = []
    for t, server, row in zip(travellers, moved, rows, strict=True):
        try:
            if server is None:
                raise B.CheckFailed('the evacuation from %s failed' % source)
            t.server = server
            _check(t, EVACUATE, EVACUATE.status, dest, 'move', row)
            _left(t, EVACUATE, source, row)
            _rebooted(t, EVACUATE, row)
        except Exception as e:  # noqa: BLE001 - the leg's result
            row['result'] = 'FAIL: %s' % e
            failed.append(str(e))
    if failed:
        raise B.CheckFailed('; '.join(failed))


def _group(cloud: B.Cloud, res: Mapping[str, Any], first: str,
           other: str, hostile: Hostile | None = None,
           group: int = 0) -> list[Traveller]:
    """A raw and a qcow2 server from ``first``, side by side through every
    leg, then evacuated together; the travellers (their rows filled). Each
    starts on the variant after the other's (:func:`_variant`), and so
    does each ``group`` after the one before."""
    from gate import tempest
    travellers = [Traveller(cloud, tempest.connect(cloud), res, fmt,
                            hostile=hostile, variant_base=i + group)
                  for i, fmt in enumerate(('raw', 'qcow2'))]
    for t in travellers:
        t.server = t.conn.compute.create_server(
            name='gate-matrix-%s-%s' % (t.fmt, first),
            image_id=res['images'][t.fmt],
            flavor_id=res['flavors']['gate.disks'], networks='none',
            availability_zone='nova:%s' % first, config_drive=True)
    try:
        for t in travellers:
            t.refresh('ACTIVE')
        ready = _journey(travellers, first, other)
        if ready:
            try:
                _evacuate_all(ready, first, other)
            except B.CheckFailed:
                pass                    # in the rows
    finally:
        for t in travellers:
            t.conn.compute.delete_server(t.server)
    return travellers


def _safely(t: Traveller, travel: Callable[..., Any], *args: Any) -> bool:
    """Whether ``travel`` went through; a failure said in the row of the
    leg it stopped at."""
    try:
        travel(*args)
        return True
    except Exception as e:  # noqa: BLE001 - the leg's result
        if t.rows and t.rows[-1]['result'] != 'pass':
            t.rows[-1]['result'] = 'FAIL: %s' % e
        else:
            t.rows.append({'image': t.fmt, 'result': 'FAIL: %s' % e})
        return False


def _hostile_legs(rows: list[dict[str, str]]) -> str:
    """``hostile guests in 14 legs (7 backing file, 7 data file)``."""
    counts = {v: sum(1 for r in rows if r.get('guest', '').startswith(v))
              for v in image.HOSTILE_VARIANTS}
    return 'hostile guests in %d legs (%s)' % (sum(counts.values()), ', '.join(
        '%d %s' % (n, v) for v, n in counts.items()))


def check_move_matrix(cloud: B.Cloud, conn: Any,
                      res: Mapping[str, Any]) -> B.Report:
    pools_host, files_host = B.hosts(cloud)
    logins = check_moves._ssh_sessions(cloud)
    rows = []
    with _hostile(cloud) as hostile:
        for group, (first, other) in enumerate(((pools_host, files_host),
                                                (files_host, pools_host))):
            for t in _group(cloud, res, first, other, hostile, group):
                rows += t.rows
    failed = [r for r in rows if r['result'] != 'pass']
    ssh = check_moves._ssh_sessions(cloud) - logins
    summary = ('%d legs (%d failed), each move then a hard reboot and a '
               'snapshot; %s; %s' % (
                   len(rows), len(failed), _hostile_legs(rows),
                   'no SSH' if not ssh else '%d SSH session(s)' % ssh))
    report = B.Report(summary, COLUMNS,
                      [tuple(r.get(c, '') for c in COLUMNS) for r in rows])
    if failed or ssh:
        raise B.CheckFailed(summary + ': ' + '; '.join(
            '%s %s %s->%s: %s' % (r.get('image'), r.get('move'),
                                  r.get('from'), r.get('to'), r['result'])
            for r in failed), report)
    return report
