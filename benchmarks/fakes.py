"""What the benchmarks fake, in one place: Glance's image metadata and
Cinder's attachment API (no Glance, no Cinder runs here)."""

from __future__ import annotations

import hashlib
import os
import uuid
from typing import Any

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


class Cinder:
    """Cinder's attachment API: the volume is the file ``device``,
    connected by os-brick's local connector."""

    def __init__(self, device: str = '') -> None:
        self.device = device
        self.attachments: dict[str, str] = {}

    def attachment_create(self, context: Any, volume_id: str,
                          instance_id: str, connector: Any = None,
                          mountpoint: Any = None) -> dict[str, Any]:
        aid = str(uuid.uuid4())
        self.attachments[aid] = volume_id
        return {'id': aid, 'connection_info': {
            'driver_volume_type': 'local',
            'data': {'device_path': self.device}}}

    def attachment_create_read_only(self, context: Any, volume_id: str,
                                    instance_id: str,
                                    connector: Any) -> dict[str, Any]:
        return self.attachment_create(context, volume_id, instance_id,
                                      connector=connector)

    def attachment_complete(self, context: Any, attachment_id: str) -> None:
        assert attachment_id in self.attachments

    def attachment_delete(self, context: Any, attachment_id: str) -> None:
        del self.attachments[attachment_id]
