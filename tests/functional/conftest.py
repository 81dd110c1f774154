"""pytest set-up for the functional tier (stock Nova's functional harness).

What stock Nova 34 from PyPI needs before its functional test base
classes run under pytest:

* the concurrency mode chosen before anything else of Nova is imported,
  as Nova's own test packages do: native threads, as in production
  (``tests/__init__.py``).
* ``[wsgi]api_paste_config`` of a wheel install: set by
  :mod:`nova_imgtype_testing.functional` when it is imported.
* ``nova.test.TestCase._clear_attrs`` (a cleanup) deletes every public
  instance attribute, including the bound test method pytest's unittest
  runner set on the instance and deletes itself afterwards
  (AttributeError). The autouse fixture below makes ``_clear_attrs`` keep
  that one attribute, for every ``nova.test.TestCase`` subclass of this
  tier, without touching Nova's files.
* the thread pools of a test's in-process services end up in reference
  cycles, unreachable but not collected: their idle futurist workers
  (each polling every second) piled up to about 60 threads, a third of a
  core, by the end of the tier. A collection after each module stops them.
* oslo.messaging's fake driver, which carries the services' RPC, polls
  its queues every 50 ms per RPC server: under native threads each
  wake-up takes the GIL from the test. Its listeners wait for a delivery
  instead (:mod:`nova_imgtype_testing.fake_messaging`).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from nova_imgtype_testing import fake_messaging


@pytest.fixture(autouse=True, scope='session')
def _fake_rpc_listeners_woken_by_messages() -> Iterator[None]:
    """The fake RPC driver's listeners wait for a delivery, not 50 ms."""
    woken = fake_messaging.WokenFakeListenerFixture()
    woken.setUp()
    yield
    woken.cleanUp()


@pytest.fixture(autouse=True, scope='module')
def _collect_the_modules_thread_pools() -> Iterator[None]:
    """Collect the unreachable executors a module's services left, whose
    worker threads then stop (futurist stops a worker once its executor
    is gone)."""
    yield
    gc.collect()


@pytest.fixture(autouse=True)
def _keep_test_method_across_clear_attrs(
        request: pytest.FixtureRequest) -> Iterator[None]:
    """Keep pytest's bound test method through ``TestCase._clear_attrs``.

    Acts on ``nova.test.TestCase`` instances only (anything with a
    ``_clear_attrs``); a no-op for plain pytest tests.
    """
    instance: Any = getattr(request, 'instance', None)
    clear = getattr(instance, '_clear_attrs', None)
    if instance is None or clear is None:
        yield
        return

    def _clear_attrs() -> None:
        name = instance._testMethodName
        kept = instance.__dict__.get(name)
        clear()
        if kept is not None:
            instance.__dict__[name] = kept

    # TestCase.setUp registers self._clear_attrs with addCleanup *after*
    # this fixture ran, and looks it up on the instance then.
    instance._clear_attrs = _clear_attrs
    yield
