"""Stock Nova's own defects told apart by what the computes logged."""

from __future__ import annotations

import os
import pathlib

from gate import results
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
