"""``downloading``: every byte of the image from the image service.

Stock Nova's way, made safe to interrupt: the image is streamed through
Nova's image API into ``<target>.part``, inspected as stock's
``fetch_to_raw`` does (:mod:`.inspection`), converted to raw when stock
would, and only then renamed into place. A download cut off, a corrupt
download or a full disk leave no file behind. One download per template
per host: an external lock per template, and nothing is fetched when the
template exists.

Who verifies what, each once:

* Glance computes the image's ``os_hash_value`` (with ``os_hash_algo``,
  sha512 by default) as the image is uploaded.
* Nova's image API reads the data through glanceclient's ``images.data``,
  which hashes each chunk as it is read and raises ``IOError`` ("Corrupt
  image download") after the last one when the hash differs from
  ``os_hash_value`` (from the md5 ``checksum`` of an image without one).
  That is the check of the data: this handler does not hash it again, as
  stock's ``fetch_to_raw`` does not.
* With ``[glance]verify_glance_signatures``, Nova's signature verifier, in
  the same download.
* The content: :func:`.inspection.inspect` (Nova's format inspector and
  ``qemu-img info``), as stock.

The file holds the bytes glanceclient verified, with runs of zeros left as
holes (:class:`HoleKeepingWriter`): a raw image takes in the cache, and in
the fsync, only what its data takes.

What is synced: what goes into the cache, once. A download kept as the
template is fsync'd before it is renamed into place (stock fsyncs every
download, for the same reason: no instance on a template a host crash
left half-written). A download converted to raw is not: the conversion
reads it back from the page cache and it is deleted after; the template is
the conversion's output, which ``qemu-img convert`` flushes itself as it
closes it (``tests/real/test_template_handlers.py`` watches it do so).
Stock fsyncs that download as well, then throws it away: about a second
of writeback for a 1 GiB file here, on the path of every cold boot of a
converted image.
"""

from __future__ import annotations

import functools
import os
from typing import Any
from typing import BinaryIO

from nova import exception
from nova.i18n import _
from nova.image import glance
from nova.virt import images
from oslo_config import cfg
from oslo_log import log as logging
from oslo_utils import fileutils

from nova_imgtype.virt.libvirt.template_handlers import base
from nova_imgtype.virt.libvirt.template_handlers import inspection

LOG = logging.getLogger(__name__)
CONF = cfg.CONF
IMAGE_API = glance.API()


class DownloadingTemplateImageHandler(base.BaseTemplateImageHandler):
    """Templates downloaded from the image service, checked, inspected."""

    name = 'downloading'

    def fetch_image(self, context: Any, image_id: str, target: str,
                    disk_format: str | None = None,
                    trusted_certs: Any = None) -> None:
        @base.template_lock(target)
        def fetch() -> None:
            if os.path.exists(target):
                return
            part = '%s.part' % target
            with fileutils.remove_path_on_error(part):
                meta = self.download(context, image_id, part, trusted_certs)
                prepare(meta, image_id, part, target, disk_format)

        fetch()

    @staticmethod
    def download(context: Any, image_id: str, path: str,
                 trusted_certs: Any = None) -> dict[str, Any]:
        """Stream the image into ``path``, as glanceclient verified it;
        runs of zeros are left as holes (:class:`HoleKeepingWriter`). The
        file is written, not synced: :func:`prepare` syncs it if it is
        kept.

        :returns: the image's metadata.
        :raises ImageUnacceptable: the download failed: cut off, corrupt
            (glanceclient's hash check) or not written (a full disk, say).
        """
        meta: dict[str, Any] = IMAGE_API.get(context, image_id)
        try:
            with open(path, 'wb') as f:
                IMAGE_API.download(context, image_id,
                                   data=HoleKeepingWriter(f),
                                   trusted_certs=trusted_certs)
                # The size, where the image ends in a hole.
                f.truncate()
        except OSError as e:
            raise exception.ImageUnacceptable(
                image_id=image_id,
                reason=_('could not download the image into %(path)s: '
                         '%(err)s') % {'path': path, 'err': e}) from e
        return meta

    def remove_image(self, path: str) -> None:
        fileutils.delete_if_exists(path)


class HoleKeepingWriter:
    """The file a download is written into, with its holes kept.

    A raw image is mostly zeros (the free space of its file systems), and
    Glance sends them all; stock writes each one and then fsyncs them,
    allocating the whole virtual size in the image cache. Here a chunk that
    is all zeros moves the file's position instead: the file reads back the
    same bytes (a hole reads as zeros), and only the data is written,
    allocated and flushed. The caller sets the size at the end
    (``truncate()`` at the final position), in case the image ends in a
    hole.

    What Nova's image API calls on ``data``: ``write`` for each chunk, and
    ``truncate(0)`` when the image's signature does not verify.
    """

    def __init__(self, f: BinaryIO) -> None:
        self._f = f

    def write(self, chunk: bytes) -> int:
        n = len(chunk)
        if chunk == _zeros(n):
            self._f.seek(n, os.SEEK_CUR)
        else:
            self._f.write(chunk)
        return n

    def truncate(self, size: int | None = None) -> int:
        return self._f.truncate(size)


@functools.lru_cache(maxsize=4)
def _zeros(n: int) -> bytes:
    """``n`` zero bytes, kept for the chunk sizes a download uses."""
    return bytes(n)


def prepare(meta: dict[str, Any], image_id: str, part: str, target: str,
            disk_format: str | None = None) -> None:
    """Inspect a downloaded image and put it in place as ``target``.

    The one inspection (:func:`.inspection.inspect`, stock ``fetch_to_raw``'s
    checks) first; for an image used natively the content must also be
    ``disk_format``. Unless used natively, a non-raw image is converted to
    raw when ``force_raw_images`` is set. ``part`` is consumed: fsync'd and
    renamed to ``target`` when kept as it is, deleted once converted (the
    conversion's output, which qemu-img flushed, becomes ``target``).

    :raises ImageUnacceptable: naming the image and the reason.
    """
    fmt = inspection.inspect(meta, image_id, part, disk_format)
    if disk_format is None and fmt != 'raw' and CONF.force_raw_images:
        staged = '%s.converted' % target
        with fileutils.remove_path_on_error(staged):
            LOG.debug('%s was %s, converting to raw', image_id, fmt)
            try:
                images.convert_image(part, staged, fmt, 'raw')
            except exception.ImageUnacceptable as e:
                raise exception.ImageUnacceptable(
                    image_id=image_id,
                    reason=_('Unable to convert image to raw: %s') % e
                ) from e
            os.unlink(part)
            converted = images.qemu_img_info(staged).file_format
            if converted != 'raw':
                raise exception.ImageUnacceptable(
                    image_id=image_id,
                    reason=_('Converted to raw, but format is now %s') %
                    converted)
            os.rename(staged, target)
    else:
        fsync(image_id, part)
        os.rename(part, target)


def fsync(image_id: str, path: str) -> None:
    """Flush the data of the downloaded file ``path`` to the disk.

    :raises ImageUnacceptable: it could not be (a full disk found only as
        the data is written back, say).
    """
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise exception.ImageUnacceptable(
            image_id=image_id,
            reason=_('could not write the image into %(path)s: %(err)s') %
            {'path': path, 'err': e}) from e
