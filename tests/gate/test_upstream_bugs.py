"""Stock Nova's own defects told apart by what the computes logged."""

from __future__ import annotations

import os
import pathlib

from gate import results
from gate import tempest_parse
from gate import upstream_bugs

#: What compute1 logged when stock Nova's build raced with its network
#: allocation thread (a CI gate run of 2026-11-27, stock's run).
RACE_LOG = os.path.join(os.path.dirname(__file__), 'logs',
                        'native-threads-build-race.log')
RACED = 'bd58a13d-c041-4b0a-870f-5c73f7fcb0db'


def _lines() -> list[str]:
    with open(RACE_LOG) as f:
        return f.readlines()


def test_the_race_is_found_by_its_whole_traceback() -> None:
    assert upstream_bugs.instances_hit(_lines()) == {
        RACED: 'native-threads-build-race'}


def test_the_same_error_elsewhere_is_not_the_race() -> None:
    lines = _lines()
    # The same RuntimeError raised by another frame is another defect.
    other = [ln for ln in lines if 'get_image_from_system_metadata' not in ln]
    assert upstream_bugs.instances_hit(other) == {}
    # Another failure to prep a block device is not this one.
    plain = [ln.replace('RuntimeError: dictionary changed size during '
                        'iteration', 'OSError: no space left')
             for ln in lines]
    assert upstream_bugs.instances_hit(plain) == {}
    # Lines of two events (another time stamp) are not put together.
    split = [ln.replace('17:03:10.272', '17:03:10.999')
             if 'get_image_from_system_metadata' in ln else ln
             for ln in lines]
    assert upstream_bugs.instances_hit(split) == {}


def test_a_log_directory_is_read_compute_by_compute(
        tmp_path: pathlib.Path) -> None:
    (tmp_path / 'compute2-nova-compute.log').write_text(''.join(_lines()))
    (tmp_path / 'nova-conductor.log').write_text(''.join(_lines()).replace(
        RACED, '00000000-0000-0000-0000-000000000000'))
    assert upstream_bugs.instances_hit_in(str(tmp_path)) == {
        RACED: 'native-threads-build-race'}


def _run(label: str, tests: dict[str, dict[str, object]]) -> dict[str, object]:
    return {'label': label, 'drivers': {}, 'tests': tests}


FAILED_BUILD = {
    'status': 'failed', 'duration': 30.0,
    'reason': 'Traceback (most recent call last):\n  ...\n'
              'tempest.exceptions.BuildErrorException: Server %s failed '
              'to build and is in ERROR status\nDetails: Fault: '
              "{'code': 500, 'message': 'Build of instance %s aborted: "
              "Failure prepping block device.'}" % (RACED, RACED)}
PASSED = {'status': 'passed', 'duration': 20.0, 'reason': ''}
LM = 'tempest.api.compute.admin.test_live_migration.T.test_live'


def test_a_test_failed_by_the_race_is_listed_not_judged(
        tmp_path: pathlib.Path) -> None:
    hits = {RACED: 'native-threads-build-race'}
    stock = _run('stock', {LM: FAILED_BUILD, 'tempest.x': PASSED})
    plugin = _run('plugin', {LM: PASSED, 'tempest.x': PASSED})
    # Without the computes' word, a stock failure fails the gate.
    assert not results.compare(stock, plugin, min_passed=1)['summary']['ok']
    cmp = results.compare(stock, plugin, min_passed=1, upstream_hits=hits)
    assert cmp['summary']['ok'], cmp['summary']['problems']
    assert cmp['stock_failures'] == []
    assert cmp['stock_nova_defects'] == [
        {'id': LM, 'run': 'stock', 'instance': RACED,
         'bug': 'native-threads-build-race'}]
    assert {r['id']: r['verdict'] for r in cmp['tests']}[LM] == \
        'stock Nova defect'
    md = results.render_md(cmp)
    assert '## Stock Nova defects met' in md
    assert '- `%s` (stock): server %s, native-threads-build-race' % (
        LM, RACED) in md
    # On the plugin's run it is no DEFECT either: the same manager raced.
    cmp = results.compare(plugin, stock, min_passed=1, upstream_hits=hits)
    assert cmp['defects'] == [] and cmp['summary']['ok']
    # A failure on another server is still judged.
    cmp = results.compare(stock, plugin, min_passed=1, upstream_hits={
        '11111111-1111-1111-1111-111111111111': 'native-threads-build-race'})
    assert cmp['stock_failures'] == [LM] and not cmp['summary']['ok']
    # The CLI reads the cloud's logs.
    logs = tmp_path / 'logs'
    logs.mkdir()
    (logs / 'compute1-nova-compute.log').write_text(''.join(_lines()))
    s, p = tmp_path / 's.json', tmp_path / 'p.json'
    s.write_text(results.json.dumps(stock))
    p.write_text(results.json.dumps(plugin))
    args = ['--stock', str(s), '--plugin', str(p), '--min-passed', '1',
            '--out-dir', str(tmp_path / 'out')]
    assert results.main(args) == 1
    assert results.main(args + ['--logs', str(logs)]) == 0


#: What compute1 logged unshelving a server that compute2's shelve offload
#: then left without a host (a Ceph-profile gate of 2026-11-28, the
#: plugin's run).
OFFLOAD_LOG = os.path.join(os.path.dirname(__file__), 'logs',
                           'shelve-offload-host-race.log')
OFFLOADED = '05caa954-8a0b-482d-8a7b-73b54ca8dfc2'
SUSPEND = ('tempest.api.compute.servers.test_servers_negative.'
           'ServersNegativeTestJSON.test_suspend_server_invalid_state')
#: tempest's log of that test's request (its failure names no server).
TEMPEST_LOG = [
    '2026-11-28 01:19:59.541 9001 INFO tempest.lib.common.rest_client '
    '[req-1cde83ea-3ca9-4474-a6ac-52a595520329 ] Request '
    '(ServersNegativeTestJSON:test_suspend_server_invalid_state): 500 POST '
    'http://127.0.0.1:8774/v2.1/servers/%s/action 0.086s\n' % OFFLOADED,
    '2026-11-28 01:19:58.001 9001 INFO tempest.lib.common.rest_client '
    '[req-0 ] Request (ServersNegativeTestJSON:test_suspend_server_invalid_'
    'state): 200 GET http://127.0.0.1:8774/v2.1/servers/'
    '22222222-2222-2222-2222-222222222222 0.010s\n',
]


def _offload_lines() -> list[str]:
    with open(OFFLOAD_LOG) as f:
        return f.readlines()


def test_the_offload_race_is_its_two_lines_on_the_unshelving_compute(
        ) -> None:
    lines = _offload_lines()
    assert upstream_bugs.instances_hit(lines) == {
        OFFLOADED: 'shelve-offload-host-race'}
    # Either line alone is not the race: a claim of an instance with a
    # host set, or a host found None, happen apart from it.
    for needle in ('Host field should not be set', 'from host None'):
        assert upstream_bugs.instances_hit(
            [ln for ln in lines if needle not in ln]) == {}
    # The two lines about two instances are not put together.
    other = '11111111-1111-1111-1111-111111111111'
    assert upstream_bugs.instances_hit([
        ln.replace(OFFLOADED, other) if 'from host None' in ln else ln
        for ln in lines]) == {}


def test_a_failure_naming_no_server_is_linked_by_its_5xx_requests() -> None:
    failed = {'status': 'failed', 'duration': 187.9,
              'reason': 'tempest.lib.exceptions.ServerFault: Got server '
                        'fault\nDetails: Unexpected API Error.'}
    tests = {SUSPEND: dict(failed), 'tempest.x.Y.test_z': dict(PASSED)}
    tempest_parse.add_failed_request_servers(tests, TEMPEST_LOG)
    # Only the server of the 500, only on the failed test.
    assert tests[SUSPEND]['servers'] == [OFFLOADED]
    assert 'servers' not in tests['tempest.x.Y.test_z']
    hits = upstream_bugs.instances_hit(_offload_lines())
    stock = _run('stock', {SUSPEND: PASSED, 'tempest.x': PASSED})
    plugin = _run('plugin', {SUSPEND: tests[SUSPEND], 'tempest.x': PASSED})
    # Without the link it is a DEFECT; with it, stock's race, listed.
    assert results.compare(stock, plugin, min_passed=1)['defects'] == [
        SUSPEND]
    cmp = results.compare(stock, plugin, min_passed=1, upstream_hits=hits)
    assert cmp['summary']['ok'], cmp['summary']['problems']
    assert cmp['stock_nova_defects'] == [
        {'id': SUSPEND, 'run': 'plugin', 'instance': OFFLOADED,
         'bug': 'shelve-offload-host-race'}]
