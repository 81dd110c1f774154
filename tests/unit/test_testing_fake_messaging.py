"""The functional harness's fake RPC listener: woken by a delivery."""

from __future__ import annotations

import threading
import time
from typing import Any

import oslo_messaging
import pytest
from oslo_config import cfg
from oslo_messaging._drivers import impl_fake

from nova_imgtype_testing import fake_messaging


def _transport_and_listener() -> tuple[Any, Any]:
    conf = cfg.ConfigOpts()
    transport = oslo_messaging.get_rpc_transport(conf, url='fake:/')
    target = oslo_messaging.Target(topic='woken', server='host1')
    listener = transport._driver.listen(target, None, None)
    return transport, listener


def test_a_listener_returns_a_delivered_message_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Neither the poll's timeout nor the fixture's longest sleep can end
    # the wait within the join below: only the delivery can.
    monkeypatch.setattr(fake_messaging, 'LONGEST_SLEEP', 120.0)
    with fake_messaging.WokenFakeListenerFixture():
        transport, listener = _transport_and_listener()
        polled: list[Any] = []
        started = threading.Event()

        def poll() -> None:
            started.set()
            # PollStyleListenerAdapter calls its poll style listener so.
            polled.extend(listener._poll_style_listener.poll(timeout=120))

        thread = threading.Thread(target=poll, daemon=True)
        thread.start()
        started.wait()
        time.sleep(0.2)
        transport._driver.send(
            oslo_messaging.Target(topic='woken', server='host1'), {},
            {'method': 'hello', 'args': {'n': 1}})
        thread.join(timeout=30)
        assert not thread.is_alive()
        assert len(polled) == 1
        assert polled[0].message['method'] == 'hello'


def test_a_stopped_listener_stops_waiting(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fake_messaging, 'LONGEST_SLEEP', 120.0)
    with fake_messaging.WokenFakeListenerFixture():
        _transport, listener = _transport_and_listener()
        style = listener._poll_style_listener
        polled: list[Any] = [None]

        def poll() -> None:
            polled[0] = style.poll(timeout=120)

        thread = threading.Thread(target=poll, daemon=True)
        thread.start()
        time.sleep(0.2)
        style.stop()
        thread.join(timeout=30)
        assert not thread.is_alive()
        assert polled[0] == []


def test_the_fixture_restores_the_driver() -> None:
    poll = impl_fake.FakeListener.poll
    stop = impl_fake.FakeListener.stop
    deliver = impl_fake.FakeExchange.deliver_message
    with fake_messaging.WokenFakeListenerFixture():
        assert impl_fake.FakeListener.poll is not poll
    assert impl_fake.FakeListener.poll is poll
    assert impl_fake.FakeListener.stop is stop
    assert impl_fake.FakeExchange.deliver_message is deliver
