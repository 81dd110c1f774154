"""A value set for the length of a block, in the thread that runs it.

Each hook of this package switches something of stock's for one step of
one instance (a cold move's remote filesystem, the instance a type-less
``backend()`` means, ...). Nova 34 runs nova-compute in native threads,
each request in one: the value is a context variable, seen by the thread
(or greenthread) that set it only, and put back as it was when the block
ends, whatever it ends in.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Generic
from typing import TypeVar

T = TypeVar('T')


class ThreadValue(Generic[T]):
    """A value of this thread, None outside :meth:`bound`."""

    def __init__(self, name: str) -> None:
        self._var: contextvars.ContextVar[T | None] = (
            contextvars.ContextVar('nova_imgtype_' + name, default=None))

    @contextlib.contextmanager
    def bound(self, value: T) -> Iterator[T]:
        """Within the block, in this thread, the value is ``value``."""
        token = self._var.set(value)
        try:
            yield value
        finally:
            self._var.reset(token)

    def get(self) -> T | None:
        """The value of the :meth:`bound` block running in this thread."""
        return self._var.get()

    def clear(self) -> None:
        """None for the rest of the block (the value is used up)."""
        self._var.set(None)
