"""oslo.messaging's fake driver, woken by its messages instead of polling.

Nova's functional harness passes RPC messages in memory, through
oslo.messaging's ``fake`` driver. Its listener
(``impl_fake.FakeListener.poll``) looks at its queues every 50 ms: one
thread per RPC server, each waking 20 times a second for nothing. Under
eventlet that is a green sleep; under native threads (Nova 34) each
wake-up takes the GIL from the thread doing the test's work.
:class:`WokenFakeListenerFixture` makes the listener sleep until a
message is delivered to any fake exchange (or it is stopped, or its own
timeout passes), the same delivery order and the same queues: the driver
itself is unchanged, only how its listener waits.

A harness tool: nothing a compute runs imports it.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Any

import fixtures
from oslo_messaging._drivers import base as driver_base
from oslo_messaging._drivers import impl_fake

#: How long a listener sleeps at most between two looks at its queues
#: when nothing wakes it: a safety net only (a delivery or a stop wakes
#: it at once).
LONGEST_SLEEP = 1.0


class _Deliveries:
    """A count of the messages delivered to any fake exchange (and of the
    listeners stopped), and a condition notified at each."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._count = 0

    def count(self) -> int:
        with self._cond:
            return self._count

    def happened(self) -> None:
        with self._cond:
            self._count += 1
            self._cond.notify_all()

    def wait_after(self, seen: int, timeout: float) -> None:
        """Sleep until the count is past ``seen``, at most ``timeout``."""
        with self._cond:
            self._cond.wait_for(lambda: self._count != seen,
                                timeout=timeout)


class WokenFakeListenerFixture(fixtures.Fixture):
    """Patch the fake driver's listener to wait for a delivery."""

    def _setUp(self) -> None:
        deliveries = _Deliveries()
        deliver = impl_fake.FakeExchange.deliver_message
        stop = impl_fake.FakeListener.stop

        @functools.wraps(deliver)
        def deliver_message(exchange: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return deliver(exchange, *args, **kwargs)
            finally:
                deliveries.happened()

        @functools.wraps(stop)
        def stop_listener(listener: Any) -> None:
            stop(listener)
            deliveries.happened()

        def poll(listener: Any, timeout: float | None = None) -> Any:
            # impl_fake.FakeListener.poll, its 50 ms sleep replaced by a
            # wait for the next delivery.
            deadline = None if timeout is None else time.time() + timeout
            while not listener._stopped.is_set():
                seen = deliveries.count()
                for target in listener._targets:
                    exchange = listener._exchange_manager.get_exchange(
                        target.exchange)
                    ctxt, message, reply_q, requeue = exchange.poll(
                        target, listener._pool)
                    if message is not None:
                        return impl_fake.FakeIncomingMessage(
                            ctxt, message, reply_q, requeue)
                pause = LONGEST_SLEEP
                if deadline is not None:
                    pause = min(pause, deadline - time.time())
                    if pause < 0:
                        break
                deliveries.wait_after(seen, pause)
            return None

        # batch_poll_helper wraps the original: wrap ours the same way.
        batched = driver_base.batch_poll_helper(poll)
        self.useFixture(fixtures.MonkeyPatch(
            'oslo_messaging._drivers.impl_fake.FakeExchange.deliver_message',
            deliver_message))
        self.useFixture(fixtures.MonkeyPatch(
            'oslo_messaging._drivers.impl_fake.FakeListener.stop',
            stop_listener))
        self.useFixture(fixtures.MonkeyPatch(
            'oslo_messaging._drivers.impl_fake.FakeListener.poll', batched))
