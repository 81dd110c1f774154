"""A fake of Cinder's attachment API for tests and benchmarks.

No Cinder runs here. The volume is the file (or device) ``device``, which
os-brick's ``local`` connector hands out as it is: what Glance's cinder
store would have written the image to.
"""

from __future__ import annotations

import uuid
from typing import Any


class Cinder:
    """The attachment calls the ``volume-based-linking`` handler makes.

    :ivar attachments: ``{attachment id: volume id}`` of the live ones.
    :ivar read_only: ids of the attachments asked for read-only.
    """

    def __init__(self, device: str = '') -> None:
        self.device = device
        self.attachments: dict[str, str] = {}
        self.read_only: set[str] = set()

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
        attachment = self.attachment_create(context, volume_id, instance_id,
                                            connector=connector)
        self.read_only.add(attachment['id'])
        return attachment

    def attachment_complete(self, context: Any, attachment_id: str) -> None:
        assert attachment_id in self.attachments

    def attachment_delete(self, context: Any, attachment_id: str) -> None:
        del self.attachments[attachment_id]
