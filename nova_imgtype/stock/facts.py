"""What a hook relies on in stock's source, checked against the installed
Nova."""

from __future__ import annotations

import dataclasses
import inspect
import re

from nova_imgtype import compat
from nova_imgtype import exception


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
            source = inspect.getsource(compat.resolve(self.where))
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
