"""The Nova releases nova-imgtype runs on, and what about them must be known
before Nova is imported.

What differs in the signatures of the stock methods the plugin overrides is
in :mod:`nova_imgtype.compat`; this module imports nothing of Nova, so that
a process can choose Nova's concurrency mode with it first.
"""

from __future__ import annotations

import importlib.metadata


def nova_major() -> int:
    """The major version of the installed Nova."""
    return int(importlib.metadata.version('nova').split('.')[0])


def native_threading_default() -> bool:
    """Whether the installed Nova runs nova-compute in native threads by
    default, as its operators run it.

    Nova 34 (2026.2) runs api, conductor, scheduler and compute in native
    threads. Nova 33 (2026.1) runs nova-compute under eventlet unless told
    otherwise (its native threading is marked experimental there), and its
    functional test harness works only under eventlet (its
    ``FakeVersionedNotifier`` asks eventlet which greenthread sent a
    notification). The plugin is tested the way each release runs.
    """
    return nova_major() >= 34
