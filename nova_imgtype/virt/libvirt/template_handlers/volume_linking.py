"""``volume-based-linking``: the Cinder volume behind an image, linked.

For an image stored by Glance's cinder store (a location ``cinder://...``),
the volume is attached to this host with a Cinder attachment (stock
``nova.volume.cinder``), connected with os-brick, and the template is a
symbolic link to the device: no byte is copied, whatever the image's size.
Instance disks are copy-on-write overlays on it. What is linked is recorded
next to the cache (``<base>/.linked/<template>.json``) so that ``init()``
reconnects after a restart and ``remove_image()`` disconnects the device
and deletes the attachment; the record also keeps the format the content
was accepted in (:func:`.inspection.inspect`), the one format every later
use of the template names.

The volume belongs to the image's project, which can rewrite it while
hosts keep it linked: before each disk is made from a linked template its
content is checked again (:func:`checked`, :func:`check_copy`), and so it
is before every other read of one (a guest's start, a snapshot before its
copy and before its upload, a live migration's arrival, a precache, a
rebase: :class:`.TemplateCache`). A template no longer what was accepted
is refused, never followed.

An image without a cinder location, a volume that cannot be attached or
connected, or content that would need a conversion (``force_raw_images``
on a non-raw image used through a converting backend) is downloaded
instead (:mod:`.downloading`), and the reason logged.
"""

from __future__ import annotations

import copy
import json
import os
import threading
import uuid
from typing import Any
from typing import NoReturn

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
from oslo_utils.imageutils import format_inspector

from nova_imgtype import exception as imgtype_exception
from nova_imgtype.virt.libvirt import sizes
from nova_imgtype.virt.libvirt.template_handlers import base
from nova_imgtype.virt.libvirt.template_handlers import downloading
from nova_imgtype.virt.libvirt.template_handlers import inspection

LOG = logging.getLogger(__name__)
CONF = cfg.CONF
IMAGE_API = glance.API()

#: Where links are recorded, under the image cache directory.
STATE_DIR = '.linked'
#: Namespace of the owner uuid of this host's template attachments.
_OWNER_NS = uuid.UUID('8f7c0b1e-2c4a-4d7e-9a51-6b0f3c9e2d11')


#: The format Nova's format inspector read in a template when it was
#: linked, recorded with it.
INSPECTED = 'inspected_format'
#: Image formats whose content stock's deep inspection does not compare
#: with the inspector's verdict (``nova.virt.images``' AMI formats).
_UNCOMPARED_FORMATS = ('ami', 'aki', 'ari')
#: Cinder's first microversion with attachment modes (``mode='ro'``).
READ_ONLY_MICROVERSION = '3.54'


class ImageVolumeAPI(cinder.API):
    """Stock's Cinder API, with read-only attachments for image volumes."""

    @cinder.translate_volume_exception
    def attachment_create_read_only(self, context: Any, volume_id: str,
                                    instance_id: str,
                                    connector: dict[str, Any]
                                    ) -> dict[str, Any]:
        """A read-only attachment where Cinder has attachment modes.

        Older Cinder (before 3.54) has none: stock's attachment, which is
        read-write, is made instead and that is logged. Nothing here writes
        to a linked template either way: instance disks are overlays on it
        (opened read-only by QEMU) or copies of its data.
        """
        try:
            client = cinder.cinderclient(context, READ_ONLY_MICROVERSION)
        except exception.CinderAPIVersionNotAvailable:
            LOG.info('Cinder has no read-only attachments (microversion '
                     '%(v)s): volume %(vol)s is attached read-write', {
                         'v': READ_ONLY_MICROVERSION, 'vol': volume_id})
            result: dict[str, Any] = self.attachment_create(
                context, volume_id, instance_id, connector=connector)
            return result
        ref = client.attachments.create(volume_id, connector, instance_id,
                                        mode='ro')
        translated: dict[str, Any] = cinder._translate_attachment_ref(ref)
        return translated


def owner_uuid(host: str) -> str:
    """The "instance" this host's template attachments belong to."""
    return str(uuid.uuid5(_OWNER_NS, host))


def _readable(path: str) -> bool:
    """Whether ``path`` (through any link) opens for reading."""
    try:
        with open(path, 'rb'):
            return True
    except OSError:
        return False


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
    links_templates = True

    def __init__(self) -> None:
        self.fallback = downloading.DownloadingTemplateImageHandler()
        self.volume_api = ImageVolumeAPI()
        self._props: dict[str, Any] | None = None
        self._props_lock = threading.Lock()

    # -- state --------------------------------------------------------------

    @staticmethod
    def _state_path(target: str) -> str:
        return os.path.join(os.path.dirname(target), STATE_DIR,
                            os.path.basename(target) + '.json')

    def linked(self, target: str) -> dict[str, Any] | None:
        """What is recorded for a linked template, None if not linked."""
        return linked_state(target)

    def _record(self, target: str, state: dict[str, Any]) -> None:
        _record_state(target, state)

    # -- os-brick -----------------------------------------------------------

    def connector_properties(self) -> dict[str, Any]:
        """This host's os-brick connector, as Cinder is told of it.

        Probed once per handler (os-brick runs a process for each fact:
        ``nvme``, ``cat``, ``findmnt``, ``blkid``, ``dmidecode``, about
        130 ms in all) and kept: they are facts of the host (initiator
        name, NQN, host id, address) and of options read at start. A link
        that fails forgets them (:meth:`_forget_connector`), so that the
        next one probes again.
        """
        with self._props_lock:
            if self._props is None:
                self._props = brick_connector.get_connector_properties(
                    utils.get_root_helper(), CONF.my_block_storage_ip,
                    False, False, host=CONF.host)
            return copy.deepcopy(self._props)

    def _forget_connector(self) -> None:
        with self._props_lock:
            self._props = None

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
                self._relink(target, state)
            except Exception as e:  # noqa: BLE001 - reported, kept
                LOG.error('Could not reconnect volume %(vol)s of template '
                          '%(target)s: %(err)s', {
                              'vol': state['volume_id'], 'target': target,
                              'err': e})

    def _relink(self, target: str, state: dict[str, Any]) -> None:
        """Connect the recorded volume again and point ``target`` at it."""
        device = self._connect(state['connection_info'])
        if not _readable(device):
            raise exception.DiskNotFound(location=device)
        if os.path.islink(target) and os.readlink(target) == device:
            return
        tmp = '%s.relink' % target
        fileutils.delete_if_exists(tmp)
        os.symlink(device, tmp)
        os.rename(tmp, target)
        state['device_path'] = device
        self._record(target, state)
        LOG.info('Template %s linked again to volume %s at %s', target,
                 state['volume_id'], device)

    def _repair(self, target: str) -> bool:
        """Bring back a template whose link is dangling, unreadable or gone.

        Reconnected through what was recorded when that works; otherwise
        the link and its attachment are released, so that the caller
        fetches the template anew. Called under the template's lock.

        :returns: whether ``target`` is usable again.
        """
        state = self.linked(target)
        if state is not None:
            try:
                self._relink(target, state)
                return True
            except Exception as e:  # noqa: BLE001 - fetched again
                LOG.warning('Linked template %(target)s is unreadable and '
                            'volume %(vol)s could not be reconnected '
                            '(%(err)s): fetching the image again', {
                                'target': target, 'vol': state['volume_id'],
                                'err': e})
            self._release(target, state)
        else:
            LOG.warning('Template %s is unreadable and not recorded as '
                        'linked: fetching the image again', target)
            fileutils.delete_if_exists(target)
        return False

    def _release(self, target: str, state: dict[str, Any]) -> None:
        """Remove the link, then the connection and the attachment, then
        the record (kept while something is left to release)."""
        fileutils.delete_if_exists(target)
        info = state['connection_info']
        try:
            self._connector(info).disconnect_volume(
                info['data'], {'path': state['device_path']})
        except Exception as e:  # noqa: BLE001 - the device may be gone
            LOG.warning('Could not disconnect volume %(vol)s of template '
                        '%(target)s: %(err)s', {'vol': state['volume_id'],
                                                'target': target, 'err': e})
        self.volume_api.attachment_delete(
            nova_context.get_admin_context(), state['attachment_id'])
        fileutils.delete_if_exists(self._state_path(target))

    def fetch_image(self, context: Any, image_id: str, target: str,
                    disk_format: str | None = None,
                    trusted_certs: Any = None) -> None:
        @base.template_lock(target)
        def link() -> bool:
            if os.path.islink(target) or self.linked(target):
                if _readable(target) or self._repair(target):
                    return True
            elif os.path.exists(target):
                return True             # downloaded (the fallback's file)
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
        props = self.connector_properties()
        try:
            attachment = self.volume_api.attachment_create_read_only(
                context, volume_id, owner_uuid(CONF.host), props)
        except Exception:
            self._forget_connector()
            raise
        try:
            info = attachment['connection_info']
            if not info:
                info = self.volume_api.attachment_update(
                    context, attachment['id'], props)['connection_info']
            device = self._connect(info)
            try:
                fmt = self._check(meta, image_id, device, disk_format)
                os.symlink(device, target)
                self._record(target, {
                    'image_id': image_id, 'volume_id': volume_id,
                    'attachment_id': attachment['id'],
                    'connection_info': info, 'device_path': device,
                    'format': fmt,
                    INSPECTED: _inspector_reading(meta, device, fmt)})
                self.volume_api.attachment_complete(context,
                                                    attachment['id'])
            except Exception:
                fileutils.delete_if_exists(target)
                fileutils.delete_if_exists(self._state_path(target))
                self._connector(info).disconnect_volume(
                    info['data'], {'path': device})
                raise
        except Exception:
            self._forget_connector()
            self.volume_api.attachment_delete(context, attachment['id'])
            raise
        LOG.info('Template of image %(img)s linked to volume %(vol)s at '
                 '%(dev)s', {'img': image_id, 'vol': volume_id,
                             'dev': device})

    @staticmethod
    def _check(meta: dict[str, Any], image_id: str, device: str,
               disk_format: str | None) -> str:
        """The device holds the image as it is: inspected as a download is
        (:func:`.inspection.inspect`), and refused when it would need a
        conversion.

        :returns: the format it is accepted in (recorded with the link).
        """
        fmt = inspection.inspect(meta, image_id, device, disk_format)
        if disk_format is None and fmt != 'raw' and CONF.force_raw_images:
            raise exception.ImageUnacceptable(
                image_id=image_id,
                reason=_('a %s volume would need converting to raw') % fmt)
        return fmt

    def remove_image(self, path: str) -> None:
        state = self.linked(path)
        if state is None:
            self.fallback.remove_image(path)
            return
        self._release(path, state)
        LOG.info('Template %s unlinked from volume %s', path,
                 state['volume_id'])

    def cached_bytes(self, path: str) -> int:
        if self.linked(path) is not None:
            return 0
        return super().cached_bytes(path)


def linked_state(target: str) -> dict[str, Any] | None:
    """What is recorded for the linked template ``target``, None if it is
    not linked."""
    try:
        with open(VolumeLinkingTemplateImageHandler._state_path(target)) as f:
            state: dict[str, Any] = json.load(f)
    except FileNotFoundError:
        return None
    return state


def _record_state(target: str, state: dict[str, Any]) -> None:
    """Record what is linked as ``target``, atomically (a rename)."""
    path = VolumeLinkingTemplateImageHandler._state_path(target)
    fileutils.ensure_tree(os.path.dirname(path))
    with open(path + '.tmp', 'w') as f:
        json.dump(state, f)
    os.rename(path + '.tmp', path)


def checked(target: str) -> tuple[str, Any]:
    """The format the linked template ``target`` was accepted in, its
    content checked again: what every use of it names; and Nova's format
    inspector that checked it.

    Called before each disk is made from a linked template, under the
    template's lock (stock's, which the image cache manager also holds to
    remove a template). Nova's format inspector reads the content as it is
    now and makes its safety check (:func:`sizes.checked_template`:
    backing file, data file, unknown qcow2 features...); the format it
    finds must be the recorded one. Nothing is taken from the content: a
    template that changed is refused (:func:`_refuse`).

    A link of an earlier release, recorded without a format, is accepted
    as it is accepted when linked: its content passes the safety check
    now, and the format found is recorded for every later use.

    :raises LinkedTemplateChanged: naming the image and the template.
    """
    state = linked_state(target)
    if state is None:
        _refuse(target, state, None, _('it is not recorded as linked'))
    fmt = state.get('format')
    if fmt is None:
        inspector = _check_content(target, target, state, None)
        fmt = sizes.template_format(inspector)
        _record_state(target, dict(state, format=fmt, **{INSPECTED: fmt}))
        LOG.info('Linked template %(target)s of image %(image)s: format '
                 '%(fmt)s recorded', {'target': target, 'fmt': fmt,
                                      'image': state.get('image_id')})
        return fmt, inspector
    return str(fmt), _check_content(target, target, state, _inspected(state))


def check_copy(target: str, copy: str) -> None:
    """``copy``, the bytes of the linked template ``target`` just copied
    into a file of this host, still reads as what was accepted.

    The volume can be rewritten between :func:`checked` and the copy; the
    copy cannot, and is what the disk is. On failure the caller removes
    the copy.

    :raises LinkedTemplateChanged: as :func:`checked`.
    """
    state = linked_state(target)
    _check_content(target, copy, state,
                   _inspected(state) if state is not None else None)


def _inspector_reading(meta: dict[str, Any], device: str, fmt: str) -> str:
    """What Nova's format inspector reads in ``device``, just accepted in
    ``fmt`` (:func:`.inspection.inspect`): what every use compares with.

    When the deep inspection made the check, that is ``fmt`` itself:
    :func:`.inspection.inspect` refuses a device whose format as qemu-img
    reads it differs from the inspector's verdict, and that verdict names
    a GPT or ISO 9660 raw disk raw, as :func:`sizes.template_format` does.
    Without it (``[workarounds]disable_deep_image_inspection``), or for an
    AMI-style image whose inspector's verdict stock does not compare, the
    inspector reads the device.
    """
    if (not CONF.workarounds.disable_deep_image_inspection and
            meta.get('disk_format') not in _UNCOMPARED_FORMATS):
        return fmt
    return sizes.template_format(images.get_image_format(device))


def _inspected(state: dict[str, Any]) -> str:
    """What Nova's format inspector read in the template when it was
    linked (its recorded format, for a link recorded before this was):
    what it must read at each use. With
    ``[workarounds]disable_deep_image_inspection`` the accepted format came
    from ``qemu-img``, and may differ (a truncated qcow2 is raw to the
    inspector); the inspector is compared with itself."""
    return str(state.get(INSPECTED) or state['format'])


def _check_content(target: str, path: str, state: dict[str, Any] | None,
                   fmt: str | None) -> Any:
    """Nova's format inspector of ``path`` (``target`` or a copy of it),
    after its safety check, when the format it finds (named as qemu-img
    names it: raw for a GPT or ISO 9660 raw disk) is ``fmt``; otherwise
    the template is refused."""
    try:
        inspector = sizes.checked_template(path)
    except (exception.InvalidDiskInfo,
            format_inspector.ImageFormatError) as e:
        _refuse(target, state, fmt, _('its content fails Nova\'s '
                                      'inspection: %s') % e)
    found = sizes.template_format(inspector)
    if fmt is not None and found != fmt:
        _refuse(target, state, fmt, _('its content is now %s') % found)
    return inspector


def _refuse(target: str, state: dict[str, Any] | None, fmt: str | None,
            reason: str) -> NoReturn:
    """Refuse the linked template ``target`` for this use, logged.

    The link stays: disks made on it before (qcow2 overlays, running
    guests) still use the volume, and releasing it would take their
    backing from under them. The template is refused at each use until
    its volume holds again what was accepted, or the image cache manager
    removes it once no disk uses it (the next build then links the image
    anew, inspected).

    :raises LinkedTemplateChanged: always, naming the image and the
        template.
    """
    image_id = (state or {}).get('image_id') or os.path.basename(target)
    error = imgtype_exception.LinkedTemplateChanged(
        image_id=image_id, template=target, fmt=fmt or _('no format'),
        reason=reason)
    LOG.error('%s. Refused, never followed: no disk is made on it until '
              'its volume holds what was accepted, or it is unused and '
              'the image cache manager removes it', error)
    raise error
