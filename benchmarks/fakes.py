"""What the benchmarks fake, in one place: Glance's image metadata and
Cinder's attachment API (no Glance, no Cinder runs here)."""

from __future__ import annotations

import hashlib
import os
import uuid
from typing import Any

from nova_imgtype_testing import cinder

MiB = 1024 * 1024
#: The volume behind an image in Glance's cinder store.
VOLUME_ID = '4b7f0a52-9c3e-4f0d-8a61-2e5d7c9b1f30'


def sha512_of(path: str) -> str:
    """The sha512 Glance records for an image (``os_hash_value``)."""
    digest = hashlib.sha512()
    with open(path, 'rb') as f:
        while chunk := f.read(16 * MiB):
            digest.update(chunk)
    return digest.hexdigest()


def image_meta(path: str, disk_format: str, sha512: str | None = None,
               cinder_location: bool = False) -> dict[str, Any]:
    """Glance's metadata of an image whose data is the file ``path``."""
    meta: dict[str, Any] = {
        'id': str(uuid.uuid4()), 'disk_format': disk_format,
        'container_format': 'bare', 'size': os.path.getsize(path),
        'os_hash_algo': 'sha512',
        'os_hash_value': sha512 or sha512_of(path)}
    if cinder_location:
        meta['locations'] = [{'url': 'cinder://%s' % VOLUME_ID,
                              'metadata': {}}]
    return meta


#: Cinder's attachment API (shared with the tests).
Cinder = cinder.Cinder
