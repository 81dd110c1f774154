"""Rendering stock and plugin results side by side."""

from __future__ import annotations

import json
import os
import pathlib

from gate import results

P = {'status': 'passed', 'duration': 3.25, 'reason': ''}
F = {'status': 'failed', 'duration': 1.0,
     'reason': 'Traceback (most recent call last):\n  ...\n'
               'tempest.lib.exceptions.BuildErrorException: No valid host'}
S = {'status': 'skipped', 'duration': 0.0, 'reason': 'Cinder not | there'}


def _run(label: str, tests: dict[str, dict[str, object]]) -> dict[str, object]:
    return {'label': label, 'drivers': {'compute1': label},
            'wall_seconds': 12.5, 'returncode': 0, 'tests': tests}


STOCK = _run('stock', {
    'tempest.api.a.T.test_both': P,
    'tempest.api.a.T.test_regressed': P,
    'tempest.api.a.T.test_skipped_on_plugin': P,
    'tempest.api.a.T.test_skip_both': S,
    'tempest.api.a.T.test_fail_both': F,
    'nova_imgtype_tempest_plugin.tests.scenario.t.T.test_own': S,
    'tempest.api.a.T.test_only_stock': P,
})
PLUGIN = _run('plugin', {
    'tempest.api.a.T.test_both': P,
    'tempest.api.a.T.test_regressed': F,
    'tempest.api.a.T.test_skipped_on_plugin': S,
    'tempest.api.a.T.test_skip_both': S,
    'tempest.api.a.T.test_fail_both': F,
    'nova_imgtype_tempest_plugin.tests.scenario.t.T.test_own': P,
})


def test_compare_verdicts() -> None:
    cmp = results.compare(STOCK, PLUGIN, min_passed=1)
    verdicts = {r['id']: r['verdict'] for r in cmp['tests']}
    assert cmp['defects'] == [
        'tempest.api.a.T.test_only_stock',
        'tempest.api.a.T.test_regressed',
        'tempest.api.a.T.test_skipped_on_plugin']
    # The summary names them: CI shows only the end of the gate's output.
    assert cmp['summary']['problems'][0] == (
        '3 DEFECT(s): passed on stock, not on the plugin: '
        'tempest.api.a.T.test_only_stock, tempest.api.a.T.test_regressed, '
        'tempest.api.a.T.test_skipped_on_plugin')
    assert verdicts['tempest.api.a.T.test_both'] == 'ok'
    assert verdicts['tempest.api.a.T.test_skip_both'] == 'ok'
    assert verdicts['tempest.api.a.T.test_fail_both'] == 'failed on both'
    assert verdicts[
        'nova_imgtype_tempest_plugin.tests.scenario.t.T.test_own'] == 'ok'
    assert cmp['summary']['upstream_passed_on_both'] == 1
    assert not cmp['summary']['ok']
    assert cmp['runs']['plugin']['counts'] == {
        'passed': 2, 'failed': 2, 'skipped': 2, 'missing': 1}


def test_all_good_but_too_few() -> None:
    cmp = results.compare(STOCK, STOCK, min_passed=40)
    assert cmp['defects'] == []
    assert cmp['summary']['problems'][-1] == (
        'only 4 upstream tests pass on both (at least 40 wanted)')
    ok = results.compare(_run('s', {'tempest.x': P}),
                         _run('p', {'tempest.x': P}), min_passed=1)
    assert ok['summary']['ok']
    assert '**PASS**' in results.render_md(ok)


def test_markdown() -> None:
    checks = [{'name': 'marker kept on cold migration', 'status': 'failed',
               'detail': 'read b"" | wanted b"m1"'}]
    md = results.render_md(results.compare(STOCK, PLUGIN, checks, 1))
    assert md.startswith('# Gate results')
    assert '**FAIL**' in md
    assert ('- DEFECT: `tempest.api.a.T.test_regressed` passes on stock, '
            'failed on the plugin: tempest.lib.exceptions.'
            'BuildErrorException: No valid host') in md
    assert ('| `tempest.api.a.T.test_regressed` | passed 3.2s | '
            'FAILED 1.0s | **DEFECT** |') in md
    assert '| `tempest.api.a.T.test_skip_both` | skipped | skipped |  |' in md
    assert '| `tempest.api.a.T.test_only_stock` | passed 3.2s | MISSING |' \
        in md
    # Pipes in reasons do not break the table.
    assert 'Cinder not \\| there' in md
    assert '| marker kept on cold migration | FAILED |' in md
    assert '1 gate check(s) failed' in md


def test_write_and_cli(tmp_path: pathlib.Path) -> None:
    s = tmp_path / 's.json'
    p = tmp_path / 'p.json'
    s.write_text(json.dumps(STOCK))
    p.write_text(json.dumps(PLUGIN))
    out = tmp_path / 'out'
    rc = results.main(['--stock', str(s), '--plugin', str(p),
                       '--out-dir', str(out), '--min-passed', '1'])
    assert rc == 1
    data = json.loads((out / 'latest.json').read_text())
    assert data['summary']['defects'] == 3
    assert (out / 'latest.md').read_text().count('DEFECT') >= 3
    # Each run adds its line to the history.
    results.main(['--stock', str(s), '--plugin', str(p),
                  '--out-dir', str(out), '--min-passed', '1'])
    history = (out / 'history.md').read_text().splitlines()
    rows = [line for line in history if line.startswith('| 20')]
    assert len(rows) == 2 and history.count(history[0]) == 1
    assert all('| FAIL |' in row for row in rows)


def test_checks_of_gate_checks() -> None:
    checks = [
        {'check': 'traits', 'status': 'pass', 'detail': 'compute1: ok\nx',
         'seconds': 1.5},
        {'check': 'precache', 'status': 'error',
         'detail': 'KeyError: x\nTraceback...', 'seconds': 0.1},
    ]
    ok = _run('s', {'tempest.x': P})
    cmp = results.compare(ok, ok, checks, min_passed=1)
    assert [c['status'] for c in cmp['checks']] == ['passed', 'failed']
    assert cmp['summary']['problems'] == ['1 gate check(s) failed: precache']
    md = results.render_md(cmp)
    assert '| traits | pass | compute1: ok |' in md
    assert '| precache | ERROR | KeyError: x |' in md


def test_own_tests_must_pass_and_stock_failures_are_flagged() -> None:
    own = 'nova_imgtype_tempest_plugin.tests.scenario.t.T.test_own'
    upstream = 'tempest.api.a.T.test_fail_both'
    stock = _run('stock', {own: S, upstream: F, 'tempest.x': P})
    plugin = _run('plugin', {own: F, upstream: F, 'tempest.x': P})
    cmp = results.compare(stock, plugin, min_passed=1)
    verdicts = {r['id']: r['verdict'] for r in cmp['tests']}
    assert verdicts == {own: 'plugin failed', upstream: 'failed on both',
                        'tempest.x': 'ok'}
    # An upstream test stock fails is flagged, not dropped silently.
    assert cmp['summary']['problems'] == [
        '1 test(s) failed on the plugin: ' + own,
        '1 upstream test(s) failed on stock (fix the gate, or leave the '
        'test out of the selection saying why): ' + upstream]
    assert cmp['stock_failures'] == [upstream]
    # Each with its reason, for the end of the gate's output.
    assert results.failures(cmp) == [
        own + ' (plugin, failed): Traceback (most recent call last): | '
        '... | tempest.lib.exceptions.BuildErrorException: No valid host',
        upstream + ' (stock, failed): Traceback (most recent call last): '
        '| ... | tempest.lib.exceptions.BuildErrorException: No valid host']
    md = results.render_md(cmp)
    assert ('## Failed on stock\n\n- `%s`: failed tempest.lib.exceptions.'
            'BuildErrorException: No valid host' % upstream) in md
    plugin = _run('plugin', {own: P, upstream: F, 'tempest.x': P})
    assert not results.compare(stock, plugin, min_passed=1)['summary']['ok']
    stock = _run('stock', {own: S, upstream: P, 'tempest.x': P})
    plugin = _run('plugin', {own: P, upstream: P, 'tempest.x': P})
    assert results.compare(stock, plugin, min_passed=1)['summary']['ok']


def test_each_profile_has_its_own_results() -> None:
    # The default gate's results are where they always were; the ceph
    # profile's beside them, each with its own history.
    assert results.out_dir('default') == results.OUT_DIR
    assert results.out_dir('ceph') == os.path.join(results.OUT_DIR, 'ceph')


# Stock run where needed (make test's gate tier): stock ran only the tests
# the plugin did not pass (gate.tempest.not_passed_selection).
STOCK_WHERE_NEEDED = _run('stock', {
    'tempest.api.a.T.test_regressed': P,
    'tempest.api.a.T.test_skipped_on_plugin': P,
    'tempest.api.a.T.test_skip_both': S,
    'nova_imgtype_tempest_plugin.tests.scenario.t.T.test_own': S,
})


def test_where_needed_judges_what_the_plugin_did_not_pass() -> None:
    cmp = results.compare(STOCK_WHERE_NEEDED, PLUGIN, min_passed=1,
                          stock_scope='where-needed')
    rows = {r['id']: r for r in cmp['tests']}
    # What the plugin passed needs no stock run: ok, and it counts.
    both = rows['tempest.api.a.T.test_both']
    assert both['stock']['status'] == 'not needed'
    assert both['verdict'] == 'ok'
    assert cmp['summary']['upstream_passed_on_both'] == 1
    # What it failed or skipped and stock passed is still a DEFECT.
    assert cmp['defects'] == ['tempest.api.a.T.test_regressed',
                              'tempest.api.a.T.test_skipped_on_plugin']
    # A test the plugin failed that stock did not run is stock's missing
    # result, said, never taken as not needed.
    fail_both = rows['tempest.api.a.T.test_fail_both']
    assert fail_both['stock']['status'] == 'missing'
    assert cmp['stock_failures'] == ['tempest.api.a.T.test_fail_both']
    assert cmp['summary']['stock_scope'] == 'where-needed'
    assert cmp['runs']['stock']['counts']['not needed'] == 1
    md = results.render_md(cmp)
    assert 'ran only the tests the plugin did not pass' in md
    assert '| not needed | 1 | 0 |' in md


def test_where_needed_with_nothing_to_run_passes() -> None:
    plugin = _run('plugin', {'tempest.x': P, 'tempest.y': P})
    cmp = results.compare(_run('stock', {}), plugin, min_passed=2,
                          stock_scope='where-needed')
    assert cmp['summary']['ok'], cmp['summary']['problems']
    assert cmp['summary']['upstream_passed_on_both'] == 2
    # The same empty stock run read as a whole one is two stock failures.
    whole = results.compare(_run('stock', {}), plugin, min_passed=2)
    assert whole['stock_failures'] == ['tempest.x', 'tempest.y']


def test_an_unknown_stock_scope_is_named() -> None:
    import pytest
    with pytest.raises(ValueError, match="'some'"):
        results.compare(STOCK, PLUGIN, stock_scope='some')


def test_history_says_where_stock_ran_only_where_needed(tmp_path) -> None:
    cmp = results.compare(STOCK_WHERE_NEEDED, PLUGIN, min_passed=1,
                          stock_scope='where-needed')
    path = str(tmp_path / 'history.md')
    results.append_history(path, cmp)
    results.append_history(path, results.compare(STOCK, PLUGIN,
                                                 min_passed=1))
    lines = pathlib.Path(path).read_text().splitlines()
    assert lines[-2].count('(where needed)') == 1
    assert '(where needed)' not in lines[-1]
