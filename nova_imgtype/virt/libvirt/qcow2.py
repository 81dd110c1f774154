"""``qcow2``: stock's Qcow2 backend, safe with its own swap and ephemeral
bases, and without a ``qemu-img info`` per size.

Stock :meth:`nova.virt.libvirt.imagebackend.Qcow2.create_image`, finding
the disk already there (as ``finish_migration`` does after a cold migration
or resize copied it), reads its backing file name as a legacy
``<base>_<GiB>`` backing whenever the name ends in ``_<digits>``. Nova's own
bases are named that way: ``swap_<MiB>`` and ``ephemeral_<GiB>_<hash>``
(the hash can be all digits). Stock then copies the raw base to
``swap_1_1`` and resizes the copy as qcow2, which fails, and so does the
move (upstream tempest ``test_cold_migration_with_swap``).

This subclass sees the case stock misreads: a disk Nova made
(``safe=True``: swap, ephemeral), already there, whose backing file is the
base itself. It does what stock does for an existing disk (the base made if
missing, its time stamp renewed for the image cache manager, its size
checked) without the legacy step.

A new overlay on a raw or qcow2 image template is made with the facts the
format inspector of stock's own safety check read (:meth:`_overlay_on`),
and sizes are read in process (:mod:`.sizes`): stock runs ``qemu-img
info`` (a Python process through oslo's prlimit wrapper) four times for
what ``qemu-img create`` alone needs, and ``qemu-img create`` itself is
started without a ``fork()`` of nova-compute (:mod:`.spawn`).

A new overlay on a template linked to an image volume, which the volume's
owner can rewrite at any time, names as its backing format the one the
template was accepted in, checked again first
(:func:`.volume_linking.checked`), whatever
``[workarounds]disable_deep_image_inspection`` says: its content decides
no format (stock's overlay takes ``qemu-img info``'s probe of it).
"""

from __future__ import annotations

import os
from typing import Any

from nova import exception as nova_exception
from nova import utils
from nova.virt.libvirt import imagebackend
from nova.virt.libvirt import utils as libvirt_utils
from oslo_config import cfg
from oslo_log import log as logging
from oslo_utils import fileutils

from nova_imgtype import compat
from nova_imgtype.virt.libvirt import sizes
from nova_imgtype.virt.libvirt import spawn
from nova_imgtype.virt.libvirt.template_handlers import volume_linking

LOG = logging.getLogger(__name__)
CONF = cfg.CONF


class Qcow2(sizes.InProcessSizes, imagebackend.Qcow2):
    """A qcow2 overlay in the instance directory on a template in _base."""

    #: Formats used without conversion when this backend is mapped.
    native_disk_formats = ('qcow2',)
    #: The template is only a read-only backing of each overlay.
    accepts_linked_templates = True

    def create_image(self, *args: Any, **kwargs: Any) -> None:
        call = compat.called(
            'nova.virt.libvirt.imagebackend:Qcow2.create_image', self, args,
            kwargs)
        base: str = call['base']
        if call['safe'] and self._backs_onto(base):
            LOG.debug('%s already backs onto %s', self.path, base)
            if not os.path.exists(base):
                # Stock's own ``*args, **kwargs`` (all but its named
                # parameters): what it passes on to the fetch function.
                call['prepare_template'](*call['args'], target=base,
                                         **call['kwargs'])
            imagebackend._update_utime_ignore_eacces(base)
            self.verify_base_size(base, call['size'])
            return
        if not call['safe'] and not os.path.exists(self.path):
            if not os.path.exists(base):
                # As stock, first: the fetch function Image.cache() passes
                # takes the template's lock.
                call['prepare_template'](*call['args'], target=base,
                                         **call['kwargs'])
            if os.path.islink(base):
                self._overlay_on_link(base, call['size'])
                return
            if (not CONF.workarounds.disable_deep_image_inspection and
                    self._overlay_on(base, call['size'])):
                return
        super().create_image(*args, **kwargs)

    def _overlay_on(self, base: str, size: int | None) -> bool:
        """The overlay on a cached raw or qcow2 image template, made
        without ``qemu-img info``; False (nothing done) for a template of
        another format, left to stock.

        Stock's steps for a new overlay on an image template, in its order:
        Nova's format inspector's safety check of the template (backing
        file, data file, unknown qcow2 features: what stock then checks a
        second time from ``qemu-img info``), its time stamp renewed for the
        image cache manager, its size checked against the flavor's, and
        ``qemu-img create`` with the backing format and cluster size stock
        reads from ``qemu-img info`` (here from the header the inspector
        read), under the template's lock.

        :raises InvalidDiskInfo: the template failed the safety check.
        """
        inspector = sizes.checked_template(base)
        fmt = sizes.guest_format(inspector)
        if fmt is None:
            return False
        self.verify_base_size(base, size)

        @utils.synchronized(self._get_lock_name(base), external=True,
                            lock_path=self.lock_path)
        def create() -> None:
            self._create_overlay(base, fmt, inspector, size)

        create()
        return True

    def _overlay_on_link(self, base: str, size: int | None) -> None:
        """The overlay on the linked template ``base``, its backing format
        the one the template was accepted in, under the template's lock
        after the template was checked again
        (:func:`.volume_linking.checked`).

        :raises ImageUnacceptable: the template is not what was accepted
            (its link has been released); no overlay is made.
        """
        @utils.synchronized(self._get_lock_name(base), external=True,
                            lock_path=self.lock_path)
        def create() -> None:
            fmt, inspector = volume_linking.checked(base)
            self.verify_base_size(base, size)
            self._create_overlay(base, fmt, inspector, size)

        create()

    def _create_overlay(self, base: str, fmt: str, inspector: Any,
                        size: int | None) -> None:
        """``qemu-img create`` of the overlay on ``base``, its backing
        format ``fmt``, with the cluster size of a qcow2 template (as
        stock's)."""
        opts = ['backing_file=%s' % base, 'backing_fmt=%s' % fmt]
        if fmt == 'qcow2' and str(inspector) == 'qcow2':
            opts.append('cluster_size=%d' % (
                1 << inspector.qemu_header_info['cluster_bits']))
        cmd = ['qemu-img', 'create', '-f', 'qcow2', '-o', ','.join(opts),
               self.path]
        if size is not None:
            cmd.append(str(size))
        with fileutils.remove_path_on_error(self.path):
            # Stock's command, without forking nova-compute (.spawn).
            spawn.execute(*cmd, env_variables=dict(
                os.environ, LC_ALL='C', LANG='C'))

    def _backs_onto(self, base: str) -> bool:
        """Whether the disk exists with ``base`` as its backing file."""
        if not os.path.exists(self.path):
            return False
        # This backend's disks are qcow2, their headers written by
        # qemu-img, not by the guest: read as qcow2, never probed.
        try:
            backing = libvirt_utils.get_disk_backing_file(
                self.path, format='qcow2')
        except nova_exception.InvalidDiskInfo:
            return False        # not a qcow2 overlay: stock's case
        return backing is not None and (
            os.path.basename(backing) == os.path.basename(base))
