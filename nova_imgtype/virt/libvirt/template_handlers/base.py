"""The contract of a template image handler.

A template is the file of the image cache (``<instances_path>/_base/<name>``)
that instance disks are made from: copied, converted, or used as the
backing file of a copy-on-write overlay. How a template comes to be there is
the handler's business: stock Nova downloads every byte
(:mod:`.downloading`); a handler may instead link something that already
holds the image (:mod:`.volume_linking`). The image backends get their
templates only through the handler selected by
``[image_cache]template_image_handler``.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Callable
from typing import Any

from nova import utils
from oslo_config import cfg

CONF = cfg.CONF


def template_lock(target: str) -> Callable[[Callable[..., Any]],
                                           Callable[..., Any]]:
    """The external lock a handler holds while it prepares ``target``.

    Named apart from the lock stock ``Image.cache()`` takes (the template's
    bare file name) around its fetch function, which is where handlers are
    called from: oslo.concurrency's locks are not reentrant, and one name
    for both would deadlock every build. Callers that reach a handler
    without ``Image.cache()`` (``init()`` aside, nothing in the driver does)
    are serialised by this one; the image cache manager calls
    ``remove_image()`` under stock's lock, like a build's fetch.
    """
    return utils.synchronized(
        'template-%s' % os.path.basename(target), external=True,
        lock_path=os.path.join(CONF.instances_path, 'locks'))


class BaseTemplateImageHandler(abc.ABC):
    """Prepares, re-prepares and removes the templates of the image cache.

    Every method may be called from several green threads and processes of
    one host at once; a handler serialises what needs it (an external lock
    per template) itself.
    """

    #: The name the handler is registered under in the stevedore namespace
    #: ``nova_imgtype.template_image_handlers``.
    name: str = ''
    #: Whether a template may be a symbolic link to data the handler does
    #: not own (a volume). Backends that would copy such a link as a link
    #: (``accepts_linked_templates`` False) then get their templates from
    #: the ``downloading`` handler instead.
    links_templates: bool = False

    def init(self, base_dir: str) -> None:  # noqa: B027 - optional hook
        """Re-prepare the templates after nova-compute (re)started.

        Called once from ``init_host``, before any instance is started. A
        handler whose templates do not survive a restart (a device that
        must be reconnected) brings them back here; a template it cannot
        bring back is reported, never silently dropped. The default does
        nothing: downloaded files survive restarts.

        :param base_dir: the image cache directory.
        """

    @abc.abstractmethod
    def fetch_image(self, context: Any, image_id: str, target: str,
                    disk_format: str | None = None,
                    trusted_certs: Any = None) -> None:
        """Make ``target`` the template of ``image_id``.

        On return ``target`` exists and is whole: the image's data, checked
        and inspected by :func:`.inspection.inspect` before it is put in
        place, converted to raw when stock would
        (``force_raw_images``) unless ``disk_format`` asks for the image in
        its own format. On failure nothing is left at ``target`` (nor any
        partial file next to it) and the error names the image and the
        reason. Does nothing if ``target`` exists.

        :param disk_format: the image's format when the instance uses it
            natively (no conversion; the content must be this format).
        :raises ImageUnacceptable: the image failed inspection, its hash did
            not match, or its data could not be written.
        """

    @abc.abstractmethod
    def remove_image(self, path: str) -> None:
        """Remove the unused template ``path`` and whatever holds it.

        Called by the image cache manager for a template no instance disk
        uses any more. Removes the file (or link) and releases what the
        handler holds for it (a connection, an attachment).
        """

    def cached_bytes(self, path: str) -> int:
        """Bytes of the image cache that the template at ``path`` uses."""
        return os.stat(path).st_blocks * 512
