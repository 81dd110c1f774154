"""Stock Nova's libvirt suites, as shipped and with our driver: compared.

Each suite of :data:`SUITES` runs under stestr (two workers, at the lowest
CPU priority), once per mode of :mod:`tests.stock.swap`. A test that passes
as shipped and fails (or errors) with our driver is a difference; each one
is either fixed in our driver or listed, with its reason, in
``tests/stock/differences.yaml`` (:func:`load_differences`).

``python -m tests.stock.compare [suite ...]`` runs them and prints the
differences, grouped, in the list's format: what to triage.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from typing import Any

import nova
import yaml
from subunit import ByteStreamToStreamResult
from testtools import StreamToDict

from tests.stock import swap

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DIFFERENCES = os.path.join(HERE, 'differences.yaml')
SITE = os.path.dirname(os.path.dirname(os.path.abspath(nova.__file__)))

#: Stock's suites, by package: the libvirt driver's unit and functional
#: tests shipped in Nova's wheel.
SUITES = ('nova.tests.unit.virt.libvirt', 'nova.tests.functional.libvirt')
OURS = tuple(m for m in swap.MODES if m != 'stock')
PASSED = frozenset({'success', 'skip', 'xfail'})
FAILED = frozenset({'fail', 'uxsuccess'})
CONCURRENCY = int(os.environ.get('NOVA_IMGTYPE_STOCK_CONCURRENCY', '2'))


def run(suite: str, mode: str, workdir: str) -> dict[str, str]:
    """Test id -> subunit status of ``suite`` run in ``mode``."""
    repo = os.path.join(workdir, f'{suite}-{mode}')
    os.makedirs(repo)
    env = dict(os.environ, PYTHON=f'{sys.executable} -m tests.stock.swap',
               PYTHONPATH=os.pathsep.join(
                   p for p in (ROOT, os.environ.get('PYTHONPATH')) if p),
               **{swap.MODE_VARIABLE: mode})
    # Nova's ConfFixture looks for api-paste.ini beside the nova package;
    # a wheel puts it under <prefix>/etc/nova (the functional suites).
    paste = os.path.join(sys.prefix, 'etc', 'nova', 'api-paste.ini')
    if os.path.exists(paste):
        env.setdefault('OS_WSGI__API_PASTE_CONFIG', paste)
    stestr = ['nice', '-n', '19', sys.executable, '-m', 'stestr',
              '--test-path', os.path.join(SITE, *suite.split('.')),
              '--top-dir', SITE]
    subprocess.run([*stestr, 'init'], cwd=repo, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    stream = os.path.join(repo, 'subunit')
    with open(stream, 'wb') as out, open(stream + '.err', 'wb') as err:
        # Its exit status says whether a test failed: read from the stream.
        subprocess.run(
            [*stestr, 'run', '--concurrency', str(CONCURRENCY), '--subunit'],
            cwd=repo, env=env, stdout=out, stderr=err)
    return statuses(stream)


def statuses(path: str) -> dict[str, str]:
    found: dict[str, str] = {}

    def one(test: dict[str, Any]) -> None:
        found[test['id']] = test['status']

    with open(path, 'rb') as stream:
        result = StreamToDict(one)
        result.startTestRun()
        ByteStreamToStreamResult(stream, non_subunit_name='stdout').run(
            result)
        result.stopTestRun()
    return found


def differences(stock: dict[str, str],
                ours: dict[str, str]) -> set[str]:
    """Tests that pass as shipped and fail with our driver (a test that
    ours did not run at all counts as failed: a worker died)."""
    return {test for test, status in stock.items()
            if status in PASSED and ours.get(test, 'fail') in FAILED}


@dataclasses.dataclass(frozen=True)
class Listed:
    """One entry of the list: the tests, the modes they differ in, why."""
    reason: str
    kind: str
    modes: tuple[str, ...]
    tests: frozenset[str]


def load_differences(path: str = DIFFERENCES) -> list[Listed]:
    with open(path) as f:
        entries = yaml.safe_load(f) or []
    listed = []
    for entry in entries:
        if entry['kind'] not in ('intended', 'harness'):
            raise ValueError(f'{path}: kind {entry["kind"]!r}: intended or '
                             f'harness')
        modes = tuple(entry['modes'])
        if not set(modes) <= set(OURS):
            raise ValueError(f'{path}: modes {modes}: of {OURS}')
        listed.append(Listed(entry['reason'].strip(), entry['kind'], modes,
                             frozenset(entry['tests'])))
    return listed


def listed_for(listed: Iterable[Listed], mode: str) -> set[str]:
    return {t for entry in listed if mode in entry.modes
            for t in entry.tests}


def main(argv: list[str]) -> int:
    suites = argv or list(SUITES)
    listed = load_differences()
    status = 0
    with tempfile.TemporaryDirectory(prefix='stock-suites-') as workdir:
        for suite in suites:
            stock = run(suite, 'stock', workdir)
            for mode in OURS:
                found = differences(stock, run(suite, mode, workdir))
                known = listed_for(listed, mode)
                new = sorted(found - known)
                stale = sorted(t for t in known - found
                               if t.startswith(suite + '.'))
                print(f'# {suite} {mode}: {len(found)} differences, '
                      f'{len(new)} not listed, {len(stale)} stale')
                if new:
                    status = 1
                    print(yaml.safe_dump([{
                        'kind': '?', 'modes': [mode], 'reason': '?',
                        'tests': new}], width=200))
                for test in stale:
                    status = 1
                    print(f'stale: {test}')
    return status


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
