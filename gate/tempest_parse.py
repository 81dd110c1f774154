"""Per-test results of a tempest run, from its subunit v2 stream.

A result is ``{"status": passed|failed|skipped|missing, "duration": s,
"reason": str}`` per test id, the id without tempest's ``[id-...,attrs]``
suffix. Class-level events (``setUpClass (module.Class)``: a class
skipped by ``skip_checks`` or failed in ``resource_setup``) are given to
every listed test of that class that has no result of its own, so that
every selected test has a row; a listed test with no event at all is
``missing`` (the run was killed, or a worker died).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any
from typing import Protocol

import subunit
import testtools

Result = dict[str, Any]

_STATUS = {
    'success': 'passed',
    'xfail': 'passed',
    'fail': 'failed',
    'uxsuccess': 'failed',
    'skip': 'skipped',
}
_CLASS_EVENT = re.compile(
    r'^(setUpClass|tearDownClass|setUpModule|tearDownModule) \((.+)\)$')
REASON_MAX = 2000
#: The most of a failure's exception kept whole (a server's fault, with
#: its own traceback, can be longer than ``REASON_MAX``).
EXCEPTION_MAX = 16000


def base_id(test_id: str) -> str:
    """``tempest...Class.test_x[id-1,smoke]`` -> ``tempest...Class.test_x``."""
    return test_id.split('[', 1)[0]


def _text(details: Mapping[str, Any], *names: str) -> str:
    for name in names:
        content = details.get(name)
        if content is not None:
            try:
                return str(content.as_text())
            except Exception:  # noqa: BLE001 (a detail we cannot decode)
                return repr(content)
    return ''


def _exception(tb: str) -> str:
    """A traceback's last exception: what follows its last frame."""
    lines = tb.splitlines(keepends=True)
    frames = [i for i, ln in enumerate(lines) if ln.startswith('  File "')]
    if not frames:
        return ''
    rest = lines[frames[-1] + 1:]
    while rest and rest[0].startswith('    '):
        rest.pop(0)
    return ''.join(rest)


def _summary(status: str, details: Mapping[str, Any]) -> str:
    """Why a test skipped or failed: the reason, or the traceback's tail
    (its last lines name the exception)."""
    if status == 'skipped':
        return _text(details, 'reason').strip()[:REASON_MAX]
    if status == 'failed':
        tb = _text(details, 'traceback').strip()
        if len(tb) > REASON_MAX:
            # The tail, or the whole exception when it is longer: its
            # first line names the server a build failed (tempest's
            # BuildErrorException), which gate.upstream_bugs looks for.
            keep = max(REASON_MAX, len(_exception(tb)))
            tb = '...' + tb[-min(keep, EXCEPTION_MAX):]
        return tb
    return ''


def event_result(test: Mapping[str, Any]) -> tuple[str, Result] | None:
    """(base id, result) of one finished test dict of ``StreamToDict``;
    None for events that are not a test's end (``exists``,
    ``inprogress``)."""
    status = _STATUS.get(test.get('status') or '')
    if status is None:
        return None
    start, end = (list(test.get('timestamps') or []) + [None, None])[:2]
    duration = 0.0
    if start is not None and end is not None:
        duration = round((end - start).total_seconds(), 2)
    details = test.get('details') or {}
    return base_id(test['id']), {
        'status': status,
        'duration': duration,
        'reason': _summary(status, details),
    }


class ByteSource(Protocol):
    """What :func:`read_stream` reads: a file, or anything with ``read``."""

    def read(self, n: int = -1) -> bytes: ...


def read_stream(stream: ByteSource,
                on_result: Callable[[str, Result], None] | None = None
                ) -> dict[str, Result]:
    """Every test end in a subunit v2 byte stream, by base id (a test
    reported twice keeps its last result). ``on_result`` is called as each
    one arrives (progress)."""
    results: dict[str, Result] = {}

    def on_test(test: Any) -> None:
        found = event_result(test)
        if found is None:
            return
        results[found[0]] = found[1]
        if on_result is not None:
            on_result(*found)

    case = subunit.ByteStreamToStreamResult(stream, non_subunit_name='stdout')
    sink = testtools.StreamToDict(on_test)
    sink.startTestRun()
    try:
        case.run(sink)
    finally:
        sink.stopTestRun()
    return results


def expand(raw: Mapping[str, Result], listed: Iterable[str]
           ) -> dict[str, Result]:
    """Results per listed test (base ids), class-level events applied.

    Tests that ran keep their result. A ``setUpClass (C)`` event gives its
    status and reason to the listed tests of ``C`` without a result
    (``class_level: True``). Other class-level failures
    (``tearDownClass``) are kept as rows of their own, named
    ``C (tearDownClass)``. Results of tests that were not listed are kept.
    Listed tests with nothing are ``missing``.
    """
    out: dict[str, Result] = {}
    class_events: dict[str, Result] = {}
    for test_id, result in raw.items():
        found = _CLASS_EVENT.match(test_id)
        if not found:
            out[test_id] = dict(result)
            continue
        kind, owner = found.groups()
        if kind == 'setUpClass':
            class_events[owner] = result
        elif result['status'] != 'passed':
            out['%s (%s)' % (owner, kind)] = dict(result)
    for test_id in dict.fromkeys(base_id(t) for t in listed):
        if test_id in out:
            continue
        owner = test_id.rsplit('.', 1)[0]
        if owner in class_events:
            event = class_events[owner]
            out[test_id] = {'status': event['status'],
                            'duration': 0.0,
                            'reason': event['reason'],
                            'class_level': True}
        else:
            out[test_id] = {'status': 'missing', 'duration': 0.0,
                            'reason': 'no result in the subunit stream'}
    return out


def counts(results: Mapping[str, Result]) -> dict[str, int]:
    """How many tests per status (every status present, 0 or more)."""
    total = {s: 0 for s in ('passed', 'failed', 'skipped', 'missing')}
    for result in results.values():
        total[result['status']] = total.get(result['status'], 0) + 1
    return total


#: tempest's rest_client log of a request it made:
#: ``Request (Class:test_x): 500 POST http://.../servers/<uuid>/action``.
_REQUEST = re.compile(
    r'Request \((?P<caller>[^)]*)\): (?P<status>\d{3}) [A-Z]+ (?P<url>\S+)')
_SERVER = re.compile(
    r'/servers/([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-'
    r'[0-9a-f]{12})')


def failed_request_servers(log_lines: Iterable[str]
                           ) -> dict[str, list[str]]:
    """``{"Class:test_x": [server uuid, ...]}``: the servers named in the
    URLs of the requests each test made that the cloud answered with a
    5xx, from tempest's own log. A failure message that names no server
    (a 500 from an action) is linked to its server so."""
    out: dict[str, list[str]] = {}
    for line in log_lines:
        m = _REQUEST.search(line)
        if m is None or not m['status'].startswith('5'):
            continue
        servers = out.setdefault(m['caller'], [])
        servers += [u for u in _SERVER.findall(m['url']) if u not in servers]
    return out


def add_failed_request_servers(results: dict[str, Result],
                               log_lines: Iterable[str]) -> None:
    """Give each failed test of ``results`` the servers of its requests
    the cloud answered with a 5xx (``servers``), when there are any."""
    by_caller = failed_request_servers(log_lines)
    for test_id, result in results.items():
        if result['status'] != 'failed':
            continue
        owner, _, method = base_id(test_id).rpartition('.')
        servers = by_caller.get('%s:%s' % (owner.rsplit('.', 1)[-1], method))
        if servers:
            result['servers'] = list(servers)
