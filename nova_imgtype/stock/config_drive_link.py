"""A config drive stock deletes, kept.

On a host whose ``images_type`` is rbd, stock's ``_create_configdrive``
makes the drive as a file, imports it into the instance's config drive
backend, and then deletes the file, whatever that backend is: it assumes
the import copied it into Ceph. A config drive that stays a file (an
instance not on rbd: :class:`nova_imgtype.virt.libvirt.config_drive.
LocalConfigDrive`) is that very file, so its import keeps a second link to
it (:func:`keep`) and :func:`kept`, around stock's step, puts it back.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from oslo_log import log as logging

from nova_imgtype.stock.facts import SourceFact

LOG = logging.getLogger(__name__)

#: The name of the second link to a config drive stock is about to delete.
KEPT_SUFFIX = '.imgtype-kept'

FACTS = (
    SourceFact(
        'nova.virt.libvirt.driver:LibvirtDriver._create_configdrive',
        (r'config_disk\.import_file\(', r'finally:',
         r"if CONF\.libvirt\.images_type == 'rbd':",
         r'os\.unlink\(config_disk_local_path\)'),
        'stock deletes the drive it made after importing it, on an rbd '
        'host only, whatever the import did: kept() puts it back'),
)


def keep(local_file: str, path: str) -> None:
    """A second link to ``local_file`` (the drive stock made, which is the
    config drive ``path``), for :func:`kept` to put back."""
    kept_path = path + KEPT_SUFFIX
    if os.path.lexists(kept_path):
        os.unlink(kept_path)
    os.link(local_file, kept_path)


@contextlib.contextmanager
def kept(path: str) -> Iterator[None]:
    """Around stock's ``_create_configdrive`` of the drive ``path``: the
    drive :func:`keep` kept is put back at ``path`` once stock has deleted
    it (and the second link removed when stock did not), whatever stock's
    step ended in."""
    try:
        yield
    finally:
        kept_path = path + KEPT_SUFFIX
        if os.path.lexists(kept_path):
            if os.path.exists(path):
                os.unlink(kept_path)
            else:
                os.rename(kept_path, path)
                LOG.debug('Config drive %s kept a file of the instance',
                          path)
