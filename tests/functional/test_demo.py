"""The demo (``make demo``), run whole.

Real: stock Nova's API, conductor, scheduler (our request filter loaded
through ``available_filters``), placement, compute managers, our driver and
stock's, qemu-img, every file, the pools on a throwaway libvirtd. Fake, as in
the rest of this tier: libvirt domains (fakelibvirt) and Glance's API
(GlanceFixture serving the real image bytes).
"""

from __future__ import annotations

import io

from nova_imgtype_testing import demo


def _rows(rows: list[demo.Row], image: str, cloud: str) -> list[demo.Row]:
    return [r for r in rows if r.image.startswith(image + ' ') and
            r.cloud == cloud]


def test_demo_boots_the_matrix_and_shows_what_the_plugin_saves() -> None:
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

    table = demo.format_rows(rows)
    # Borders, the header, its rule and one line per row.
    assert table.count('\n') == len(rows) + 3
    assert 'host traits' in table.splitlines()[1]


def test_run_prints_the_table_and_the_nodes(monkeypatch) -> None:
    row = demo.Row('nova-imgtype', 'raw (64 MiB)', 'any', 'node-mapped',
                   'ACTIVE', 'raw', 'raw', 'no', 64 * demo.MiB, 0.5,
                   'boots raw; native raw')
    monkeypatch.setattr(demo, 'collect', lambda progress: ([row], []))
    out = io.StringIO()
    assert demo.run(out) == 0
    text = out.getvalue()
    assert 'node-pools' in text and demo.STOCK_NODE in text
    assert '64.0 MiB' in text and '0.500 s' in text
    monkeypatch.setattr(demo, 'collect',
                        lambda progress: ([row], ['Traceback: boom']))
    out = io.StringIO()
    assert demo.run(out) == 1
    assert 'The demo failed:\nTraceback: boom' in out.getvalue()
