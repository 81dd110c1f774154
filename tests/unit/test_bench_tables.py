"""The benchmarks' Markdown tables: one helper (prettytable's Markdown
style), every benchmark's section drawn from the committed results."""

import importlib.util
import json
import pathlib

import pytest

from benchmarks import compare
from benchmarks import tables

#: The benchmarks run on the default release only (make bench: Nova 34,
#: whose nova.thread_pool_factory they import): on Nova 33 (make test
#: NOVA=2026.1) their modules do not import. The helper and the comparison
#: import none of Nova.
ON_THE_BENCHMARKS_NOVA = (
    importlib.util.find_spec('nova.thread_pool_factory') is not None)

RESULTS = pathlib.Path(__file__).resolve().parents[2] / (
    'benchmarks/results')


def _tables(markdown):
    """Each table of ``markdown``: its lines split into cells."""
    found, current = [], []
    for line in markdown.splitlines() + ['']:
        if line.startswith('|'):
            current.append([c.strip() for c in line.strip('|').split('|')])
        elif current:
            found.append(current)
            current = []
    return found


def test_a_table_aligns_words_left_and_figures_right():
    text = tables.markdown(['disk', 'median s'],
                           [['raw', '1.2500'], ['qcow2', '0.5000']],
                           left=['disk'])
    [table] = _tables(text)
    header, separator, *rows = table
    assert header == ['disk', 'median s']
    assert separator[0].startswith(':') and not separator[0].endswith(':')
    assert separator[1].endswith(':') and not separator[1].startswith(':')
    assert rows == [['raw', '1.2500'], ['qcow2', '0.5000']]


def _check(table, data_rows=None):
    header, separator, *rows = table
    assert all(set(cell) <= set(':-') and cell for cell in separator)
    assert all(len(row) == len(header) for row in [separator] + rows)
    if data_rows is not None:
        assert len(rows) == data_rows


@pytest.mark.skipif(not ON_THE_BENCHMARKS_NOVA,
                    reason='the benchmarks run on Nova 34 (make bench)')
def test_every_benchmark_draws_its_committed_rows():
    # Imported here: benchmarks/__main__ sets Nova's threading mode first.
    from benchmarks import __main__ as bench
    results = json.loads((RESULTS / 'latest.json').read_text())['results']
    drawn = 0
    for module, label in bench.BENCHMARKS.values():
        rows = [r for r in results if r['benchmark'] == label]
        if not rows:
            continue
        found = _tables(module.to_markdown(rows))
        assert found, label
        for table in found:
            _check(table)
        # every row measured is in the first table (but the profile's,
        # which leaves out steps under 0.05 ms, and the moves', which
        # are two tables, cold and live)
        if label not in ('profile', 'moves'):
            _check(found[0], len(rows))
        else:
            assert sum(len(t) - 2 for t in found) <= len(rows)
        drawn += 1
    assert drawn >= 7


def test_the_comparison_draws_a_table_per_benchmark():
    saved = json.loads((RESULTS / 'compare.json').read_text())
    rows = saved['rows']
    text = compare.to_markdown(rows, saved['base'], saved['head'],
                               saved['rounds'], saved['machine'],
                               saved['limit'])
    found = _tables(text)
    labels = list(dict.fromkeys(r['benchmark'] for r in rows))
    assert len(found) == len(labels)
    for table, label in zip(found, labels, strict=True):
        _check(table, len([r for r in rows if r['benchmark'] == label]))
        assert table[0][-1] == 'judged'
    judged = [row[-1] for table in found for row in table[2:]]
    assert judged.count('**slower**') == len(
        [r for r in rows if r['slower']])
