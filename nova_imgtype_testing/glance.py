"""Image data as glanceclient hands it to Nova, for test image services.

Nova reads an image's data through glanceclient's ``images.data``, which
verifies it as it is read (``os_hash_value`` with ``os_hash_algo``, else
the md5 ``checksum``) and raises ``IOError`` after the last chunk when the
data is not what Glance recorded. A test's or a benchmark's image service
that serves a local file gives its chunks through :func:`chunks`, which
wraps them in glanceclient's own verifying iterators, so the code under test
meets what it meets in production, hash check and its cost included.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from collections.abc import Mapping
from typing import Any

from glanceclient.common import utils

#: glanceclient's download chunk size.
CHUNK = 64 * 1024


def _read(path: str, chunk: int) -> Iterator[bytes]:
    with open(path, 'rb') as f:
        while data := f.read(chunk):
            yield data


def chunks(path: str, meta: Mapping[str, Any],
           chunk: int = CHUNK) -> Iterator[bytes]:
    """The data of the file ``path`` in chunks, verified against the
    image's metadata ``meta`` as glanceclient's ``images.data`` verifies
    it (``do_checksum=True``, no md5 fallback: Nova's call).

    :raises ValueError: ``os_hash_algo`` is unknown to hashlib.
    :raises IOError: (while iterating) the data differ from the hash.
    """
    body = _read(path, chunk)
    if meta.get('os_hash_value') is not None:
        return utils.serious_integrity_iter(
            body, hashlib.new(str(meta.get('os_hash_algo'))),
            meta['os_hash_value'])
    if meta.get('checksum') is not None:
        return utils.integrity_iter(body, meta['checksum'])
    return body
