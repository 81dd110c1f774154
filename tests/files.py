"""Files for tests of the code that keeps holes (``sparse``, remote copies,
downloads)."""

from __future__ import annotations

import os
from collections.abc import Iterable


def sparse_file(path: str | os.PathLike[str], size: int,
                chunks: Iterable[tuple[int, bytes]]) -> None:
    """A file of ``size`` bytes, holes but for each ``(offset, data)``."""
    with open(path, 'wb') as f:
        f.truncate(size)
        for offset, data in chunks:
            f.seek(offset)
            f.write(data)
