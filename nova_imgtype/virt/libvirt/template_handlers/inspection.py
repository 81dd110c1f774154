"""The one inspection of a template before it enters the image cache.

Every way a template comes into ``<instances_path>/_base`` (downloaded,
linked to a volume, or anything a third-party handler does) goes through
:func:`inspect` before the template is put in place. It is stock Nova's
inspection, called rather than restated: ``nova.virt.images``'
``do_image_deep_inspection`` (the format inspector, unless
``[workarounds]disable_deep_image_inspection``), ``qemu_img_info`` and
``check_vmdk_image``. The checks stock keeps inline in ``fetch_to_raw``
(qemu-img must name a format and agree with the inspector; no backing file;
no qcow2 data-file; VMDK create types) live here once, and apply whatever
the workaround says, exactly as stock applies them to a download.
``tests/real/test_inspection.py`` compares the verdicts with stock
``fetch_to_raw``'s on the same crafted images, so that a stock fix which
changes a verdict shows up.
"""

from __future__ import annotations

from typing import Any

from nova import exception
from nova.i18n import _
from nova.virt import images
from oslo_config import cfg
from oslo_log import log as logging

LOG = logging.getLogger(__name__)
CONF = cfg.CONF


def inspect(meta: dict[str, Any], image_id: str, path: str,
            disk_format: str | None = None) -> str:
    """Inspect the image data at ``path`` as stock Nova inspects a download.

    :param meta: the image's metadata from the image service (its
        ``disk_format`` is what the content must be).
    :param disk_format: when the image is used natively, the format the
        content must also be.
    :returns: the format of the content, as qemu-img reads it.
    :raises ImageUnacceptable: naming the image and what is wrong with it.
    """
    inspected = None
    if not CONF.workarounds.disable_deep_image_inspection:
        inspected = images.do_image_deep_inspection(meta, image_id, path)
    data = images.qemu_img_info(path)
    fmt = data.file_format
    if fmt is None:
        raise exception.ImageUnacceptable(
            image_id=image_id, reason=_("'qemu-img info' parsing failed."))
    for expected in (inspected, disk_format):
        if expected is not None and fmt != expected:
            LOG.warning('Image %s detected by qemu as %s but we expected %s',
                        image_id, fmt, expected)
            raise exception.ImageUnacceptable(
                image_id=image_id,
                reason=_('Image content is %(fmt)s, expected %(exp)s') %
                {'fmt': fmt, 'exp': expected})
    if data.backing_file is not None:
        raise exception.ImageUnacceptable(
            image_id=image_id,
            reason=_('fmt=%(fmt)s backed by: %(backing_file)s') %
            {'fmt': fmt, 'backing_file': data.backing_file})
    try:
        data_file = data.format_specific['data']['data-file']
    except (KeyError, TypeError, AttributeError):
        data_file = None
    if data_file is not None:
        raise exception.ImageUnacceptable(
            image_id=image_id,
            reason=_('fmt=%(fmt)s has data-file: %(data_file)s') %
            {'fmt': fmt, 'data_file': data_file})
    if fmt == 'vmdk':
        images.check_vmdk_image(image_id, data)
    return str(fmt)
