"""The move matrix's own parts: where each leg goes, what it reads, how
its table is kept and shown (the matrix itself runs in the gate's cloud)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from gate import check_matrix as M
from gate import checks
from gate import checks_base as B
from gate import results


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
        monkeypatch.setattr(M, '_mark', lambda t, status: None)

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
