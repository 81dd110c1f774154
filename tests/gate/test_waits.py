"""The gate's waits: openstacksdk's ``iterate_timeout`` under the gate's
timeout (``checks_base.poll``), a server waited for until its status and
no task, a failure or a timeout a CheckFailed that says what was seen."""

from __future__ import annotations

import types

import pytest
from openstack import utils as sdk_utils

from gate import checks_base as B


class _Compute:
    """get_server answers the servers given, the last one for ever."""

    def __init__(self, *states: tuple[str, str | None]) -> None:
        self.states = list(states)
        self.calls = 0

    def get_server(self, server_id: str) -> types.SimpleNamespace:
        status, task = self.states[min(self.calls, len(self.states) - 1)]
        self.calls += 1
        return types.SimpleNamespace(id=server_id, status=status,
                                     task_state=task, fault={'m': 'boom'})


@pytest.fixture(autouse=True)
def _no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sdk_utils.time, 'sleep', lambda s: None)


def _conn(compute: _Compute) -> types.SimpleNamespace:
    return types.SimpleNamespace(compute=compute)


def test_wait_returns_once_the_status_has_no_task() -> None:
    compute = _Compute(('BUILD', 'spawning'), ('ACTIVE', 'migrating'),
                       ('ACTIVE', None))
    server = B.wait(_conn(compute), types.SimpleNamespace(id='s'), 'ACTIVE')
    assert (server.status, server.task_state) == ('ACTIVE', None)
    assert compute.calls == 3


def test_wait_fails_at_once_on_error_with_the_fault() -> None:
    compute = _Compute(('BUILD', 'spawning'), ('ERROR', None))
    with pytest.raises(B.CheckFailed, match=r"server s ERROR: .*boom"):
        B.wait(_conn(compute), types.SimpleNamespace(id='s'), 'ACTIVE')
    assert compute.calls == 2


def test_a_timeout_says_what_was_waited_for_and_seen(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(B, 'TIMEOUT', 0.05)
    compute = _Compute(('ACTIVE', 'migrating'))
    with pytest.raises(B.CheckFailed) as e:
        B.wait(_conn(compute), types.SimpleNamespace(id='s'), 'ACTIVE')
    assert str(e.value) == (
        'server s ACTIVE with no task: not after 0s (ACTIVE, task migrating)')
    assert compute.calls >= 1
