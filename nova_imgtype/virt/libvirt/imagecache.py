"""The image cache for images used in their own format.

Stock Nova caches an image as ``_base/<sha1(image_id)>``, converted to raw
when ``force_raw_images`` is set. An image an instance uses natively (through
``[libvirt]images_type_mapping``) is cached unconverted under its own name,
``_base/<sha1(image_id)>_<disk_format>``, so that one image cached natively
and converted on the same host never share a file. Stock's image cache
manager treats such a name like a resized base: kept while a disk is backed
by it, removed by the ``[image_cache]`` rules once unused. How a template
gets into the cache is the template image handler's job
(:mod:`nova_imgtype.virt.libvirt.template_handlers`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from nova import utils
from nova.virt.libvirt import imagecache
from oslo_config import cfg
from oslo_log import log as logging

from nova_imgtype import compat

LOG = logging.getLogger(__name__)
CONF = cfg.CONF

_STOCK = 'nova.virt.libvirt.imagecache:ImageCacheManager.'


def native_cache_fname(image_id: str, disk_format: str) -> str:
    """Cache file name of an image kept in its own ``disk_format``."""
    return '%s_%s' % (imagecache.get_cache_fname(image_id), disk_format)


def is_native_cache_fname(filename: str, image_id: str) -> bool:
    prefix = imagecache.get_cache_fname(image_id) + '_'
    return filename.startswith(prefix) and not filename[len(prefix):].isdigit()


def is_cache_fname_of(filename: str, image_id: str) -> bool:
    """Whether ``filename`` is a cache name of the image ``image_id``:
    stock's ``<sha1(image_id)>``, or the same followed by ``_`` and a
    suffix (a native format, or an old Nova's resized base)."""
    stock = imagecache.get_cache_fname(image_id)
    return filename == stock or filename.startswith(stock + '_')


def template_name(native_formats: tuple[str, ...], image_id: str,
                  disk_format: str | None) -> tuple[str, str | None]:
    """The cache file name of an image for a backend using
    ``native_formats`` natively, and the format it is kept in (None:
    converted as stock converts).

    A raw image is the same bytes either way: it keeps stock's file.
    """
    if (disk_format is not None and disk_format != 'raw' and
            disk_format in native_formats):
        return native_cache_fname(image_id, disk_format), disk_format
    return imagecache.get_cache_fname(image_id), None


class ImageCacheManager(imagecache.ImageCacheManager):
    """Stock's image cache manager, aware of storage pool volumes and of
    the template image handler.

    Stock finds the templates in use by running ``qemu-img info`` on each
    ``<instances_path>/<uuid>/disk``. Disks on ``nova-disks-pool`` are not
    there: their templates are read from each volume's ``<backingStore>``
    in libvirt, and a template in use by any volume or legacy disk is never
    removed. Unused ones go by the stock ``[image_cache]`` rules, through the
    handler's ``remove_image()`` (which releases what holds a linked
    template); linked templates (symbolic links) are listed like files.

    :param pool_backing_paths: returns the template paths the pool volumes
        are backed by; it must raise rather than answer partially, so that
        nothing is removed when libvirt cannot be asked.
    :param handler: the template image handler.
    """

    def __init__(self, pool_backing_paths: Callable[[], set[str]],
                 handler: Any = None) -> None:
        super().__init__()
        self._pool_backing_paths = pool_backing_paths
        self._handler = handler

    def _list_backing_images(self, *args: Any, **kwargs: Any) -> list[str]:
        in_use: list[str] = super()._list_backing_images(*args, **kwargs)
        for path in sorted(self._pool_backing_paths()):
            if path not in in_use:
                in_use.append(path)
            if path in self.unexplained_images:
                self.unexplained_images.remove(path)
        return in_use

    def _store_image(self, *args: Any, **kwargs: Any) -> None:
        call = compat.called(_STOCK + '_store_image', self, args, kwargs)
        entpath = os.path.join(call['base_dir'], call['ent'])
        if os.path.islink(entpath) and not os.path.isfile(entpath):
            # A template linked to a device.
            self.unexplained_images.append(entpath)
            if call['original']:
                self.originals.append(entpath)
            return
        super()._store_image(*args, **kwargs)

    def _remove_base_file(self, *args: Any, **kwargs: Any) -> None:
        """Remove an unused template, old enough, through the handler."""
        if self._handler is None:
            return super()._remove_base_file(*args, **kwargs)
        base_file: str = compat.called(_STOCK + '_remove_base_file', self,
                                       args, kwargs)['base_file']
        maxage = (
            CONF.image_cache.remove_unused_original_minimum_age_seconds
            if base_file in self.originals else
            CONF.image_cache.remove_unused_resized_minimum_age_seconds)
        exists, age = self._get_age_of_file(base_file)
        if not exists or age < maxage:
            return

        @utils.synchronized(os.path.basename(base_file), external=True,
                            lock_path=self.lock_path)
        def remove() -> None:
            # A new user may have come while we waited for the lock.
            exists, age = self._get_age_of_file(base_file)
            if exists and age >= maxage:
                LOG.info('Removing unused template %s', base_file)
                try:
                    self._handler.remove_image(base_file)
                except Exception as e:  # noqa: BLE001 - as stock's OSError
                    # One template that cannot go must not stop the pass
                    # (stock logs its failed os.remove and goes on).
                    LOG.error('Failed to remove template %(file)s, error '
                              'was %(error)s',
                              {'file': base_file, 'error': e})

        remove()
