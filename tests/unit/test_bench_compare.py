"""The before/after comparison of ``make bench-compare``: which figures are
paired, what counts as slower, and that a commit's tree is what runs."""

from __future__ import annotations

import ast
import os
import subprocess

import pytest

from benchmarks import compare

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def _disk(method, median_s, image='1 GiB raw'):
    return {'benchmark': 'disk creation', 'image': image, 'method': method,
            'median_s': median_s, 'vs_stock_qcow2': 1.0}


def test_a_plugin_figure_more_than_the_limit_slower_is_flagged():
    before = compare.rounds([[_disk('stock Flat', 1.0),
                              _disk('pool COW', 0.100),
                              _disk('pool copy', 0.100)]])
    after = compare.rounds([[_disk('stock Flat', 1.05),
                             _disk('pool COW', 0.111),
                             _disk('pool copy', 0.109)]])
    rows = {r['row']: r for r in compare.compare(before, after)}
    assert rows['1 GiB raw, pool COW']['slower']
    assert not rows['1 GiB raw, pool copy']['slower']
    # Stock's rows are the run's noise, never a regression of the plugin.
    assert not rows['1 GiB raw, stock Flat']['slower']
    assert rows['1 GiB raw, stock Flat']['stock']
    assert rows['1 GiB raw, pool COW']['stock_drift'] == pytest.approx(1.05)


def test_rows_are_paired_by_their_names_not_their_order():
    before = compare.rounds([[_disk('pool COW', 0.1, '10 GiB raw'),
                              _disk('pool COW', 1.0, '1 GiB raw')]])
    after = compare.rounds([[_disk('pool COW', 1.0, '1 GiB raw'),
                             _disk('pool COW', 0.1, '10 GiB raw'),
                             _disk('pool COW', 5.0, '100 GiB raw')]])
    rows = compare.compare(before, after)
    # The row only "now" has is not compared with anything.
    assert [(r['row'], r['ratio']) for r in rows] == [
        ('1 GiB raw, pool COW', 1.0), ('10 GiB raw, pool COW', 1.0)]


def test_a_ratio_only_one_round_makes_is_noise_not_slower():
    """Slower means slower in every round: a figure whose rounds overlap
    the base's is not flagged, however far apart the medians; one whose
    rounds are all slower is, by its median."""
    before = compare.rounds([
        [_disk('pool COW', 0.100), _disk('pool copy', 0.100)],
        [_disk('pool COW', 0.100), _disk('pool copy', 0.130)],
        [_disk('pool COW', 0.100), _disk('pool copy', 0.100)]])
    after = compare.rounds([
        [_disk('pool COW', 0.140), _disk('pool copy', 0.125)],
        [_disk('pool COW', 0.115), _disk('pool copy', 0.120)],
        [_disk('pool COW', 0.101), _disk('pool copy', 0.140)]])
    rows = {r['row']: r for r in compare.compare(before, after)}
    cow, copy = rows['1 GiB raw, pool COW'], rows['1 GiB raw, pool copy']
    assert cow['ratio'] == pytest.approx(1.15)
    assert cow['rounds_apart'] and cow['slower']
    assert cow['after_rounds_s'] == [0.140, 0.115, 0.101]
    # 1.25x by the medians, but one round before (0.130) is slower than
    # two after: not reproduced.
    assert copy['ratio'] == pytest.approx(1.25)
    assert not copy['rounds_apart'] and not copy['slower']
    md = compare.to_markdown(compare.compare(before, after), 'a', 'b', 3,
                             {})
    lines = {line.split('|')[1].strip(): [c.strip() for c in
                                          line.split('|')[2:-1]]
             for line in md.splitlines() if line.startswith('| 1 GiB')}
    assert lines['1 GiB raw, pool COW'][3:] == ['yes', '-', '**slower**']
    assert lines['1 GiB raw, pool copy'][3:] == ['no', '-', 'ok']
    assert '1 of the plugin\'s slower' in md


def test_rounds_give_the_median_of_their_medians():
    runs = compare.rounds([[_disk('pool COW', 0.3)], [_disk('pool COW', 0.1)],
                           [_disk('pool COW', 0.2)]])
    assert runs == {
        ('disk creation', '1 GiB raw', 'pool COW'): [0.3, 0.1, 0.2]}
    [row] = compare.compare(runs, runs)
    assert row['after_s'] == row['before_s'] == 0.2


def test_profile_is_compared_by_its_total_only_and_ms_become_s():
    rows = [{'benchmark': 'profile', 'scenario': 'pool COW volume, warm',
             'step': step, 'calls': 1, 'median_ms': ms, 'runs': 7}
            for step, ms in (('libvirt: virStoragePool.createXML', 12.0),
                             ('total (wall)', 16.0))]
    assert compare.rounds([rows]) == {
        ('profile', 'pool COW volume, warm', 'total (wall)'): [0.016]}


def _benchmarks() -> dict[str, str]:
    """``python -m benchmarks``' names and row labels, read from its
    source (importing it needs Nova 34)."""
    with open(os.path.join(ROOT, 'benchmarks', '__main__.py')) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                and getattr(node.targets[0], 'id', '') == 'BENCHMARKS'):
            return {ast.literal_eval(k): ast.literal_eval(v.elts[1])
                    for k, v in zip(node.value.keys, node.value.values,
                                    strict=True)
                    if k is not None and isinstance(v, ast.Tuple)}
    raise AssertionError('no BENCHMARKS in benchmarks/__main__.py')


def test_every_benchmark_has_the_fields_naming_its_rows():
    benchmarks = _benchmarks()
    assert len(benchmarks) == 8
    assert set(compare.NAMES) == set(benchmarks)
    assert set(compare.IDENTITY) == set(benchmarks.values())


def test_a_commit_is_exported_as_its_tree_without_its_results(tmp_path):
    into = str(tmp_path / 'tree')
    commit = compare.export('HEAD', into)
    head = subprocess.run(['git', '-C', ROOT, 'rev-parse', 'HEAD'],
                          check=True, capture_output=True,
                          text=True).stdout.strip()
    assert commit == head
    assert os.path.isfile(os.path.join(into, 'benchmarks', '__main__.py'))
    assert not os.path.exists(os.path.join(into, 'benchmarks', 'results'))


def test_an_unknown_commit_is_refused(tmp_path):
    with pytest.raises(subprocess.CalledProcessError):
        compare.export('no-such-commit-anywhere', str(tmp_path / 'x'))
