"""The move matrix's own parts: where each leg goes, what it reads, how
its table is kept and shown (the matrix itself runs in the gate's cloud)."""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
import subprocess
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from gate import check_matrix as M
from gate import checks
from gate import checks_base as B
from gate import image
from gate import results

MiB = 1024 * 1024
#: The real one (the journey's tests replace it).
REBOOTED = M._rebooted


def _disk(path: str, kind: str = 'file') -> B.Disk:
    return B.Disk({}, 'vda', 'disk', path, kind, 'raw')


@pytest.mark.parametrize('path, name', [
    ('/var/lib/nova/instances/u-1/disk', 'disk'),
    ('/var/lib/nova/instances/u-1/disk.eph0', 'disk.eph0'),
    ('/var/lib/nova/instances/disks/u-1_disk.swap', 'disk.swap'),
    ('/var/lib/nova/instances/u-1/disk.config', 'disk.config'),
    ('rbd:vms/u-1_disk.config:conf=/etc/ceph/ceph.conf', 'disk.config'),
])
def test_a_disk_is_known_by_novas_name_whatever_its_storage(path, name):
    assert _disk(path).name == name


def test_recorded_formats_are_the_records_pairs():
    assert M._recorded_formats({}) == {}
    assert M._recorded_formats({
        'imgtype_disk_formats': 'disk=qcow2,disk.eph0=raw'}) == {
            'disk': 'qcow2', 'disk.eph0': 'raw'}


#: Two hosts named as their kinds.
CLOUD = {'computes': [{'host': 'pools', 'use_storage_pools': True},
                      {'host': 'files', 'use_storage_pools': False}]}


class _Cloud:
    """Two hosts; a leg's move puts the server where it is sent."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.moves: list[tuple[str, str, str]] = []
        self.checked: list[tuple[str, str]] = []
        self.left: list[tuple[str, str]] = []
        monkeypatch.setattr(M, '_mark', lambda *args: None)

        def check(t: Any, leg: M.Leg, status: str, host: str, when: str,
                  row: dict[str, str]) -> None:
            assert t.host == host, (leg.name, when)
            self.checked.append((leg.name, host))
        monkeypatch.setattr(M, '_check', check)
        monkeypatch.setattr(M, '_left', lambda t, leg, host, row:
                            self.left.append((leg.name, host)))
        monkeypatch.setattr(M, '_rebooted', lambda t, leg, row:
                            row.update(result='pass'))
        self.steered: list[tuple[str, list[str]]] = []

        @contextlib.contextmanager
        def steered(conn: Any, host: str) -> Iterator[None]:
            self.steered.append((host, []))
            yield
            self.steered[-1][1].extend(m[0] for m in self.moves)
        monkeypatch.setattr(B, 'scheduled_elsewhere', steered)
        legs = []
        for leg in M.LEGS:
            def make(t: Any, to: str, leg: M.Leg = leg) -> None:
                self.moves.append((leg.name, t.host, to))
                if leg.goes and not leg.returns:
                    t.server.compute_host = to
            legs.append(dataclasses.replace(leg, make=make))
        monkeypatch.setattr(M, 'LEGS', tuple(legs))


def test_each_server_travels_every_move_there_and_back(monkeypatch):
    cloud = _Cloud(monkeypatch)
    t = M.Traveller(CLOUD, None, {}, 'raw',
                    server=SimpleNamespace(compute_host='pools'))
    assert M._journey([t], 'pools', 'files') == [t]
    assert cloud.moves == [
        ('live migration', 'pools', 'files'),
        ('cold migration', 'files', 'pools'),
        ('resize up, reverted', 'pools', 'files'),
        ('resize up', 'pools', 'files'),
        ('shelve, unshelve', 'files', 'pools'),
        ('rebuild', 'pools', 'pools')]
    # Checked where each move ends (a revert back at its source)...
    assert [host for _, host in cloud.checked] == [
        'files', 'pools', 'pools', 'files', 'pools', 'pools']
    # ...and nothing left where it no longer is.
    assert cloud.left == [
        ('live migration', 'pools'), ('cold migration', 'files'),
        ('resize up, reverted', 'files'), ('resize up', 'pools'),
        ('shelve, unshelve', 'files')]
    assert [(r['from'], r['to'], r['result']) for r in t.rows] == [
        ('%s (%s)' % (a, a), '%s (%s)' % (b, b), 'pass')
        for _, a, b in cloud.moves]
    # The journey ends where it began: the evacuation leaves from there.
    assert t.host == 'pools'
    # Each resize's source is out of scheduling while it is made.
    assert [(host, moves[-1]) for host, moves in cloud.steered] == [
        ('pools', 'resize up, reverted'), ('pools', 'resize up')]


def test_a_failed_leg_says_why_and_ends_the_journey(monkeypatch):
    _Cloud(monkeypatch)

    def broken(t: Any, leg: M.Leg, status: str, host: str, when: str,
               row: dict[str, str]) -> None:
        if leg.name == 'cold migration':
            raise B.CheckFailed('the disk reads nothing')
    monkeypatch.setattr(M, '_check', broken)
    t = M.Traveller(CLOUD, None, {}, 'qcow2',
                    server=SimpleNamespace(compute_host='pools'))
    assert M._journey([t], 'pools', 'files') == []
    assert [(r['move'], r['result']) for r in t.rows] == [
        ('live migration', 'pass'),
        ('cold migration', 'FAIL: the disk reads nothing')]


def _report() -> B.Report:
    return B.Report('2 legs (1 failed)', ('image', 'move', 'result'),
                    [('raw', 'live migration', 'pass'),
                     ('qcow2', 'rebuild', 'FAIL: a | b')])


def test_a_checks_table_is_kept_passed_or_failed():
    def passes(cloud: Any, conn: Any, res: Any) -> B.Report:
        return _report()

    def fails(cloud: Any, conn: Any, res: Any) -> str:
        raise B.CheckFailed('1 of 2 legs failed', _report())

    ok = checks.run_one('move-matrix', passes, {}, None, {})
    assert ok['status'] == 'pass' and ok['detail'] == '2 legs (1 failed)'
    assert ok['table']['rows'][1] == ['qcow2', 'rebuild', 'FAIL: a | b']
    bad = checks.run_one('move-matrix', fails, {}, None, {})
    assert bad['status'] == 'fail' and bad['table'] == ok['table']
    plain = checks.run_one('traits', lambda c, n, r: 'fine', {}, None, {})
    assert 'table' not in plain


def test_the_results_show_a_checks_table_under_its_name():
    run = {'label': 's', 'drivers': {}, 'wall_seconds': 1.0,
           'returncode': 0,
           'tests': {'tempest.x': {'status': 'passed', 'duration': 1.0,
                                   'reason': ''}}}
    found = checks.run_one('move-matrix', lambda c, n, r: _report(), {},
                           None, {})
    cmp = results.compare(run, run, [found], min_passed=1)
    md = results.render_md(cmp)
    assert ('## Check move-matrix\n\n| image | move | result |\n'
            '|---|---|---|\n| raw | live migration | pass |\n'
            '| qcow2 | rebuild | FAIL: a \\| b |\n') in md
    assert '| move-matrix | pass | 2 legs (1 failed) |' in md


def test_only_the_named_checks_run_and_a_wrong_name_is_said(tmp_path,
                                                             monkeypatch):
    import json
    cloud = tmp_path / 'cloud.json'
    cloud.write_text(json.dumps({'base': str(tmp_path)}))
    ran = []
    monkeypatch.setattr(checks, 'CHECKS', {
        'a': lambda c, n, r: ran.append('a') or 'a ok',
        'b': lambda c, n, r: ran.append('b') or 'b ok'})
    monkeypatch.setattr(checks.tempest, 'prepare', lambda c: {})
    monkeypatch.setattr(checks.tempest, 'connect', lambda c: None)
    assert [r['check'] for r in checks.run(str(cloud), ['b'])] == ['b']
    assert ran == ['b']
    with pytest.raises(ValueError, match="no check c .checks: a, b."):
        checks.run(str(cloud), ['c'])


# -- the hostile guest --------------------------------------------------------

def test_every_leg_sees_both_headers_and_every_server_too():
    """The variant alternates per leg, the two images of a group start on
    opposite ones, and so do the two groups: each leg (in each group, so in
    each of its directions) has one image's guest write a backing-file
    header and the other's a data-file header; each server writes both
    along its journey; each image on each leg writes both across the two
    groups."""
    legs = len(M.LEGS) + 1                        # the evacuation too
    seen = {}
    for group in (0, 1):
        for i, fmt in enumerate(('raw', 'qcow2')):
            t = M.Traveller(CLOUD, None, {}, fmt, variant_base=i + group)
            for leg in range(legs):
                M._row(t, M.LEGS[0], 'pools', 'files')
                seen[group, fmt, leg] = M._variant(t)
            assert {seen[group, fmt, n] for n in range(legs)} == set(
                image.HOSTILE_VARIANTS)
    for group in (0, 1):
        for leg in range(legs):
            assert seen[group, 'raw', leg] != seen[group, 'qcow2', leg]
    for fmt in ('raw', 'qcow2'):
        for leg in range(legs):
            assert seen[0, fmt, leg] != seen[1, fmt, leg]


SECRET = b'nova-imgtype gate: root-only host file 0123\n'


@pytest.fixture
def hostile(tmp_path: pathlib.Path) -> M.Hostile:
    """Both headers, naming a host file of the test's that repeats
    :data:`SECRET`."""
    host_file = tmp_path / 'host-file'
    host_file.write_bytes((SECRET * (M.SECRET_SIZE // len(SECRET) + 1))[
        :M.SECRET_SIZE])
    headers = {}
    for variant in image.HOSTILE_VARIANTS:
        data = image.hostile_header(str(host_file), variant)
        path = tmp_path / (variant.replace(' ', '-') + '.qcow2')
        path.write_bytes(data)
        headers[variant] = (data, str(path))
    return M.Hostile(SECRET, headers)


LOCAL = {'nsenter': [], 'host': 'files'}


def _local(path: pathlib.Path, fmt: str = 'raw', device: str = 'disk',
           size: int = 4 * MiB, target: str = 'vda') -> B.Disk:
    if not path.exists():
        if fmt == 'raw':
            path.write_bytes(b'')
            with open(path, 'r+b') as f:
                f.truncate(size)
        else:
            subprocess.run(['qemu-img', 'create', '-q', '-f', fmt,
                            str(path), str(size)], check=True)
    return B.Disk(LOCAL, target, device, str(path), 'file', fmt)


def _domain(tmp_path: pathlib.Path, root_fmt: str = 'raw',
            drive: str = 'cdrom') -> list[B.Disk]:
    """A files host's domain: raw disks (the root in ``root_fmt``), a
    config drive."""
    return [_local(tmp_path / 'disk', root_fmt),
            _local(tmp_path / 'disk.eph0', target='vdb'),
            _local(tmp_path / 'disk.swap', target='vdc'),
            _local(tmp_path / 'disk.config', device=drive, target='sda')]


def _traveller(hostile: M.Hostile | None, monkeypatch: pytest.MonkeyPatch,
               disks: list[B.Disk]) -> M.Traveller:
    server = SimpleNamespace(id='u-1', status='SHUTOFF', task_state=None,
                             compute_host='files',
                             flavor=SimpleNamespace(disk=0, ephemeral=0))
    monkeypatch.setattr(B, 'domain_disks', lambda cloud, s: list(disks))
    monkeypatch.setattr(B, 'config_drive', lambda cloud, s: ('', 'iso'))
    monkeypatch.setattr(B, 'wait', lambda conn, s, status: s)
    monkeypatch.setattr(B, 'record', lambda s: {
        'imgtype_storage': 'legacy'})
    monkeypatch.setattr(M, '_stored_format', lambda d, s: (
        'disk.info', d.fmt))
    monkeypatch.setattr(M, '_virtual_size', lambda d: 0)
    t = M.Traveller({'computes': [LOCAL, *CLOUD['computes']]}, None, {},
                    'raw',
                    server=server, hostile=hostile)
    M._row(t, M.LEGS[1], 'files', 'pools')
    return t


def test_a_hostile_guest_writes_a_header_into_each_raw_disk_it_can_write(
        tmp_path, hostile, monkeypatch):
    disks = _domain(tmp_path)
    disks[2] = dataclasses.replace(disks[2], fmt='qcow2')
    subprocess.run(['qemu-img', 'convert', '-f', 'raw', '-O', 'qcow2',
                    disks[2].path, str(tmp_path / 'swap.qcow2')], check=True)
    pathlib.Path(disks[2].path).write_bytes(
        (tmp_path / 'swap.qcow2').read_bytes())
    t = _traveller(hostile, monkeypatch, disks)
    row = t.rows[-1]
    M._mark(t, 'SHUTOFF', row)
    header, _ = hostile.headers[M._variant(t)]
    # The raw disks, as their guest reads them: the header, then the
    # marker past it.
    assert set(t.headers) == {'disk', 'disk.eph0'}
    for d in disks[:2]:
        assert image.read_span(d.path, len(header), fmt='raw') == header
        assert image.read_marker(d.path, len(t.markers[d.name]), fmt='raw',
                                 offset=M.MARKER_OFFSET) == t.markers[
                                     d.name]
    # A qcow2 disk: its guest's data hold only the marker (its file's
    # header is the host's); the config drive (a CD-ROM) nothing.
    swap = disks[2]
    assert image.read_span(swap.path, 4, fmt='raw') == b'QFI\xfb'
    assert image.read_span(swap.path, 64, fmt='qcow2') == bytes(64)
    assert image.read_marker(swap.path, len(t.markers['disk.swap']),
                             fmt='qcow2', offset=M.MARKER_OFFSET) == (
                                 t.markers['disk.swap'])
    assert pathlib.Path(disks[3].path).read_bytes() == bytes(4 * MiB)
    assert row['guest'] == '%s header in disk, disk.eph0' % M._variant(t)


def test_before_a_shelve_the_root_gets_no_header(tmp_path, hostile,
                                                monkeypatch):
    # Its snapshot converted back to raw would be refused by Nova's own
    # check at unshelve (as stock's): the other raw disks get theirs.
    disks = _domain(tmp_path)
    t = _traveller(hostile, monkeypatch, disks)
    M._mark(t, 'SHUTOFF', t.rows[-1])       # an earlier leg's header
    shelve = [leg for leg in M.LEGS if leg.name == 'shelve, unshelve'][0]
    M._mark(t, 'SHUTOFF', t.rows[-1], shelve.hostile_root)
    assert set(t.headers) == {'disk.eph0', 'disk.swap'} - {
        d.name for d in disks if d.fmt != 'raw'}
    assert image.read_span(disks[0].path, M.SECRET_SIZE, fmt='raw') == bytes(
        M.SECRET_SIZE)
    assert all(leg.hostile_root for leg in M.LEGS if leg is not shelve)


def test_a_benign_guest_writes_markers_only(tmp_path, monkeypatch):
    disks = _domain(tmp_path)
    t = _traveller(None, monkeypatch, disks)
    M._mark(t, 'SHUTOFF', t.rows[-1])
    assert t.headers == {} and set(t.markers) == set(M.WRITABLE)
    assert t.rows[-1]['guest'] == 'benign (no raw disk)'
    assert image.read_span(disks[0].path, 64, fmt='raw') == bytes(64)


def test_a_config_drive_its_guest_can_write_is_said(tmp_path, hostile,
                                                     monkeypatch):
    t = _traveller(hostile, monkeypatch, _domain(tmp_path, drive='disk'))
    with pytest.raises(B.CheckFailed, match='config drive .* can write'):
        M._mark(t, 'SHUTOFF', t.rows[-1])


def _leg(keeps: frozenset[str] = M.ALL) -> M.Leg:
    return M.Leg('cold migration', 'SHUTOFF', keeps, True, True, False,
                 lambda t, to: None)


def test_a_hostile_guest_reads_back_what_it_wrote_in_the_domains_format(
        tmp_path, hostile, monkeypatch):
    t = _traveller(hostile, monkeypatch, _domain(tmp_path))
    row = t.rows[-1]
    M._mark(t, 'SHUTOFF', row)
    M._check(t, _leg(), 'SHUTOFF', 'files', 'move', row)
    assert row['root'] == 'kept raw file'
    assert row['ephemeral'] == 'kept raw file'
    assert t.root_seen[0] == hostile.headers[M._variant(t)][0]


def test_a_raw_disk_given_to_qemu_as_qcow2_leaks_the_host_file_and_is_said(
        tmp_path, hostile, monkeypatch):
    """What issue 54 found after a cold move to a files host: the guest's
    header taken for the disk's format. Read as the domain gives it, the
    guest sees the host file."""
    disks = _domain(tmp_path)
    t = _traveller(hostile, monkeypatch, disks)
    M._mark(t, 'SHUTOFF', t.rows[-1])
    disks[0] = dataclasses.replace(disks[0], fmt='qcow2')
    with pytest.raises(B.CheckFailed, match='reads the host file .* '
                       'through its file .*/disk .qcow2.'):
        M._check(t, _leg(), 'SHUTOFF', 'files', 'move', t.rows[-1])


def test_a_raw_disk_said_qcow2_by_its_storage_disagrees(
        tmp_path, hostile, monkeypatch):
    """disk.info says qcow2 of a raw disk whose guest wrote a qcow2 header:
    the header is the guest's, the file raw, the formats disagree (the
    magic of the guest's bytes decides nothing)."""
    t = _traveller(hostile, monkeypatch, _domain(tmp_path))
    M._mark(t, 'SHUTOFF', t.rows[-1])
    monkeypatch.setattr(M, '_stored_format', lambda d, s: (
        'disk.info', 'qcow2' if d.name == 'disk' else d.fmt))
    with pytest.raises(B.CheckFailed, match="disagree: .*'container': 'raw'"
                       ".*'disk.info': 'qcow2'"):
        M._check(t, _leg(), 'SHUTOFF', 'files', 'move', t.rows[-1])


def test_a_kept_disk_that_lost_its_guests_header_is_said(
        tmp_path, hostile, monkeypatch):
    disks = _domain(tmp_path)
    t = _traveller(hostile, monkeypatch, disks)
    M._mark(t, 'SHUTOFF', t.rows[-1])
    with open(disks[1].path, 'r+b') as f:
        f.write(bytes(512))
    with pytest.raises(B.CheckFailed, match='disk.eph0 .raw. does not start '
                       'with the .* header its guest wrote'):
        M._check(t, _leg(), 'SHUTOFF', 'files', 'move', t.rows[-1])


def test_the_container_is_the_hosts_header_never_the_guests(tmp_path,
                                                            hostile):
    guest = [h for h, _ in hostile.headers.values()]
    raw = _local(tmp_path / 'raw')
    assert M._container(raw, guest) == 'raw'
    source = hostile.headers['data file'][1]
    image.write_file(raw.path, source, fmt='raw')
    # The guest's own header: its data, in a raw file...
    assert M._container(raw, guest) == 'raw'
    # ...which, not known as the guest's, reads as a qcow2 container.
    assert M._container(raw) == 'qcow2'
    # A qcow2 file: the header its host wrote.
    assert M._container(_local(tmp_path / 'q', 'qcow2'), guest) == 'qcow2'
    # Another qcow2 header at the start of a raw file (one the host made,
    # not the guest) is a qcow2 container.
    other = _local(tmp_path / 'other')
    image.write_file(other.path, _local(tmp_path / 'q2', 'qcow2').path,
                     fmt='raw')
    assert M._container(other, guest) == 'qcow2'


def _guest_disk(tmp_path: pathlib.Path, hostile: M.Hostile,
                variant: str) -> tuple[pathlib.Path, bytes, bytes]:
    disk = tmp_path / 'root.raw'
    disk.write_bytes(bytes(4 * MiB))
    header, source = hostile.headers[variant]
    image.write_file(disk, source, fmt='raw')
    marker = b'root marker'
    image.write_marker(disk, marker, fmt='raw', offset=M.MARKER_OFFSET)
    return disk, header, marker


@pytest.mark.parametrize('variant', image.HOSTILE_VARIANTS)
def test_a_snapshot_of_the_guests_data_is_clean(tmp_path, hostile, variant):
    disk, header, marker = _guest_disk(tmp_path, hostile, variant)
    snap = tmp_path / 'snap.qcow2'
    subprocess.run(['qemu-img', 'convert', '-f', 'raw', '-O', 'qcow2',
                    str(disk), str(snap)], check=True)
    cell = M._judge_snapshot(str(snap), 'qcow2', SECRET, (header, marker),
                             'snapshot')
    assert cell.startswith('clean qcow2, ')


@pytest.mark.parametrize('variant', image.HOSTILE_VARIANTS)
@pytest.mark.parametrize('compress', [False, True])
def test_a_snapshot_that_followed_the_guests_header_is_said(
        tmp_path, hostile, variant, compress):
    """A snapshot made by taking the raw disk for qcow2 copies the host
    file: seen in its bytes, or (compressed) in what it holds."""
    disk, header, marker = _guest_disk(tmp_path, hostile, variant)
    snap = tmp_path / 'snap.qcow2'
    subprocess.run(['qemu-img', 'convert', *(['-c'] if compress else []),
                    '-f', 'qcow2', '-O', 'qcow2', str(disk), str(snap)],
                   check=True)
    with pytest.raises(B.CheckFailed, match='holds the host file|does not '
                       'start with what the guest reads'):
        M._judge_snapshot(str(snap), 'qcow2', SECRET, (header, marker),
                          'snapshot')


def test_a_snapshot_naming_a_host_file_is_said(tmp_path, hostile):
    disk, header, marker = _guest_disk(tmp_path, hostile, 'backing file')
    # The guest's header itself, given to Glance as qcow2.
    snap = tmp_path / 'snap.qcow2'
    snap.write_bytes(header)
    with pytest.raises(B.CheckFailed, match='names .*host-file'):
        M._judge_snapshot(str(snap), 'qcow2', b'', (b'', b''), 'snapshot')


def test_a_secret_is_found_across_chunks(tmp_path):
    path = tmp_path / 'f'
    path.write_bytes(b'x' * 10 + b'SECRET' + b'y' * 10)
    for chunk in range(1, 20):
        assert M._file_holds(str(path), b'SECRET', chunk)
    assert not M._file_holds(str(path), b'SECRETS', 4)


def test_a_dir_pools_probe_of_the_guests_header_is_shown_not_judged(
        tmp_path, hostile, monkeypatch):
    """libvirt probes the format of a dir pool's volume in the file: of a
    raw volume whose guest wrote a qcow2 header, it says qcow2. That is the
    guest's bytes, not the host's word: shown in the cell, while the
    domain, the record and the container must still agree."""
    disks = [dataclasses.replace(d, kind='volume')
             for d in _domain(tmp_path)]
    t = _traveller(hostile, monkeypatch, disks)
    M._mark(t, 'SHUTOFF', t.rows[-1])
    monkeypatch.setattr(M, '_stored_format', lambda d, s: (
        'volume XML', 'qcow2' if d.name in ('disk', 'disk.eph0') else d.fmt))
    monkeypatch.setattr(B, 'record', lambda s: {'imgtype_storage': 'pools'})
    row = t.rows[-1]
    M._check(t, _leg(), 'SHUTOFF', 'files', 'move', row)
    assert row['root'] == 'kept raw volume (the pool probes qcow2)'
    # Where the file's first bytes are not the guest's header, the
    # volume's format is judged.
    with open(disks[0].path, 'r+b') as f:
        f.write(bytes(image.HOSTILE_SPAN))
    t.headers.pop('disk')
    with pytest.raises(B.CheckFailed, match="disagree: .*'volume XML': "
                       "'qcow2'"):
        M._check(t, _leg(frozenset({'disk.eph0', 'disk.swap'})), 'SHUTOFF',
                 'files', 'move', row)


def test_a_failed_snapshot_fails_the_leg_and_the_journey_goes_on(
        monkeypatch):
    cloud = _Cloud(monkeypatch)
    monkeypatch.setattr(M, '_rebooted', REBOOTED)
    monkeypatch.setattr(B, 'wait', lambda conn, s, status: s)

    def snapshot(t: Any, leg: M.Leg, row: dict[str, str]) -> None:
        if leg.name == 'cold migration':
            raise B.CheckFailed('the snapshot: refused')
        row['snapshot'] = 'clean'
    monkeypatch.setattr(M, '_snapshot', snapshot)
    conn = SimpleNamespace(compute=SimpleNamespace(
        reboot_server=lambda s, kind: None))
    t = M.Traveller(CLOUD, conn, {}, 'raw',
                    server=SimpleNamespace(compute_host='pools'))
    assert M._journey([t], 'pools', 'files') == [t]
    assert [(r['move'], r['result']) for r in t.rows][:3] == [
        ('live migration', 'pass'),
        ('cold migration', 'FAIL: the snapshot: refused'),
        ('resize up, reverted', 'pass')]
    assert len(t.rows) == len(M.LEGS) and cloud.moves


def test_the_logs_say_what_went_wrong_for_a_request(tmp_path):
    logs = tmp_path / 'logs'
    logs.mkdir()
    (logs / 'glance.log').write_text(
        '2026 1 INFO glance.api [None req-1 u p] Unable to create trust\n'
        '2026 1 WARNING glance.location [None req-1 u p] Image claims '
        'raw\n'
        '2026 1 ERROR glance.api.v2.image_data [None req-1 u p] Image '
        'failed safety checks\n'
        '2026 1 ERROR glance.api.v2.image_data [None req-2 u p] other\n')
    (logs / 'compute1-nova-compute.log').write_text(
        '2026 1 WARNING neutronclient [None req-1 u p] deprecated\n')
    said = M._logged({'logs': str(logs)}, 'req-1')
    assert said == ('glance: Image claims raw; glance: Image failed safety '
                    'checks')
    assert M._logged({'logs': str(logs)}, 'req-3') == 'nothing logged'
    assert M._logged({}, 'req-1') == 'no log'


def test_a_guests_header_a_host_tool_rewrote_is_said(tmp_path, hostile,
                                                     monkeypatch):
    """A resize that takes a raw disk for qcow2 (libvirt's, of a dir pool's
    volume it probed) rewrites the size in the guest's header: the file
    starts with a qcow2 header that is no longer the guest's."""
    disks = _domain(tmp_path)
    t = _traveller(hostile, monkeypatch, disks)
    M._mark(t, 'SHUTOFF', t.rows[-1])
    subprocess.run(['qemu-img', 'resize', '-q', '-f', 'qcow2',
                    disks[0].path, '2G'], check=True)
    with pytest.raises(B.CheckFailed, match="'container': 'qcow2'.*its "
                       "first bytes are the qcow2 header its guest wrote, "
                       "changed at \\d+ byte.s. from offset 2\\d to"):
        M._check(t, _leg(), 'SHUTOFF', 'files', 'move', t.rows[-1])


@pytest.mark.parametrize('leg, name, before, now, kept', [
    # On local storage only what the leg copies is kept...
    ('cold migration', 'disk.swap', False, False, False),
    ('cold migration', 'disk', False, False, True),
    ('evacuate', 'disk', False, False, False),
    # ...in Ceph before and after, the same RBD image is used...
    ('cold migration', 'disk.swap', True, True, True),
    ('resize up', 'disk.swap', True, True, True),
    ('evacuate', 'disk', True, True, True),
    # ...but not where one side is local, nor by a leg that makes it anew.
    ('evacuate', 'disk', True, False, False),
    ('cold migration', 'disk.swap', False, True, False),
    ('rebuild', 'disk', True, True, False),
    ('shelve, unshelve', 'disk.eph0', True, True, False),
])
def test_what_a_leg_keeps_depends_on_shared_storage(leg, name, before, now,
                                                    kept):
    legs = {leg.name: leg for leg in M.LEGS + (M.EVACUATE,)}
    assert legs[leg].kept(name, before, now) is kept


def test_a_disk_in_ceph_is_shared_storage():
    assert M._in_ceph(_disk('rbd:vms/u-1_disk:conf=/etc/ceph/ceph.conf',
                            'rbd'))
    assert not M._in_ceph(_disk('/var/lib/nova/instances/u-1/disk'))


@pytest.mark.parametrize('path, kind, record, agrees', [
    ('/i/u-1/disk', 'file', {'imgtype_storage': 'legacy'}, True),
    ('/i/u-1/disk', 'file', {'imgtype_storage': 'pools'}, False),
    ('/i/disks/u-1_disk', 'volume', {'imgtype_storage': 'pools'}, True),
    ('/i/disks/u-1_disk', 'volume', {'imgtype_storage': 'legacy'}, False),
    # In Ceph, a stock rbd disk, or a volume of the recorded Ceph pool...
    ('rbd:vms/u-1_disk:conf=/c', 'rbd', {'imgtype_storage': 'legacy'},
     True),
    ('rbd:vms/u-1_disk:conf=/c', 'rbd', {
        'imgtype_storage': 'pools',
        'imgtype_pool_location': 'rbd:vms@127.0.0.1:3300;fsid=f'}, True),
    # ...never one of another Ceph pool than the record's.
    ('rbd:vms/u-1_disk:conf=/c', 'rbd', {
        'imgtype_storage': 'pools',
        'imgtype_pool_location': 'rbd:other@127.0.0.1:3300;fsid=f'}, False),
])
def test_the_records_storage_is_where_the_disk_is(path, kind, record,
                                                  agrees):
    assert M._storage_agrees(_disk(path, kind), record) is agrees


def test_glances_refusal_of_a_guest_header_is_the_expected_snapshot():
    header = b'QFI\xfb guest header'
    t = M.Traveller({}, None, {}, 'raw', hostile=M.Hostile(
        b'secret', {'backing file': (header, '/h')}))
    refused = 'image x deleted before it was active (glance: Image qcow2 ' \
              'Safety checks failed: backing_file)'
    t.root_seen = (header + b'\0' * 8, b'm')
    assert M._glance_refused_guest_header(t, refused)
    # Any other failure, or a root that does not start with the guest's
    # header, or a benign guest, is the leg's failure.
    assert not M._glance_refused_guest_header(t, 'image x killed')
    t.root_seen = (b'\0' * 16, b'm')
    assert not M._glance_refused_guest_header(t, refused)
    benign = M.Traveller({}, None, {}, 'raw')
    benign.root_seen = (header, b'm')
    assert not M._glance_refused_guest_header(benign, refused)
