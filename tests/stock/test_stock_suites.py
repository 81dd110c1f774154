"""Stock Nova's own libvirt suites judge our driver.

Each suite of :data:`tests.stock.compare.SUITES` (shipped in the installed
Nova's wheel) runs as shipped, then with ``imgtype.LibvirtDriver`` in the
place of stock's class (:mod:`tests.stock.swap`), with nothing configured
that differs from stock (``plain``) and with our defaults (``defaults``).
A test that passes as shipped and fails with our driver must be listed in
``tests/stock/differences.yaml`` with its reason; a listed test that no
longer fails is stale and must go. A new Nova release or a change of ours
cannot add a difference silently.

``make test`` runs the unit suite (about 6 minutes of two cores for its
three runs); ``NOVA_IMGTYPE_STOCK_SUITES`` (comma separated) names others:
``nova.tests.functional.libvirt`` took about 15 minutes of two cores for
its run as shipped alone, too long for CI three times over.
"""

from __future__ import annotations

import os

import pytest

from tests.stock import compare

SUITES = [s for s in os.environ.get('NOVA_IMGTYPE_STOCK_SUITES',
                                    compare.SUITES[0]).split(',') if s]


def test_the_list_reads() -> None:
    listed = compare.load_differences()
    seen: set[tuple[str, str]] = set()
    for entry in listed:
        assert entry.reason and entry.tests
        for mode in entry.modes:
            for test in entry.tests:
                assert (mode, test) not in seen, f'{test} listed twice'
                seen.add((mode, test))


@pytest.mark.parametrize('suite', SUITES)
def test_stock_suite_differences_are_listed(suite: str,
                                            tmp_path: object) -> None:
    listed = compare.load_differences()
    stock = compare.run(suite, 'stock', str(tmp_path))
    assert any(s == 'success' for s in stock.values()), (
        f'{suite}: nothing passed as shipped')
    problems = []
    for mode in compare.OURS:
        found = compare.differences(
            stock, compare.run(suite, mode, str(tmp_path)))
        known = {t for t in compare.listed_for(listed, mode)
                 if t.startswith(suite + '.')}
        problems += [f'{mode}: not listed (fix it or list it with its '
                     f'reason): {t}' for t in sorted(found - known)]
        problems += [f'{mode}: listed but no longer differs (remove it): '
                     f'{t}' for t in sorted(known - found)]
    assert not problems, '\n'.join(problems)
