"""The benchmarks' Markdown tables, drawn by prettytable (as the CLI's)."""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Sequence

import prettytable


def markdown(columns: Sequence[str], rows: Iterable[Sequence[object]],
             left: Iterable[str] = ()) -> str:
    """A GitHub-flavoured Markdown table of ``rows`` (values formatted as
    they should read) under ``columns``: aligned right (figures) but for
    the columns named in ``left`` (words)."""
    table = prettytable.PrettyTable(list(columns))
    words = set(left)
    for column in columns:
        table.align[column] = 'l' if column in words else 'r'
    for row in rows:
        table.add_row([str(value) for value in row])
    table.set_style(prettytable.TableStyle.MARKDOWN)
    return table.get_string()
