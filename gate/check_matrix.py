"""The move matrix (issue 33): every move between a compute with storage
pools and one with files, in both directions, of a raw and a qcow2 image,
with every kind of disk (root, ephemeral, swap, config drive), each leg
followed by a hard reboot.

Four servers travel (each image from each host); a leg marks every
writable disk anew (the server stopped, a marker written in the format the
domain gives QEMU), makes one move, and checks, after the move and again
after a hard reboot:

* the server is in the state it was (``ACTIVE`` or ``SHUTOFF``) on the host
  the move names;
* each disk the move keeps reads its marker back **in the format the
  domain gives QEMU**; each disk the move makes anew does not;
* a config drive a move copies holds the same bytes; one made anew is an
  ISO 9660 image;
* each disk's format agrees everywhere: the domain, the file's own header
  (a qcow2 container or not), stock's ``disk.info`` (files) or the
  volume's XML (pools), and the nova-imgtype record (its storage, and its
  per-disk formats);
* nothing of the server is left on the host it left, once the move is
  confirmed (or reverted);
* no SSH session between the computes.

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
import uuid
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any
from xml.etree import ElementTree

from gate import check_moves
from gate import checks_base as B
from gate import image

#: Nova's names of the disks a leg writes a marker into.
WRITABLE = ('disk', 'disk.eph0', 'disk.swap')
CONFIG_DRIVE = 'disk.config'
QCOW2_MAGIC = '514649fb'                # "QFI\xfb"
GiB = 1024 ** 3
COLUMNS = ('image', 'move', 'from', 'to', 'state', 'root', 'ephemeral',
           'swap', 'config drive', 'record', 'left behind', 'result')


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
    #: The disks whose data it keeps (the others are made anew).
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
    Leg('cold migration', 'SHUTOFF', COPIED, True, True, False, _cold),
    Leg('resize up, reverted', 'ACTIVE', ALL, True, True, True,
        _resize_revert, steered=True),
    Leg('resize up', 'SHUTOFF', COPIED, True, True, False, _resize_up,
        steered=True),
    # The root disk travels as a snapshot in Glance; ephemeral and swap
    # disks are made anew (stock's rule), and so is the config drive.
    Leg('shelve, unshelve', 'ACTIVE', frozenset({'disk'}), False, True,
        False, _shelve_unshelve),
    Leg('rebuild', 'SHUTOFF', frozenset(), False, False, False, _rebuild),
)
#: No shared storage: every disk is made anew from the image.
EVACUATE = Leg('evacuate', 'ACTIVE', frozenset(), False, True, False,
               lambda t, to: None)


# -- what a leg checks -------------------------------------------------------

def _mark(t: Traveller, status: str) -> None:
    """New markers in every writable disk, the server then ``status``."""
    if t.server.status != 'SHUTOFF':
        t.conn.compute.stop_server(t.server)
        t.refresh('SHUTOFF')
    t.markers = {}
    for d in B.domain_disks(t.cloud, t.server):
        if d.name in WRITABLE:
            marker = B.MARKER + d.name.encode() + uuid.uuid4().hex[:6].encode()
            image.write_marker(d.path, marker, fmt=d.fmt,
                               argv_prefix=d.compute['nsenter'])
            t.markers[d.name] = marker
    missing = set(WRITABLE) - set(t.markers)
    if missing:
        raise B.CheckFailed('no %s in the domain' % ', '.join(sorted(missing)))
    t.drive_digest = B.config_drive(t.cloud, t.server)[1]
    if status == 'ACTIVE':
        t.conn.compute.start_server(t.server)
        t.refresh('ACTIVE')


def _header(d: B.Disk) -> str:
    """The container format of the file (or volume) itself: qcow2 when it
    starts with qcow2's magic. Only the host's view of its own container:
    a guest writes inside it, never its header."""
    magic = B.run_cmd([*d.compute['nsenter'], 'od', '-An', '-tx1', '-N4',
                       d.path]).replace(' ', '').strip()
    return 'qcow2' if magic == QCOW2_MAGIC else 'raw'


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
                         'vol-dumpxml', d.path])
        fmt = ElementTree.fromstring(xml).find('./target/format')
        return 'volume XML', fmt.get('type', '') if fmt is not None else ''
    info = os.path.join(c['host_instances_path'], server.id, 'disk.info')
    if os.path.exists(info):
        with open(info) as f:
            listed = json.load(f)
        if d.path in listed:
            return 'disk.info', str(listed[d.path])
    return '', ''


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
    for name, column in zip(WRITABLE + (CONFIG_DRIVE,),
                            ('root', 'ephemeral', 'swap', 'config drive'),
                            strict=True):
        d = disks.get(name)
        if d is None:
            raise B.CheckFailed('%s: no %s in the domain' % (where, name))
        header = _header(d)
        stored_in, stored = _stored_format(d, t.server)
        formats = {'domain': d.fmt, 'header': header}
        if stored_in:
            # libvirt's dir pool calls an ISO 9660 file (a config drive)
            # "iso": raw bytes to QEMU.
            formats[stored_in] = 'raw' if stored == 'iso' else stored
        if name in recorded:
            formats['record'] = recorded[name]
        if len(set(formats.values())) != 1:
            raise B.CheckFailed('%s: the formats of %s %s disagree: %s' % (
                where, d.kind, d.path, formats))
        want_storage = 'pools' if d.kind == 'volume' else 'legacy'
        if name == 'disk' and storage != want_storage:
            raise B.CheckFailed('%s: recorded %r, its root disk is a %s' % (
                where, storage, d.kind))
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
                                    argv_prefix=d.compute['nsenter'])
            if name in leg.keeps and got != marker:
                raise B.CheckFailed('%s: the %s %s (%s) reads %r, not %r' % (
                    where, d.kind, d.path, d.fmt, got, marker))
            if name not in leg.keeps and got == marker:
                raise B.CheckFailed('%s: the %s %s kept the data of the '
                                    'disk it replaces' % (where, d.kind,
                                                          d.path))
            state = 'kept' if got == marker else 'new'
        row[column] = '%s %s %s' % (state, d.fmt, d.kind)
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
    return row


def _left(t: Traveller, leg: Leg, host: str, row: dict[str, str]) -> None:
    left = B.left_on(t.cloud, host, t.server)
    row['left behind'] = ', '.join(left) or 'nothing'
    if left:
        raise B.CheckFailed('after the %s, left on %s: %s' % (
            leg.name, host, ', '.join(left)))


def _rebooted(t: Traveller, leg: Leg, row: dict[str, str]) -> None:
    host = t.host
    t.conn.compute.reboot_server(t.server, 'HARD')
    _check(t, leg, 'ACTIVE', host, 'hard reboot', row)
    row['state'] += ', hard reboot'
    row['result'] = 'pass'


def _travel(t: Traveller, leg: Leg, here: str, there: str) -> str:
    """One leg from ``here``: mark, move, check, hard reboot, check
    again; where the server ends."""
    to = there if leg.goes else here
    ends = leg.ends(here, there)
    row = _row(t, leg, here, to)
    _mark(t, leg.status)
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
    for t in travellers:
        _mark(t, EVACUATE.status)
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
        except B.CheckFailed as e:
            row['result'] = 'FAIL: %s' % e
            failed.append(str(e))
    if failed:
        raise B.CheckFailed('; '.join(failed))


def _group(cloud: B.Cloud, res: Mapping[str, Any], first: str,
           other: str) -> list[Traveller]:
    """A raw and a qcow2 server from ``first``, side by side through every
    leg, then evacuated together; the travellers (their rows filled)."""
    from gate import tempest
    travellers = [Traveller(cloud, tempest.connect(cloud), res, fmt)
                  for fmt in ('raw', 'qcow2')]
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


def check_move_matrix(cloud: B.Cloud, conn: Any,
                      res: Mapping[str, Any]) -> B.Report:
    pools_host, files_host = B.hosts(cloud)
    logins = check_moves._ssh_sessions(cloud)
    rows = []
    for first, other in ((pools_host, files_host), (files_host, pools_host)):
        for t in _group(cloud, res, first, other):
            rows += t.rows
    failed = [r for r in rows if r['result'] != 'pass']
    ssh = check_moves._ssh_sessions(cloud) - logins
    summary = '%d legs (%d failed), each move then a hard reboot; %s' % (
        len(rows), len(failed), 'no SSH' if not ssh else
        '%d SSH session(s)' % ssh)
    report = B.Report(summary, COLUMNS,
                      [tuple(r.get(c, '') for c in COLUMNS) for r in rows])
    if failed or ssh:
        raise B.CheckFailed(summary + ': ' + '; '.join(
            '%s %s %s->%s: %s' % (r.get('image'), r.get('move'),
                                  r.get('from'), r.get('to'), r['result'])
            for r in failed), report)
    return report
