"""Per-test results from a synthetic subunit v2 stream."""

from __future__ import annotations

import datetime
import io

import subunit

from gate import tempest_parse

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def _stream(events: list[tuple[str, str, float, dict[str, str]]]) -> bytes:
    buf = io.BytesIO()
    out = subunit.StreamResultToBytes(buf)
    for test_id, status, seconds, details in events:
        out.status(test_id=test_id, test_status='inprogress', timestamp=T0)
        for name, text in details.items():
            out.status(test_id=test_id, file_name=name,
                       file_bytes=text.encode(),
                       mime_type='text/plain;charset=utf8', eof=True)
        out.status(test_id=test_id, test_status=status,
                   timestamp=T0 + datetime.timedelta(seconds=seconds))
    return buf.getvalue()


def test_stream_and_expand() -> None:
    data = _stream([
        ('m.A.test_ok[id-1,smoke]', 'success', 2.5, {}),
        ('m.A.test_bad[id-2]', 'fail', 1.0,
         {'traceback': 'Traceback...\nValueError: boom\n'}),
        ('m.A.test_skip[id-3]', 'skip', 0.0, {'reason': 'no cinder'}),
        ('setUpClass (m.B)', 'skip', 0.0, {'reason': 'less than 2 nodes'}),
        ('tearDownClass (m.A)', 'fail', 0.0, {'traceback': 'E: x'}),
    ])
    seen: list[str] = []
    raw = tempest_parse.read_stream(io.BytesIO(data),
                                    lambda i, r: seen.append(i))
    assert seen[0] == 'm.A.test_ok'
    assert raw['m.A.test_ok'] == {'status': 'passed', 'duration': 2.5,
                                  'reason': ''}
    assert raw['m.A.test_bad']['status'] == 'failed'
    assert raw['m.A.test_bad']['reason'].endswith('ValueError: boom')
    assert raw['m.A.test_skip']['reason'] == 'no cinder'
    listed = ['m.A.test_ok[id-1,smoke]', 'm.A.test_bad[id-2]',
              'm.A.test_skip[id-3]', 'm.B.test_one[id-4]',
              'm.B.test_two[id-5]', 'm.C.test_lost[id-6]']
    results = tempest_parse.expand(raw, listed)
    assert results['m.B.test_one'] == {
        'status': 'skipped', 'duration': 0.0,
        'reason': 'less than 2 nodes', 'class_level': True}
    assert results['m.B.test_two']['status'] == 'skipped'
    assert results['m.C.test_lost']['status'] == 'missing'
    assert results['m.A (tearDownClass)']['status'] == 'failed'
    assert 'setUpClass (m.B)' not in results
    assert tempest_parse.counts(results) == {
        'passed': 1, 'failed': 2, 'skipped': 3, 'missing': 1}


def test_base_id() -> None:
    assert tempest_parse.base_id('a.B.c[id-1,negative]') == 'a.B.c'
    assert tempest_parse.base_id('a.B.c') == 'a.B.c'


def test_a_long_failure_keeps_its_whole_exception() -> None:
    # A server's fault (its own traceback inside) makes the exception
    # longer than the kept tail: its first line, naming the server, stays.
    fault = 'Server abc failed to build and is in ERROR status\n' + \
        'Details: Fault: ' + 'x' * 5000 + '\n'
    tb = ('Traceback (most recent call last):\n'
          '  File "t.py", line 1, in test\n    waiters.wait()\n'
          + '  File "w.py", line 9, in wait\n    raise Build()\n'
          'tempest.exceptions.BuildErrorException: ' + fault)
    short = 'Traceback (most recent call last):\n' + \
        '  File "t.py", line 1, in test\n' * 200 + 'ValueError: boom\n'
    data = _stream([('m.A.test_build', 'fail', 1.0, {'traceback': tb}),
                    ('m.A.test_short', 'fail', 1.0, {'traceback': short})])
    raw = tempest_parse.read_stream(io.BytesIO(data), lambda i, r: None)
    reason = raw['m.A.test_build']['reason']
    assert reason.startswith('...tempest.exceptions.BuildErrorException: '
                             'Server abc failed to build')
    assert reason.endswith('x' * 100)
    # Otherwise the tail, as before.
    reason = raw['m.A.test_short']['reason']
    assert len(reason) == tempest_parse.REASON_MAX + 3
    assert reason.endswith('ValueError: boom')
