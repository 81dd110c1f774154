"""The config drive of an instance that is not on pools: a raw file.

Stock makes the config drive ``disk.config`` in the instance directory and,
on a host whose ``images_type`` is rbd, imports it into Ceph
(``{uuid}_disk.config``) and deletes the file. For an instance on rbd that
is stock's rule, kept. For any other instance (``qcow2:qcow2`` on an rbd
host) it would leave in Ceph an image that stock's ``_cleanup_rbd``
removes with every ``{uuid}*`` image whenever a host destroys the
instance's disks: the source of an evacuation coming back would so delete
the config drive the destination now uses. Such an instance's config drive
stays a file (the record says so: :data:`nova_imgtype.record.CONFIG_DRIVE`),
as stock makes it on every other host.

:class:`LocalConfigDrive` is that file. Its format is raw, as stock makes
it: never read from its bytes (a vfat config drive is the guest's to
write). Stock deletes the file it made once it has imported it on an rbd
host, whatever the backend it imported it into; the import into this
backend keeps a second link to it, which the driver puts back once
stock's step is over (:mod:`nova_imgtype.stock.config_drive_link`).
"""

from __future__ import annotations

import os
from typing import Any

import nova.conf
from oslo_log import log as logging

from nova_imgtype import compat
from nova_imgtype.stock import config_drive_link
from nova_imgtype.virt.libvirt import flat

CONF = nova.conf.CONF
LOG = logging.getLogger(__name__)

_IMPORT = 'nova.virt.libvirt.imagebackend:Image.import_file'


class LocalConfigDrive(flat.Flat):
    """A config drive in the instance directory, raw."""

    def _get_driver_format(self, *args: Any, **kwargs: Any) -> str:
        """Raw, as stock makes every config drive; never read from it."""
        return 'raw'

    def import_file(self, *args: Any, **kwargs: Any) -> None:
        """The drive stock made at ``local_file`` is this disk: nothing is
        copied (as stock's file backends). On an rbd host stock deletes
        ``local_file`` next: a second link keeps it
        (:mod:`nova_imgtype.stock.config_drive_link`)."""
        local_file: str = compat.called(_IMPORT, self, args,
                                        kwargs)['local_file']
        if (CONF.libvirt.images_type != 'rbd' or
                os.path.realpath(local_file) != os.path.realpath(self.path)):
            return
        config_drive_link.keep(local_file, self.path)
