"""The image cache for images used in their own format.

Stock Nova caches an image as ``_base/<sha1(image_id)>``, converted to raw
when ``force_raw_images`` is set. An image an instance uses natively (through
``[libvirt]images_type_mapping``) is cached unconverted under its own name,
``_base/<sha1(image_id)>_<disk_format>``, so that one image cached natively
and converted on the same host never share a file. Stock's image cache
manager treats such a name like a resized base: kept while a disk is backed
by it, removed by the ``[image_cache]`` rules once unused.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from nova import exception
from nova.i18n import _
from nova.image import glance
from nova.virt import images
from nova.virt.libvirt import imagecache
from oslo_config import cfg
from oslo_log import log as logging
from oslo_utils import fileutils

LOG = logging.getLogger(__name__)
CONF = cfg.CONF
IMAGE_API = glance.API()


def native_cache_fname(image_id: str, disk_format: str) -> str:
    """Cache file name of an image kept in its own ``disk_format``."""
    return '%s_%s' % (imagecache.get_cache_fname(image_id), disk_format)


def is_native_cache_fname(filename: str, image_id: str) -> bool:
    prefix = imagecache.get_cache_fname(image_id) + '_'
    return filename.startswith(prefix) and not filename[len(prefix):].isdigit()


def fetch_native(context: object, target: str, image_id: str,
                 disk_format: str, trusted_certs: object = None) -> None:
    """Download an image into ``target`` without converting it.

    The image passes the same inspection as stock ``fetch_to_raw``: the
    format inspector must agree with qemu-img and with the image's
    disk_format, and images with a backing file or a data-file (or unsafe
    VMDKs) are rejected. The download goes to ``<target>.part`` and is only
    renamed into place once accepted, so a failure leaves nothing in the
    cache.

    :raises ImageUnacceptable: naming the image and the reason.
    """
    path_tmp = '%s.part' % target
    with fileutils.remove_path_on_error(path_tmp):
        images.fetch(context, image_id, path_tmp, trusted_certs)
        if not CONF.workarounds.disable_deep_image_inspection:
            img = IMAGE_API.get(context, image_id)
            inspected = images.do_image_deep_inspection(img, image_id,
                                                        path_tmp)
        else:
            inspected = None
        data = images.qemu_img_info(path_tmp)
        fmt = data.file_format
        for expected in (inspected, disk_format):
            if expected is not None and fmt != expected:
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
        LOG.debug('Caching image %s in its own format %s', image_id, fmt)
        os.rename(path_tmp, target)


class ImageCacheManager(imagecache.ImageCacheManager):
    """Stock's image cache manager, aware of storage pool volumes.

    Stock finds the templates in use by running ``qemu-img info`` on each
    ``<instances_path>/<uuid>/disk``. Disks on ``nova-disks-pool`` are not
    there: their templates are read from each volume's ``<backingStore>``
    in libvirt, and a template in use by any volume or legacy disk is never
    removed. Unused ones go by the stock ``[image_cache]`` rules.

    :param pool_backing_paths: returns the template paths the pool volumes
        are backed by; it must raise rather than answer partially, so that
        nothing is removed when libvirt cannot be asked.
    """

    def __init__(self, pool_backing_paths: Callable[[], set[str]]) -> None:
        super().__init__()
        self._pool_backing_paths = pool_backing_paths

    def _list_backing_images(self) -> list[str]:
        in_use: list[str] = super()._list_backing_images()
        for path in sorted(self._pool_backing_paths()):
            if path not in in_use:
                in_use.append(path)
            if path in self.unexplained_images:
                self.unexplained_images.remove(path)
        return in_use
