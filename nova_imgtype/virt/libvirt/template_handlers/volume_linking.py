"""``volume-based-linking``: the Cinder volume behind an image, linked.

For an image stored by Glance's cinder store (a location ``cinder://...``),
the volume is attached to this host with a Cinder attachment (stock
``nova.volume.cinder``), connected with os-brick, and the template is a
symbolic link to the device: no byte is copied, whatever the image's size.
Instance disks are copy-on-write overlays on it. What is linked is recorded
next to the cache (``<base>/.linked/<template>.json``) so that ``init()``
reconnects after a restart and ``remove_image()`` disconnects the device
and deletes the attachment.

An image without a cinder location, a volume that cannot be attached or
connected, or content that would need a conversion (``force_raw_images``
on a non-raw image used through a converting backend) is downloaded
instead (:mod:`.downloading`), and the reason logged.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

from nova import context as nova_context
from nova import exception
from nova import utils
from nova.i18n import _
from nova.image import glance
from nova.virt import images
from nova.volume import cinder
from os_brick.initiator import connector as brick_connector
from oslo_config import cfg
from oslo_log import log as logging
from oslo_utils import fileutils

from nova_imgtype.virt.libvirt.template_handlers import base
from nova_imgtype.virt.libvirt.template_handlers import downloading

LOG = logging.getLogger(__name__)
CONF = cfg.CONF
IMAGE_API = glance.API()

#: Where links are recorded, under the image cache directory.
STATE_DIR = '.linked'
#: Namespace of the owner uuid of this host's template attachments.
_OWNER_NS = uuid.UUID('8f7c0b1e-2c4a-4d7e-9a51-6b0f3c9e2d11')


def owner_uuid(host: str) -> str:
    """The "instance" this host's template attachments belong to."""
    return str(uuid.uuid5(_OWNER_NS, host))


def cinder_volume_id(meta: dict[str, Any]) -> str | None:
    """The volume id of an image's ``cinder://`` location, if any."""
    urls = [loc.get('url', '') for loc in meta.get('locations') or []]
    urls.append(meta.get('direct_url') or '')
    for url in urls:
        if url.startswith('cinder://'):
            # cinder://<volume> or cinder://<store>/<volume>
            return url.rstrip('/').rsplit('/', 1)[-1]
    return None


class VolumeLinkingTemplateImageHandler(base.BaseTemplateImageHandler):
    """Templates linked to the attached volume that holds the image."""

    name = 'volume-based-linking'

    def __init__(self) -> None:
        self.fallback = downloading.DownloadingTemplateImageHandler()
        self.volume_api = cinder.API()

    # -- state --------------------------------------------------------------

    @staticmethod
    def _state_path(target: str) -> str:
        return os.path.join(os.path.dirname(target), STATE_DIR,
                            os.path.basename(target) + '.json')

    def linked(self, target: str) -> dict[str, Any] | None:
        """What is recorded for a linked template, None if not linked."""
        try:
            with open(self._state_path(target)) as f:
                state: dict[str, Any] = json.load(f)
        except FileNotFoundError:
            return None
        return state

    def _record(self, target: str, state: dict[str, Any]) -> None:
        path = self._state_path(target)
        fileutils.ensure_tree(os.path.dirname(path))
        with open(path + '.tmp', 'w') as f:
            json.dump(state, f)
        os.rename(path + '.tmp', path)

    # -- os-brick -----------------------------------------------------------

    @staticmethod
    def _connector(connection_info: dict[str, Any]) -> Any:
        return brick_connector.InitiatorConnector.factory(
            connection_info['driver_volume_type'].upper(),
            utils.get_root_helper(), use_multipath=False,
            device_scan_attempts=3)

    def _connect(self, connection_info: dict[str, Any]) -> str:
        device = self._connector(connection_info).connect_volume(
            connection_info['data'])
        return str(device['path'])

    # -- the contract -------------------------------------------------------

    def init(self, base_dir: str) -> None:
        """Reconnect every linked template (the attachments outlive
        nova-compute; the host's connections may not)."""
        state_dir = os.path.join(base_dir, STATE_DIR)
        if not os.path.isdir(state_dir):
            return
        for name in sorted(os.listdir(state_dir)):
            if not name.endswith('.json'):
                continue
            target = os.path.join(base_dir, name[:-len('.json')])
            state = self.linked(target)
            assert state is not None
            try:
                device = self._connect(state['connection_info'])
            except Exception as e:  # noqa: BLE001 - reported, kept
                LOG.error('Could not reconnect volume %(vol)s of template '
                          '%(target)s: %(err)s', {
                              'vol': state['volume_id'], 'target': target,
                              'err': e})
                continue
            if os.path.islink(target) and os.readlink(target) == device:
                continue
            fileutils.delete_if_exists(target)
            os.symlink(device, target)
            state['device_path'] = device
            self._record(target, state)
            LOG.info('Template %s linked again to volume %s at %s', target,
                     state['volume_id'], device)

    def fetch_image(self, context: Any, image_id: str, target: str,
                    disk_format: str | None = None,
                    trusted_certs: Any = None) -> None:
        @base.template_lock(target)
        def link() -> bool:
            if os.path.lexists(target):
                return True
            meta = IMAGE_API.get(context, image_id, include_locations=True)
            volume_id = cinder_volume_id(meta)
            if volume_id is None:
                LOG.info('Image %s has no cinder location: downloading it',
                         image_id)
                return False
            try:
                self._link(context, meta, image_id, volume_id, target,
                           disk_format)
            except Exception as e:  # noqa: BLE001 - fall back, logged
                LOG.warning('Cannot link volume %(vol)s of image %(img)s '
                            '(%(err)s): downloading it', {
                                'vol': volume_id, 'img': image_id,
                                'err': e})
                return False
            return True

        if not link():
            self.fallback.fetch_image(context, image_id, target, disk_format,
                                      trusted_certs)

    def _link(self, context: Any, meta: dict[str, Any], image_id: str,
              volume_id: str, target: str, disk_format: str | None) -> None:
        props = brick_connector.get_connector_properties(
            utils.get_root_helper(), CONF.my_block_storage_ip, False, False,
            host=CONF.host)
        attachment = self.volume_api.attachment_create(
            context, volume_id, owner_uuid(CONF.host), connector=props)
        try:
            info = attachment['connection_info']
            if not info:
                info = self.volume_api.attachment_update(
                    context, attachment['id'], props)['connection_info']
            device = self._connect(info)
            try:
                self._check(meta, image_id, device, disk_format)
                os.symlink(device, target)
                self._record(target, {
                    'image_id': image_id, 'volume_id': volume_id,
                    'attachment_id': attachment['id'],
                    'connection_info': info, 'device_path': device})
                self.volume_api.attachment_complete(context,
                                                    attachment['id'])
            except Exception:
                fileutils.delete_if_exists(target)
                fileutils.delete_if_exists(self._state_path(target))
                self._connector(info).disconnect_volume(
                    info['data'], {'path': device})
                raise
        except Exception:
            self.volume_api.attachment_delete(context, attachment['id'])
            raise
        LOG.info('Template of image %(img)s linked to volume %(vol)s at '
                 '%(dev)s', {'img': image_id, 'vol': volume_id,
                             'dev': device})

    @staticmethod
    def _check(meta: dict[str, Any], image_id: str, device: str,
               disk_format: str | None) -> None:
        """The device holds the image as it is: inspect it as a download
        would be, and refuse what would need a conversion."""
        inspected = None
        if not CONF.workarounds.disable_deep_image_inspection:
            inspected = images.do_image_deep_inspection(meta, image_id,
                                                        device)
        data = images.qemu_img_info(device)
        fmt = data.file_format
        if inspected is not None and fmt != inspected:
            raise exception.ImageUnacceptable(
                image_id=image_id,
                reason=_('Image content does not match disk_format'))
        if data.backing_file is not None:
            raise exception.ImageUnacceptable(
                image_id=image_id, reason=_('backed by another image'))
        if disk_format is not None and fmt != disk_format:
            raise exception.ImageUnacceptable(
                image_id=image_id,
                reason=_('content is %(fmt)s, expected %(exp)s') % {
                    'fmt': fmt, 'exp': disk_format})
        if disk_format is None and fmt != 'raw' and CONF.force_raw_images:
            raise exception.ImageUnacceptable(
                image_id=image_id,
                reason=_('a %s volume would need converting to raw') % fmt)

    def remove_image(self, path: str) -> None:
        state = self.linked(path)
        if state is None:
            self.fallback.remove_image(path)
            return
        info = state['connection_info']
        self._connector(info).disconnect_volume(
            info['data'], {'path': state['device_path']})
        self.volume_api.attachment_delete(
            nova_context.get_admin_context(), state['attachment_id'])
        fileutils.delete_if_exists(path)
        fileutils.delete_if_exists(self._state_path(path))
        LOG.info('Template %s unlinked from volume %s', path,
                 state['volume_id'])

    def cached_bytes(self, path: str) -> int:
        if self.linked(path) is not None:
            return 0
        return super().cached_bytes(path)
