"""What a hook relies on in stock's source, checked against the installed
Nova.

Hooks are imported where stock's libvirt driver is not (nova-scheduler
loads :mod:`.request_filters`, on a host that may not even have
libvirt-python): :mod:`nova_imgtype.compat`, which reads the driver's
signatures when imported, is imported only by a check.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import importlib
import inspect
import re
from collections.abc import Callable
from typing import Any

from nova_imgtype import exception


def _resolve(qualname: str) -> Callable[..., Any]:
    from nova_imgtype import compat  # noqa: PLC0415 - see the docstring

    return compat.resolve(qualname)


@dataclasses.dataclass(frozen=True)
class SourceFact:
    """Stock's ``where`` (``module:Class.method``) does ``steps`` (regular
    expressions over its source), in that order, and nothing ``absent``
    matches; ``why`` says what of the plugin depends on it."""

    where: str
    steps: tuple[str, ...]
    why: str
    absent: tuple[str, ...] = ()

    def check(self) -> None:
        """Raise :class:`~nova_imgtype.exception.StockFactBroken` naming
        the first step the installed source does not have after the steps
        before it, or the first of ``absent`` it has."""
        try:
            source = inspect.getsource(_resolve(self.where))
        except (AttributeError, ImportError, OSError, TypeError) as e:
            raise exception.StockFactBroken(
                where=self.where, step='(the source itself)',
                why='%s (%s)' % (self.why, e)) from e
        position = 0
        for step in self.steps:
            found = re.compile(step).search(source, position)
            if found is None:
                raise exception.StockFactBroken(
                    where=self.where, step=step, why=self.why)
            position = found.end()
        for unwanted in self.absent:
            if re.search(unwanted, source):
                raise exception.StockFactBroken(
                    where=self.where, step='no %s' % unwanted, why=self.why)


@dataclasses.dataclass(frozen=True)
class CallSites:
    """The functions of stock's ``module`` whose source matches
    ``pattern`` are ``expected`` (``Class.method`` or ``function``), no
    more and no fewer: a hook that changes what an attribute or call means
    is right only at the call sites it was written for."""

    module: str
    pattern: str
    expected: frozenset[str]
    why: str

    def found(self) -> set[str]:
        """The functions of the installed ``module`` that match."""
        regex = re.compile(self.pattern)
        return {name for name, source in _functions(self.module)
                if regex.search(source)}

    def check(self) -> None:
        """Raise :class:`~nova_imgtype.exception.StockFactBroken` naming
        the call sites stock added or dropped."""
        found = self.found()
        if found != self.expected:
            changes = ['new: %s' % ', '.join(sorted(found - self.expected))
                       if found - self.expected else '',
                       'gone: %s' % ', '.join(sorted(self.expected - found))
                       if self.expected - found else '']
            raise exception.StockFactBroken(
                where=self.module, step='%s (%s)' % (
                    self.pattern, '; '.join(c for c in changes if c)),
                why=self.why)


@dataclasses.dataclass(frozen=True)
class CopiedSource:
    """The plugin's ``copy`` (``module:Class.method``) takes stock's step
    ``where`` its own way; the source of ``where`` it was checked against
    has one of the ``sha256`` digests (one per supported Nova release, often
    the same). A stock change there, a security fix included, fails the
    check until the copy is reviewed against it."""

    where: str
    sha256: frozenset[str]
    copy: str
    why: str

    def digest(self) -> str:
        """The sha256 of the installed source of ``where``."""
        source = inspect.getsource(_resolve(self.where))
        return hashlib.sha256(source.encode()).hexdigest()

    def check(self) -> None:
        """Raise :class:`~nova_imgtype.exception.StockFactBroken` when the
        installed source of ``where`` is not one the copy was checked
        against."""
        try:
            found = self.digest()
        except (AttributeError, ImportError, OSError, TypeError) as e:
            raise exception.StockFactBroken(
                where=self.where, step='(the source itself)',
                why='%s (%s)' % (self.why, e)) from e
        if found not in self.sha256:
            raise exception.StockFactBroken(
                where=self.where,
                step='the source %s copies (sha256 now %s)' % (self.copy,
                                                              found),
                why=self.why)


Fact = SourceFact | CallSites | CopiedSource


@functools.lru_cache(maxsize=8)
def _functions(module: str) -> tuple[tuple[str, str], ...]:
    """``(Class.method or function, its source)`` of each function of the
    installed ``module``, read once."""
    source = inspect.getsource(importlib.import_module(module))
    lines = source.splitlines()
    out = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef):
            named = [('%s.%s' % (node.name, f.name), f) for f in node.body
                     if isinstance(f, (ast.FunctionDef,
                                       ast.AsyncFunctionDef))]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            named = [(node.name, node)]
        else:
            continue
        for name, func in named:
            first = min([func.lineno] + [d.lineno
                                         for d in func.decorator_list])
            out.append((name, '\n'.join(
                lines[first - 1:func.end_lineno or func.lineno])))
    return tuple(out)
