"""``flat`` (and ``raw``): stock's Flat backend, safe with linked templates.

Stock :class:`nova.virt.libvirt.imagebackend.Flat` copies the template into
the instance directory with ``cp -r``, which copies a symbolic link as a
link. A template linked to a volume (``volume-based-linking``) would so
become every instance's disk: one tenant reading what another wrote, and a
resize growing the image volume itself. This subclass copies the bytes of a
linked template (``qemu-img convert -f raw``, sparse) into the instance's
own file, which must then read as the format the template was accepted in
(:func:`.volume_linking.check_copy`): the volume's owner can rewrite it at
any time, and its content never decides a format nor has a backing file
followed. Any other template is copied with stock's
own ``cp -r``, started without a ``fork()`` of nova-compute
(:func:`.spawn.execute`); stock then finds the disk made and goes on
(``verify_base_size``, ``correct_format``; ``Image.cache`` resizes it).
The sizes stock asks of the template are read in this process
(:mod:`.sizes`), as the Qcow2 backend's are, and so is the format of a
new disk (which stock's ``correct_format`` asks ``qemu-img info`` for
once, then keeps in ``disk.info``) when Nova's format inspector finds it
raw or qcow2 and Nova's deep image inspection is on.
"""

from __future__ import annotations

import os
from typing import Any

import nova.conf
from nova import utils
from nova.virt import images
from nova.virt.libvirt import imagebackend
from oslo_log import log as logging
from oslo_utils import fileutils

from nova_imgtype import compat
from nova_imgtype.virt.libvirt import pool_dir
from nova_imgtype.virt.libvirt import sizes
from nova_imgtype.virt.libvirt import spawn
from nova_imgtype.virt.libvirt.template_handlers import volume_linking

CONF = nova.conf.CONF
LOG = logging.getLogger(__name__)


class Flat(sizes.InProcessSizes, imagebackend.Flat):
    """A raw (or as-is) copy of the template in the instance directory."""

    #: Formats used without conversion when this backend is mapped.
    native_disk_formats = ('raw',)
    #: A linked template is copied as data, never as a link.
    accepts_linked_templates = True

    #: The format the instance's record names for this disk
    #: (:func:`.file_formats.named`), which decides over ``disk.info``: set
    #: on the class :func:`recording` makes.
    recorded_format: str | None = None
    #: Whether create_image is making the disk now: only then are its
    #: bytes Nova's (the template's, or a new file system).
    _making = False

    def resolve_driver_format(self, *args: Any, **kwargs: Any) -> str:
        """The record's format for the disk where it names one (and
        ``disk.info`` made to agree), else stock's: ``disk.info``, then
        :meth:`_get_driver_format`."""
        if not self.recorded_format:
            return str(super().resolve_driver_format(*args, **kwargs))
        fmt = self.recorded_format
        directory = os.path.dirname(self.path)
        if (os.path.exists(self.path) and
                pool_dir.disk_info(directory).get(self.path) != fmt):
            @utils.synchronized(self.disk_info_path or '', external=False,
                                lock_path=self.lock_path)
            def write() -> None:
                pool_dir.write_formats(directory,
                                       {os.path.basename(self.path): fmt})

            write()
        return fmt

    def create_image(self, *args: Any, **kwargs: Any) -> None:
        self._making = not os.path.exists(self.path)
        try:
            self._make_disk(*args, **kwargs)
        finally:
            self._making = False

    def _make_disk(self, *args: Any, **kwargs: Any) -> None:
        call = compat.called(
            'nova.virt.libvirt.imagebackend:Flat.create_image', self, args,
            kwargs)
        base: str = call['base']
        # Stock's own ``*args, **kwargs`` (all but its named parameters):
        # what it passes on to the fetch function.
        fetch_args, fetch_kwargs = call['args'], call['kwargs']
        if 'image_id' in fetch_kwargs and not os.path.exists(self.path):
            if not os.path.exists(base):
                # As stock (which then finds it there): the fetch function
                # passed by Image.cache() takes the template's lock.
                call['prepare_template'](*fetch_args, target=base,
                                         **fetch_kwargs)
            self._copy_template(base, call['size'])
        super().create_image(*args, **kwargs)

    def _get_driver_format(self, *args: Any, **kwargs: Any) -> str:
        """The format of a disk that neither the record nor ``disk.info``
        names, for stock's ``resolve_driver_format`` (which keeps it in
        ``disk.info``).

        A disk that existed before (its bytes the guest's): raw, as the
        backend makes its disks; never read from its content. A disk
        create_image makes now: raw or qcow2 as Nova's format inspector
        reads it here (:func:`.sizes.disk_format`); any other, stock's
        ``qemu-img info``.

        With deep inspection on (Nova's default), Nova took no image whose
        format its inspector and ``qemu-img`` disagree on, so a template
        and a copy of it read the same to both. With
        ``[workarounds]disable_deep_image_inspection``, qemu-img decided
        the images' formats: it decides the disks' too, as in stock.
        """
        if not self._making:
            LOG.warning('No format recorded for %s (nor in disk.info): '
                        'given to QEMU as raw, its content not probed',
                        self.path)
            return 'raw'
        if not CONF.workarounds.disable_deep_image_inspection:
            fmt = sizes.disk_format(self.path)
            if fmt is not None:
                return fmt
        return str(super()._get_driver_format(*args, **kwargs))

    def _copy_template(self, base: str, size: int | None) -> None:
        """The template into the disk, under the template's lock (the one
        stock's copy holds: the image cache manager removes no template
        while it is held), after stock's check of the flavor's size
        (``verify_base_size``), which comes before its copy.

        A link (to an image volume): :meth:`_copy_linked`. Anything else:
        stock's ``cp -r`` (sparse, as stock's), by :func:`.spawn.execute`,
        which spares nova-compute the ``fork()`` oslo's ``processutils``
        makes for every command.
        """
        linked = os.path.islink(base)
        if not linked:
            self.verify_base_size(base, size)

        @utils.synchronized(self._get_lock_name(base), external=True,
                            lock_path=self.lock_path)
        def copy() -> None:
            if linked:
                self._copy_linked(base, size)
                return
            with fileutils.remove_path_on_error(self.path):
                spawn.execute('cp', '-r', base, self.path)

        copy()

    def _copy_linked(self, base: str, size: int | None) -> None:
        """The bytes of the linked template ``base`` into the disk.

        The template is checked again first (:func:`.volume_linking.
        checked`: its content must still be the format it was accepted
        in), then copied as bytes (``-f raw``: nothing in it is read as a
        format, no backing file followed), and the copy checked as the
        accepted format (:func:`.volume_linking.check_copy`): the volume
        can change between the two, the copy cannot. A refused template
        leaves no disk.

        :raises ImageUnacceptable: the template is not what was accepted
            (its link has been released).
        """
        fmt, _inspector = volume_linking.checked(base)
        self.verify_base_size(base, size)
        LOG.debug('Copying the bytes of linked template %s (%s) into %s',
                  base, fmt, self.path)
        with fileutils.remove_path_on_error(self.path):
            images.convert_image(base, self.path, 'raw', 'raw')
            volume_linking.check_copy(base, self.path)


#: The classes :func:`recording` made, one per (class, format).
_RECORDING: dict[tuple[type, str], type[Flat]] = {}


def recording(cls: type[Flat], fmt: str) -> type[Flat]:
    """``cls`` for disks whose record names their format ``fmt``."""
    made = _RECORDING.get((cls, fmt))
    if made is None:
        made = _RECORDING.setdefault((cls, fmt), type(
            '%s_%s' % (cls.__name__, fmt), (cls,),
            {'recorded_format': fmt, '__module__': cls.__module__}))
    return made
