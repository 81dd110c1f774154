"""``python -m benchmarks.compare BASE [benchmark ...] [--rounds N]``: the
plugin's figures now against a base commit's, in one run.

Both commits are exported with ``git archive`` (HEAD by default for
"now", ``--head REV`` for another) to a temporary directory, and each
benchmark runs there as ``python -m benchmarks <name>`` with that tree
first on ``PYTHONPATH``: the same venv, the same stock Nova and the same
machine, the two sides alternated benchmark by benchmark (base first, then
now; the other way round in the next benchmark and round) so that a slow
patch of the machine falls on both. Stock's rows run the same stock code
on both sides: their ratio is the run's own noise, shown next to the
plugin's.

Writes ``results/compare.{md,json}`` (``--output NAME``: ``NAME.*``; the
json also holds every row each side measured, under ``runs``);
exits 1 when a plugin figure is more than ``LIMIT`` slower than the
base's (after/before above 1 + LIMIT) in a way that reproduces: every
round of it now slower than every round of it before (with one round,
that is the ratio alone), so it can be a check. A figure of a few
milliseconds moves by 10-20% between runs of the same code (stock's rows
show it): a ratio one round of the two sides makes and the next round
does not is the machine's noise, not a regression. The
profile benchmark is compared by its total per disk only (its steps are
a breakdown of it).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from collections.abc import Sequence
from typing import Any

from benchmarks import tables

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

#: How much slower than the base a plugin figure may be (issue 27).
LIMIT = 0.10

#: Benchmark label -> the fields that name one row of it.
IDENTITY: dict[str, tuple[str, ...]] = {
    'disk creation': ('image', 'method'),
    'scheduling': ('compute_nodes', 'config'),
    'template handlers': ('image', 'handler'),
    'concurrent spawns': ('image', 'config', 'spawns'),
    'image cache audit': ('config', 'disks'),
    'time to first disk': ('image', 'cache', 'method'),
    'moves': ('case', 'side'),
    'profile': ('scenario', 'step'),
}

#: Benchmark command-line names, in ``python -m benchmarks``'s order.
NAMES = ('disk', 'scheduling', 'handlers', 'concurrency', 'audit',
         'first-disk', 'moves', 'profile')

Row = dict[str, Any]
Key = tuple[Any, ...]


def figure(row: Row) -> float | None:
    """A row's median time in seconds, or None if it is not compared."""
    if row.get('benchmark') == 'profile' and row.get('step') != 'total (wall)':
        return None
    if 'median_s' in row:
        return float(row['median_s'])
    if 'median_ms' in row:
        return float(row['median_ms']) / 1000.0
    return None


def key(row: Row) -> Key:
    label = row['benchmark']
    return (label,) + tuple(row.get(f) for f in IDENTITY.get(label, ()))


def rounds(runs: Iterable[Sequence[Row]]) -> dict[Key, list[float]]:
    """Each row's figure in each round of one side, in round order."""
    seen: dict[Key, list[float]] = {}
    for rows in runs:
        for row in rows:
            value = figure(row)
            if value is not None:
                seen.setdefault(key(row), []).append(value)
    return seen


def compare(before: dict[Key, list[float]], after: dict[Key, list[float]],
            limit: float = LIMIT) -> list[Row]:
    """One row per figure both sides have, in the order ``after`` has;
    ``before`` and ``after`` hold each figure's rounds
    (:func:`rounds`)."""
    out: list[Row] = []
    stock_drift: dict[str, list[float]] = {}
    medians = {side: {k: statistics.median(v) for k, v in figs.items()}
               for side, figs in (('before', before), ('after', after))}
    for k, now in medians['after'].items():
        then = medians['before'].get(k)
        if then is not None and then > 0 and _stock_key(k):
            stock_drift.setdefault(k[0], []).append(now / then)
    for k, now in medians['after'].items():
        if k not in before:
            continue
        then = medians['before'][k]
        ratio = now / then if then > 0 else float('inf')
        stock = _stock_key(k)
        drift = stock_drift.get(k[0])
        # Every round now slower than every round before: the ratio
        # reproduces, it is not one round's noise.
        apart = min(after[k]) > max(before[k])
        out.append({
            'benchmark': k[0],
            'row': ', '.join(str(p) for p in k[1:]),
            'stock': stock,
            'before_s': then,
            'after_s': now,
            'before_rounds_s': list(before[k]),
            'after_rounds_s': list(after[k]),
            'ratio': ratio,
            'rounds_apart': apart,
            'stock_drift': statistics.median(drift) if drift else None,
            'slower': (not stock) and ratio > 1 + limit and apart,
        })
    return out


def _stock_key(k: Key) -> bool:
    """Whether a row measures stock's code (one of its names says so)."""
    return any(str(p).startswith('stock') for p in k[1:])


def to_markdown(rows: list[Row], base: str, head: str, rounds: int,
                info: dict[str, str], limit: float = LIMIT) -> str:
    slower = [r for r in rows if r['slower']]
    lines = [
        '# nova-imgtype benchmarks: %s against %s' % (head, base), '',
        'Machine: ' + ', '.join('%s %s' % kv for kv in info.items()), '',
        'Reproduce with `make bench-compare BASE=%s` (`python -m '
        'benchmarks.compare %s --head %s --rounds %d`). Both commits run '
        'in one run, alternated benchmark by benchmark, %d round(s) each; '
        'a figure is the median of its rounds\' medians. A plugin row is '
        '**slower** when its `after/before` is above %.2f and the rounds '
        'are apart (every round after slower than every round before: '
        'the ratio reproduces); `rounds apart` is that second condition. '
        'Stock\'s rows run the same code on both sides: `stock drift` '
        '(the median of their after/before in that benchmark) is the '
        'run\'s own noise.'
        % (base, base, head, rounds, rounds, 1 + limit), '',
        '%d figures compared, %d of the plugin\'s slower than before.'
        % (len(rows), len(slower)), '']
    for label in dict.fromkeys(r['benchmark'] for r in rows):
        lines += ['', '## %s' % label, '', tables.markdown(
            ['row', 'before s', 'after s', 'after/before', 'rounds apart',
             'stock drift', 'judged'],
            ([r['row'], '%.4f' % r['before_s'], '%.4f' % r['after_s'],
              '%.3f' % r['ratio'],
              # Results from before the rule kept no rounds.
              '-' if 'rounds_apart' not in r
              else 'yes' if r['rounds_apart'] else 'no',
              '-' if r['stock_drift'] is None
              else '%.3f' % r['stock_drift'],
              'stock' if r['stock'] else (
                  '**slower**' if r['slower'] else 'ok')]
             for r in rows if r['benchmark'] == label),
            left=['row', 'judged'])]
    return '\n'.join(lines) + '\n'


def export(rev: str, into: str) -> str:
    """``rev``'s tree in ``into``; its full commit id."""
    commit = subprocess.run(
        ['git', '-C', ROOT, 'rev-parse', '--verify', rev + '^{commit}'],
        check=True, capture_output=True, text=True).stdout.strip()
    os.makedirs(into)
    # Through a file, not a pipe between the two: under eventlet (Nova 33)
    # a pipe's end handed to another process is non-blocking.
    tar = os.path.join(into, '.export.tar')
    subprocess.run(['git', '-C', ROOT, 'archive', '-o', tar, commit],
                   check=True)
    subprocess.run(['tar', '-x', '-f', tar, '-C', into], check=True)
    os.unlink(tar)
    # Start from no results: each round's are its own.
    shutil.rmtree(os.path.join(into, 'benchmarks', 'results'),
                  ignore_errors=True)
    return commit


def run_one(tree: str, name: str) -> list[Row]:
    """``python -m benchmarks <name>`` in ``tree``: the rows it measured."""
    env = dict(os.environ, PYTHONPATH=tree)
    results = os.path.join(tree, 'benchmarks', 'results', 'latest.json')
    if os.path.exists(results):
        os.unlink(results)
    subprocess.run([sys.executable, '-m', 'benchmarks', name], cwd=tree,
                   env=env, check=True, stdout=subprocess.DEVNULL)
    with open(results) as f:
        rows: list[Row] = json.load(f)['results']
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog='python -m benchmarks.compare', description=__doc__.split(
            '\n\n')[0])
    parser.add_argument('base', help='the commit to compare against')
    parser.add_argument('names', nargs='*', metavar='benchmark',
                        help='benchmarks to run (all by default): %s'
                        % ', '.join(NAMES))
    parser.add_argument('--head', default='HEAD',
                        help='the commit whose figures are "now"')
    parser.add_argument('--rounds', type=int, default=1,
                        help='runs of each benchmark on each side')
    parser.add_argument('--output', default='compare', metavar='NAME',
                        help='results/NAME.{md,json} (default: compare)')
    args = parser.parse_args(argv)
    names = args.names or list(NAMES)
    unknown = sorted(set(names) - set(NAMES))
    if unknown or args.rounds < 1:
        parser.error('unknown benchmark(s) %s' % ', '.join(unknown)
                     if unknown else '--rounds must be 1 or more')
    from benchmarks.__main__ import machine  # noqa: PLC0415

    info = machine()
    work = tempfile.mkdtemp(prefix='bench-compare-')
    try:
        base = export(args.base, os.path.join(work, 'base'))
        head = export(args.head, os.path.join(work, 'head'))
        trees = {'base': os.path.join(work, 'base'),
                 'head': os.path.join(work, 'head')}
        runs: dict[str, list[list[Row]]] = {'base': [], 'head': []}
        turn = 0
        for round_ in range(args.rounds):
            for name in names:
                order = ('base', 'head') if turn % 2 == 0 else (
                    'head', 'base')
                turn += 1
                for side in order:
                    start = time.perf_counter()
                    runs[side].append(run_one(trees[side], name))
                    sys.stderr.write(
                        'bench-compare: round %d %s on %s took %.0f s\n' % (
                            round_ + 1, name, side,
                            time.perf_counter() - start))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = compare(rounds(runs['base']), rounds(runs['head']))
    info['date'] = datetime.datetime.now(datetime.UTC).isoformat(
        timespec='seconds')
    results = os.path.join(HERE, 'results')
    os.makedirs(results, exist_ok=True)
    with open(os.path.join(results, args.output + '.json'), 'w') as f:
        # 'runs': every row each side measured (stock's next to the
        # plugin's), for what the comparison does not show, e.g. each
        # plugin figure against stock's on the head.
        json.dump({'machine': info, 'base': base, 'head': head,
                   'rounds': args.rounds, 'limit': LIMIT, 'rows': rows,
                   'runs': runs}, f, indent=2)
    md = to_markdown(rows, base[:7], head[:7], args.rounds, info)
    with open(os.path.join(results, args.output + '.md'), 'w') as f:
        f.write(md)
    sys.stdout.write(md)
    return 1 if any(r['slower'] for r in rows) else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
