"""Stock and plugin tempest results side by side: gate/results/latest.*

Input: two ``results.json`` of :mod:`gate.tempest` (``--stock``,
``--plugin``) and optionally the gate's own checks (``--checks``: the
``checks.json`` of :mod:`gate.checks`, a JSON list of ``{"check",
"status": "pass"|"fail"|"error", "detail", "seconds"}``; ``name`` and
``passed``/``failed``/``skipped`` are understood too).
Output: ``latest.md`` (summary, defects, a table per test with both
statuses and durations, why tests skipped or failed) and ``latest.json``
(the same, for machines).

Verdicts per test:

* ``DEFECT``: passed on stock, not on the plugin (failed, skipped or
  missing): the plugin must pass everything stock passes (issue 11);
* ``plugin failed``: one of the project's own tests (skipped on stock)
  failed or missing on the plugin;
* ``failed on both``: an upstream test stock does not pass either (listed,
  not a regression of the plugin);
* ``stock Nova defect``: failed on either run because its server met one
  of stock Nova's own defects, as the computes logged it
  (:mod:`gate.upstream_bugs`): listed with the instance and the bug,
  neither a defect of the plugin nor a failure of the gate;
* ``ok`` otherwise.

CLI (exit 1 on a DEFECT, a plugin failure, a failed check, or fewer than
``--min-passed`` upstream tests passing on both)::

    python -m gate.results --stock S.json --plugin P.json \
        [--checks C.json] [--out-dir gate/results] [--min-passed 40] \
        [--logs <cloud>/logs] [--stock-scope all|where-needed]

With ``--stock-scope where-needed`` the stock run covered only the tests
the plugin did not pass; stock's side of the others reads ``not needed``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from gate import upstream_bugs
from gate.cloud import layout as L
from gate.timing import render_md as timing_md

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, 'results')


def out_dir(profile: str) -> str:
    """Where a gate of ``profile`` writes its results: ``gate/results``
    for the default profile, ``gate/results/<profile>`` for another."""
    if profile == L.DEFAULT_PROFILE:
        return OUT_DIR
    return os.path.join(OUT_DIR, profile)
MIN_PASSED = 450
UPSTREAM_PREFIX = 'tempest.'
_ABSENT = {'status': 'missing', 'duration': 0.0,
           'reason': 'not in this run'}
#: Stock's side of a test the plugin passed, when stock ran only where
#: the judgement needs it (:data:`STOCK_SCOPES`).
_NOT_NEEDED = {'status': 'not needed', 'duration': 0.0,
               'reason': 'passed on the plugin: stock not run'}
#: How much of the selection stock runs: ``all`` of it (``make gate``:
#: the whole side-by-side report), or ``where-needed``, only the tests the
#: plugin did not pass (failed, skipped or missing; ``make test``'s gate
#: tier), which is all a verdict reads: a test the plugin passes is ``ok``
#: whatever stock does.
STOCK_SCOPES = ('all', 'where-needed')


_CHECK_STATUS = {'pass': 'passed', 'fail': 'failed', 'error': 'failed',
                 'skip': 'skipped'}


def normalize_check(check: Mapping[str, Any]) -> dict[str, Any]:
    """A check of either shape as ``{name, status, detail, seconds}``,
    status ``passed``, ``failed`` or ``skipped``."""
    status = str(check.get('status', 'failed'))
    return {
        'name': str(check.get('name') or check.get('check') or '?'),
        'status': _CHECK_STATUS.get(status, status),
        'raw_status': status,
        'detail': str(check.get('detail') or ''),
        'seconds': check.get('seconds'),
        # A check's own table (the move matrix's): {columns, rows}.
        **({'table': check['table']} if check.get('table') else {}),
    }


def _met_bug(result: Mapping[str, Any],
             hits: Mapping[str, str]) -> dict[str, Any]:
    """``result``, with ``upstream_bug`` and ``instance`` when it failed
    on a server the computes logged meeting a stock Nova defect (tempest
    names the server in its failure, or the test's requests the cloud
    answered with a 5xx name it: ``servers``)."""
    if result['status'] != 'failed' or not hits:
        return dict(result)
    reason = str(result.get('reason') or '')
    servers = set(result.get('servers') or ())
    for instance, bug in sorted(hits.items()):
        if instance in reason or instance in servers:
            return {**result, 'upstream_bug': bug, 'instance': instance}
    return dict(result)


def verdict(stock: Mapping[str, Any], plugin: Mapping[str, Any],
            upstream: bool = True) -> str:
    if stock.get('upstream_bug') or plugin.get('upstream_bug'):
        return 'stock Nova defect'
    if stock['status'] == 'passed' and plugin['status'] != 'passed':
        return 'DEFECT'
    if plugin['status'] in ('failed', 'missing') \
            and stock['status'] != 'passed':
        # The project's own tests (skipped on stock) must pass on the
        # plugin; an upstream test stock fails as well is no regression.
        return 'failed on both' if upstream else 'plugin failed'
    return 'ok'


def compare(stock: Mapping[str, Any], plugin: Mapping[str, Any],
            checks: Sequence[Mapping[str, Any]] = (),
            min_passed: int = MIN_PASSED,
            timing: Mapping[str, Any] | None = None,
            upstream_hits: Mapping[str, str] | None = None,
            stock_scope: str = 'all',
            ) -> dict[str, Any]:
    """The comparison of two runs (what latest.json holds);
    ``upstream_hits``: ``{instance uuid: bug}`` of
    :func:`gate.upstream_bugs.instances_hit_in`; ``stock_scope``: one of
    :data:`STOCK_SCOPES`, what ``stock`` ran."""
    if stock_scope not in STOCK_SCOPES:
        raise ValueError('stock_scope %r: one of %s'
                         % (stock_scope, ', '.join(STOCK_SCOPES)))
    checks = [normalize_check(c) for c in checks]
    hits = upstream_hits or {}
    s_tests = stock.get('tests', {})
    p_tests = plugin.get('tests', {})
    rows = []
    for test_id in sorted(set(s_tests) | set(p_tests)):
        p = _met_bug(p_tests.get(test_id, _ABSENT), hits)
        s_absent = (_NOT_NEEDED if stock_scope == 'where-needed'
                    and p['status'] == 'passed' else _ABSENT)
        s = _met_bug(s_tests.get(test_id, s_absent), hits)
        rows.append({'id': test_id, 'stock': s, 'plugin': p,
                     'verdict': verdict(
                         s, p, test_id.startswith(UPSTREAM_PREFIX))})
    upstream = [r for r in rows if r['id'].startswith(UPSTREAM_PREFIX)]
    # Where stock ran only where needed, a test it did not need to run
    # counts as passing on both: the plugin passed it.
    both = sum(1 for r in upstream
               if r['stock']['status'] in ('passed', 'not needed')
               and r['plugin']['status'] == 'passed')
    defects = [r['id'] for r in rows if r['verdict'] == 'DEFECT']
    plugin_failures = [r['id'] for r in rows
                       if r['verdict'] == 'plugin failed']
    # Both stock computes have one images_type: an upstream test stock
    # fails is stock's behaviour or the gate's, never the plugin's, and
    # would drop silently out of the comparison: flagged, with its reason.
    stock_failures = [r['id'] for r in upstream
                      if r['stock']['status'] in ('failed', 'missing')
                      and r['verdict'] != 'stock Nova defect']
    stock_defects = [
        {'id': r['id'], 'run': label, 'instance': r[label]['instance'],
         'bug': r[label]['upstream_bug']}
        for r in rows for label in ('stock', 'plugin')
        if r[label].get('upstream_bug')]
    failed_checks = [c['name'] for c in checks if c['status'] != 'passed']
    problems = []
    if defects:
        problems.append('%d DEFECT(s): passed on stock, not on the plugin: '
                        '%s' % (len(defects), ', '.join(defects)))
    if plugin_failures:
        problems.append('%d test(s) failed on the plugin: %s'
                        % (len(plugin_failures), ', '.join(plugin_failures)))
    if stock_failures:
        problems.append('%d upstream test(s) failed on stock (fix the gate, '
                        'or leave the test out of the selection saying why): '
                        '%s' % (len(stock_failures),
                                ', '.join(stock_failures)))
    if failed_checks:
        problems.append('%d gate check(s) failed: %s'
                        % (len(failed_checks), ', '.join(failed_checks)))
    if both < min_passed:
        problems.append('only %d upstream tests pass on both (at least %d '
                        'wanted)' % (both, min_passed))
    return {
        'generated': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()),
        'runs': {label: _run_summary(run, [r[label] for r in rows])
                 for label, run in (('stock', stock), ('plugin', plugin))},
        'summary': {
            'tests': len(rows),
            'stock_scope': stock_scope,
            'upstream_tests': len(upstream),
            'upstream_passed_on_both': both,
            'min_passed': min_passed,
            'defects': len(defects),
            'plugin_failures': len(plugin_failures),
            'stock_failures': len(stock_failures),
            'stock_nova_defects': len(stock_defects),
            'checks_failed': len(failed_checks),
            'ok': not problems,
            'problems': problems,
        },
        'defects': defects,
        'plugin_failures': plugin_failures,
        'stock_failures': stock_failures,
        'stock_nova_defects': stock_defects,
        'checks': checks,
        'timing': timing,
        'tests': rows,
    }


def _run_summary(run: Mapping[str, Any],
                 results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    counts = {s: 0 for s in ('passed', 'failed', 'skipped', 'missing')}
    for r in results:
        counts[r['status']] = counts.get(r['status'], 0) + 1
    return {
        'label': run.get('label'),
        'drivers': run.get('drivers', {}),
        'started': run.get('started'),
        'wall_seconds': run.get('wall_seconds'),
        'returncode': run.get('returncode'),
        'timed_out': run.get('timed_out', False),
        'counts': counts,
    }


def _cell(result: Mapping[str, Any]) -> str:
    status = result['status']
    shown = status.upper() if status in ('failed', 'missing') else status
    if status in ('passed', 'failed') and result.get('duration'):
        return '%s %.1fs' % (shown, result['duration'])
    return shown


def _md(text: str) -> str:
    return text.replace('|', '\\|').replace('\n', ' ').strip()


def _why(result: Mapping[str, Any]) -> str:
    """One line: a skip's reason, or a failure's last traceback line."""
    reason = str(result.get('reason') or '').strip()
    if result['status'] == 'failed':
        lines = [ln for ln in reason.splitlines() if ln.strip()]
        reason = lines[-1] if lines else ''
    return _md(reason)[:300]


def failures(cmp: Mapping[str, Any]) -> list[str]:
    """One line per test the gate fails on: its id, the run and the end
    of its reason, its last three lines (what CI shows of a red gate is
    the end of its output; an assertion's message may span lines)."""
    by_id = {r['id']: r for r in cmp['tests']}
    lines = []
    for key, label in (('defects', 'plugin'), ('plugin_failures', 'plugin'),
                       ('stock_failures', 'stock')):
        for test_id in cmp.get(key) or ():
            result = by_id[test_id][label]
            reason = [ln.strip() for ln in
                      str(result.get('reason') or '').splitlines()
                      if ln.strip()]
            lines.append('%s (%s, %s): %s' % (
                test_id, label, result['status'],
                ' | '.join(reason[-3:])[-1000:]))
    return lines


def table_md(name: str, table: Mapping[str, Any]) -> str:
    """A check's own table, under its name."""
    columns = table['columns']
    out = ['\n## Check %s\n\n' % name,
           '| %s |\n' % ' | '.join(columns),
           '|%s\n' % ('---|' * len(columns))]
    out += ['| %s |\n' % ' | '.join(_md(str(cell)) for cell in row)
            for row in table['rows']]
    return ''.join(out)


def render_md(cmp: Mapping[str, Any]) -> str:
    """latest.md."""
    summary = cmp['summary']
    runs = cmp['runs']
    where_needed = summary.get('stock_scope') == 'where-needed'
    out = ['# Gate results: stock Nova against nova-imgtype\n',
           '\nGenerated %s by `python -m gate.results`. %s\n' % (
               cmp['generated'],
               'Each tempest test ran against `imgtype.LibvirtDriver` '
               'computes; stock `libvirt.LibvirtDriver` computes of the same '
               'cloud then ran only the tests the plugin did not pass '
               '(`--stock where-needed`: a test the plugin passes is ok '
               'whatever stock does).' if where_needed else
               'Each tempest test ran once against stock '
               '`libvirt.LibvirtDriver` computes and once against '
               '`imgtype.LibvirtDriver` computes of the same cloud.'),
           '\n## Summary\n\n',
           '**%s**' % ('PASS' if summary['ok'] else 'FAIL')]
    out.append(': ' + '; '.join(summary['problems']) + '\n'
               if summary['problems'] else
               ': the plugin passes every test stock passes.\n')
    out.append('\n| | stock | plugin |\n|---|---|---|\n')
    keys = ['passed', 'failed', 'skipped', 'missing']
    if where_needed:
        keys.append('not needed')
    for key in keys:
        out.append('| %s | %d | %d |\n' % (
            key, runs['stock']['counts'].get(key, 0),
            runs['plugin']['counts'].get(key, 0)))
    out.append('| wall time | %s s | %s s |\n' % (
        runs['stock']['wall_seconds'], runs['plugin']['wall_seconds']))
    out.append('\nUpstream tempest tests passing on both%s: **%d** '
               '(at least %d wanted) of %d upstream tests, %d tests in all.'
               '\n' % (' (or on the plugin, stock not needed)'
                       if where_needed else '',
                       summary['upstream_passed_on_both'],
                       summary['min_passed'], summary['upstream_tests'],
                       summary['tests']))
    by_id = {r['id']: r for r in cmp['tests']}
    if cmp['defects']:
        out.append('\n## Defects\n\n')
        for test_id in cmp['defects']:
            p = by_id[test_id]['plugin']
            out.append('- DEFECT: `%s` passes on stock, %s on the plugin: '
                       '%s\n' % (test_id, p['status'], _why(p)))
    if cmp['plugin_failures']:
        out.append('\n## Failed on the plugin\n\n')
        for test_id in cmp['plugin_failures']:
            p = by_id[test_id]['plugin']
            out.append('- `%s`: %s\n' % (test_id, _why(p)))
    if cmp.get('stock_failures'):
        out.append('\n## Failed on stock\n\n')
        for test_id in cmp['stock_failures']:
            s = by_id[test_id]['stock']
            out.append('- `%s`: %s %s\n' % (test_id, s['status'], _why(s)))
    if cmp.get('stock_nova_defects'):
        out.append('\n## Stock Nova defects met\n\nNeither run\'s driver: '
                   'the computes logged stock Nova failing these servers '
                   '(`gate/upstream_bugs.py`).\n\n')
        for hit in cmp['stock_nova_defects']:
            out.append('- `%s` (%s): server %s, %s: %s\n' % (
                hit['id'], hit['run'], hit['instance'], hit['bug'],
                upstream_bugs.title(hit['bug'])))
    if cmp['checks']:
        out.append('\n## Gate checks\n\n| check | status | detail |\n'
                   '|---|---|---|\n')
        for check in cmp['checks']:
            detail = check['detail'].strip().splitlines()
            out.append('| %s | %s | %s |\n' % (
                _md(check['name']), check['raw_status'].upper()
                if check['status'] != 'passed' else check['raw_status'],
                _md(detail[0] if detail else '')[:300]))
        for check in cmp['checks']:
            if check.get('table'):
                out.append(table_md(check['name'], check['table']))
    if cmp.get('timing'):
        out.append(timing_md(cmp['timing']))
    out.append('\n## Per test\n\n| test | stock | plugin | verdict |\n'
               '|---|---|---|---|\n')
    for row in cmp['tests']:
        out.append('| `%s` | %s | %s | %s |\n' % (
            row['id'], _cell(row['stock']), _cell(row['plugin']),
            '**DEFECT**' if row['verdict'] == 'DEFECT' else
            row['verdict'] if row['verdict'] != 'ok' else ''))
    reasons = [(row['id'], label, row[label]) for row in cmp['tests']
               for label in ('stock', 'plugin')
               if row[label]['status'] not in ('passed', 'not needed')
               and _why(row[label])]
    if reasons:
        out.append('\n## Why not passed\n\n')
        for test_id, label, result in reasons:
            out.append('- `%s` (%s, %s): %s\n' % (
                test_id, label, result['status'], _why(result)))
    return ''.join(out)


def write(stock_path: str, plugin_path: str, out_dir: str = OUT_DIR,
          checks_path: str | None = None,
          min_passed: int = MIN_PASSED,
          timing: Mapping[str, Any] | None = None,
          logs: str | None = None,
          stock_scope: str = 'all',
          ) -> tuple[str, str, dict[str, Any]]:
    """Write latest.md and latest.json; (md path, json path, comparison);
    ``logs``: the cloud's log directory, read for stock Nova's own
    defects (:mod:`gate.upstream_bugs`); ``stock_scope``: what the stock
    run covered (:data:`STOCK_SCOPES`)."""
    with open(stock_path) as f:
        stock = json.load(f)
    with open(plugin_path) as f:
        plugin = json.load(f)
    checks: list[dict[str, Any]] = []
    if checks_path:
        with open(checks_path) as f:
            checks = json.load(f)
    hits = upstream_bugs.instances_hit_in(logs) if logs else None
    cmp = compare(stock, plugin, checks, min_passed, timing, hits,
                  stock_scope)
    os.makedirs(out_dir, exist_ok=True)
    md_path = os.path.join(out_dir, 'latest.md')
    json_path = os.path.join(out_dir, 'latest.json')
    with open(md_path, 'w') as f:
        f.write(render_md(cmp))
    with open(json_path, 'w') as f:
        json.dump(cmp, f, indent=1, sort_keys=True)
        f.write('\n')
    append_history(os.path.join(out_dir, 'history.md'), cmp)
    return md_path, json_path, cmp


HISTORY_HEAD = (
    '# Gate runs, one line each (flakiness is a defect)\n\n'
    'Appended by `python -m gate.results` at every whole gate run.\n\n'
    '| generated | commit | verdict | plugin passed/failed | stock '
    'passed/failed | checks failed |\n'
    '|---|---|---|---|---|---|\n')


def _commit() -> str:
    """The commit the gate ran from (and ``+`` when the tree differs)."""
    def git(*args: str) -> str:
        proc = subprocess.run(['git', *args], capture_output=True,
                              text=True, check=False,
                              cwd=os.path.dirname(os.path.abspath(__file__)))
        return proc.stdout.strip() if proc.returncode == 0 else ''
    head = git('rev-parse', '--short', 'HEAD')
    dirty = git('status', '--porcelain', '--untracked-files=no', '--',
                ':(top,exclude)gate/results')
    return (head or '-') + ('+' if dirty else '')


def append_history(path: str, cmp: dict[str, Any]) -> None:
    """One line for this run in ``history.md``."""
    summary, runs = cmp['summary'], cmp['runs']
    new = not os.path.exists(path)
    with open(path, 'a') as f:
        if new:
            f.write(HISTORY_HEAD)
        f.write('| %s | %s | %s | %d/%d | %d/%d%s | %d |\n' % (
            cmp['generated'], _commit(),
            'PASS' if summary['ok'] else 'FAIL',
            runs['plugin']['counts']['passed'],
            runs['plugin']['counts']['failed'],
            runs['stock']['counts']['passed'],
            runs['stock']['counts']['failed'],
            ' (where needed)'
            if summary.get('stock_scope') == 'where-needed' else '',
            summary['checks_failed']))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog='python -m gate.results')
    parser.add_argument('--stock', required=True)
    parser.add_argument('--plugin', required=True)
    parser.add_argument('--checks')
    parser.add_argument('--out-dir', default=OUT_DIR)
    parser.add_argument('--min-passed', type=int, default=MIN_PASSED)
    parser.add_argument('--logs', help="the cloud's log directory (stock "
                        "Nova's own defects are read there)")
    parser.add_argument('--stock-scope', choices=STOCK_SCOPES,
                        default='all', help='what the stock run covered '
                        '(default: %(default)s)')
    args = parser.parse_args(argv)
    md_path, json_path, cmp = write(args.stock, args.plugin, args.out_dir,
                                    args.checks, args.min_passed,
                                    logs=args.logs,
                                    stock_scope=args.stock_scope)
    summary = cmp['summary']
    print('%s: %s (%d upstream tests pass on both)' % (
        md_path, 'PASS' if summary['ok'] else
        'FAIL: ' + '; '.join(summary['problems']),
        summary['upstream_passed_on_both']))
    return 0 if summary['ok'] else 1


if __name__ == '__main__':
    sys.exit(main())
