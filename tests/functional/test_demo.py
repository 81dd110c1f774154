"""The demo (``make demo``), run whole.

Real: stock Nova's API, conductor, scheduler (our request filter loaded
through ``available_filters``), placement, compute managers, our driver and
stock's, qemu-img, every file, the pools on a throwaway libvirtd. Fake, as in
the rest of this tier: libvirt domains (fakelibvirt) and Glance's API
(GlanceFixture serving the real image bytes).
"""

from __future__ import annotations

import io
import unittest

import pytest

from nova_imgtype_testing import demo


def _rows(rows: list[demo.Row], image: str, cloud: str) -> list[demo.Row]:
    return [r for r in rows if r.image.startswith(image + ' ') and
            r.cloud == cloud]


def test_demo_boots_the_matrix_and_shows_what_the_plugin_saves(
        monkeypatch) -> None:
    # The demo's matrix, smaller: two boots a node (a median of two
    # still), images of a quarter of the demo's size (converted, the qcow2
    # image's 96 MiB of data is still ten times its native cache file). The
    # demo's own: 39 boots, three copies of images of up to 512 MiB (384
    # MiB of data), three minutes of CI twice (once per Nova release) for
    # the same table.
    monkeypatch.setattr(demo, 'RUNS', 2)
    monkeypatch.setattr(demo, 'IMAGES', {
        fmt: (size // 4, data // 4) for fmt, (size, data)
        in demo.IMAGES.items()})
    progress: list[str] = []
    rows, failed = demo.collect(progress.append)
    assert failed == []
    assert any('libvirtd up' in line for line in progress), progress

    # qcow2: used as it is where mapped (no conversion, a small cache
    # file), converted to raw on the converting node and on stock Nova.
    native = {r.host: r for r in _rows(rows, 'qcow2', 'nova-imgtype')
              if r.requested != 'any'}
    stock = _rows(rows, 'qcow2', 'stock Nova')
    assert {h: (r.status, r.template, r.converted)
            for h, r in native.items()} == {
        'node-mapped': ('ACTIVE', 'qcow2', 'no'),
        'node-pools': ('ACTIVE', 'qcow2', 'no'),
        'node-convert': ('ACTIVE', 'raw', 'yes')}
    assert [(r.status, r.template, r.converted) for r in stock] == [
        ('ACTIVE', 'raw', 'yes')]
    assert native['node-pools'].backend == 'qcow2 (pool)'
    small = max(native[h].cache_bytes or 0
                for h in ('node-mapped', 'node-pools'))
    assert 0 < small * 10 < (stock[0].cache_bytes or 0)
    # The same raw conversion (to a file system block or so).
    converted = native['node-convert'].cache_bytes or 0
    assert abs(converted - (stock[0].cache_bytes or 0)) < demo.MiB
    # The host traits shown are what placement holds for the node.
    assert 'native qcow2,raw' in native['node-mapped'].traits
    assert 'native raw' in native['node-convert'].traits

    # A format nobody can use: the request filter stops it at the
    # scheduler; stock Nova sends it to a compute, where the build fails.
    assert {r.status for r in _rows(rows, 'ploop', 'nova-imgtype')} == {
        'ERROR: No valid host was found.'}
    (stock_ploop,) = _rows(rows, 'ploop', 'stock Nova')
    assert stock_ploop.status.startswith('ERROR: ')
    assert 'No valid host' not in stock_ploop.status

    # A node asked: RUNS first boots (each from its own copy of the
    # image), their median and spread shown; "any": one boot.
    for r in rows:
        if r.status != 'ACTIVE':
            continue
        runs = 1 if (r.requested == 'any' and r.cloud == 'nova-imgtype') \
            else demo.RUNS
        assert len(r.prep) == runs, r

    table = demo.format_rows(rows)
    # Borders, the header, its rule and one line per row, in a terminal
    # of 120 columns; an error by its number, said below it.
    assert table.count('\n') == len(rows) + 3
    assert 'disk prep' in table.splitlines()[1]
    assert max(len(line) for line in table.splitlines()) <= demo.WIDTH
    assert '(1) ERROR: No valid host was found.' in demo.notes(rows)


def test_run_prints_the_table_and_the_nodes(monkeypatch) -> None:
    row = demo.Row('nova-imgtype', 'raw (64 MiB)', 'node-mapped',
                   'node-mapped', 'ACTIVE', 'raw', 'raw', 'no',
                   64 * demo.MiB, [0.5, 0.4, 0.7], 'boots raw; native raw')
    monkeypatch.setattr(demo, 'collect', lambda progress: ([row], []))
    out = io.StringIO()
    assert demo.run(out, log=False) == 0
    text = out.getvalue()
    assert 'node-pools' in text and demo.STOCK_NODE in text
    assert '64.0 MiB' in text and '0.50 s (0.40-0.70)' in text
    assert 'node-mapped   boots raw; native raw' in text
    monkeypatch.setattr(demo, 'collect',
                        lambda progress: ([row], ['Traceback: boom']))
    out = io.StringIO()
    assert demo.run(out, log=False) == 1
    assert 'The demo failed:\nTraceback: boom' in out.getvalue()


def test_an_interrupt_is_one_line(monkeypatch) -> None:
    def interrupted(progress):
        raise KeyboardInterrupt
    monkeypatch.setattr(demo, 'collect', interrupted)
    out = io.StringIO()
    assert demo.run(out, log=False) == 130
    assert out.getvalue() == (
        '\nInterrupted: the demo stopped and removed what it made.\n')


def test_an_interrupt_still_cleans_up(monkeypatch) -> None:
    """unittest runs a test's clean-ups at its end, which an interrupt
    skips: collect() runs them, and stops its libvirtd, before the
    interrupt goes on."""
    cleaned = []

    class Interrupted(unittest.TestCase):
        def runTest(self):
            self.addCleanup(cleaned.append, 'services and files')
            raise KeyboardInterrupt

    monkeypatch.setattr(demo, 'make_demo_case',
                        lambda *args: Interrupted())
    from nova_imgtype_testing import libvirtd
    daemons = []
    real_start = libvirtd.start_libvirtd

    def start():
        daemons.append(real_start())
        return daemons[-1]
    monkeypatch.setattr(libvirtd, 'start_libvirtd', start)
    with pytest.raises(KeyboardInterrupt):
        demo.collect(lambda msg: None)
    assert cleaned == ['services and files']
    [daemon] = daemons
    assert daemon.proc.poll() is not None

