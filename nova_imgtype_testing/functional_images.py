"""Images for the functional tests: real image files served by Nova's
GlanceFixture, and the uploads (snapshots) a test captures.

:class:`ImagesMixin` is part of
:class:`nova_imgtype_testing.functional.ImgtypeServersTestBase`: it needs
the stock harness's ``glance`` fixture and ``mock_file_open``, and the
base's ``image_files`` and ``_image_dir``. It touches no private name of
stock Nova (``tests/unit/test_stock_private_names.py`` reads only classes
with stock bases): what does, such as ``snapshot_and_wait``, stays in the
base.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Mapping
from typing import Any

import fixtures

#: Glance disk_format -> qemu-img format name, where they differ.
_QEMU_FORMAT = {'vhd': 'vpc', 'ploop': 'parallels'}

#: Written at offset 0 of every image :meth:`ImagesMixin.create_image`
#: makes, so a test can check that the bytes on disk came from the image.
IMAGE_MARKER = b'nova-imgtype functional image\n'


class ImagesMixin:
    """Real images in Nova's GlanceFixture, and the uploads of a test."""

    glance: Any
    mock_file_open: Any
    image_files: dict[str, str]
    _image_dir: str
    useFixture: Any

    # -- images -------------------------------------------------------------

    def create_image(self, fmt: str, size_mb: int = 1, *,
                     name: str | None = None,
                     properties: Mapping[str, Any] | None = None,
                     container_format: str = 'bare') -> dict[str, Any]:
        """Make a real image file and serve it from Nova's GlanceFixture.

        A raw file of ``size_mb`` MiB is made with ``qemu-img create``, its
        first bytes set to :data:`IMAGE_MARKER`, and unless ``fmt`` is
        ``raw`` it is converted to ``fmt`` with ``qemu-img convert``
        (``vhd`` is qemu's ``vpc``). The image is registered with that
        ``disk_format`` and ``container_format``, its real ``size`` and
        ``virtual_size``; ``GlanceFixture.download`` returns the file's
        bytes (``create(..., data=file)`` keeps them in memory).

        :returns: the image as the fixture holds it (``['id']`` for booting).
            Its file is in ``self.image_files[image['id']]``.
        """
        image_id = str(uuid.uuid4())
        raw = os.path.join(self._image_dir, image_id + '.raw')
        if fmt == 'iso':
            # A real ISO 9660 image (the format inspector checks), its
            # system area (the first 32 KiB) starting with the marker.
            content = os.path.join(self._image_dir, image_id + '.d')
            os.mkdir(content)
            with open(os.path.join(content, 'marker'), 'wb') as f:
                f.write(IMAGE_MARKER)
            subprocess.run(['genisoimage', '-quiet', '-o', raw, content],
                           check=True)
        else:
            subprocess.run(['qemu-img', 'create', '-q', '-f', 'raw', raw,
                            '%dM' % size_mb], check=True)
        with open(raw, 'r+b') as f:
            f.write(IMAGE_MARKER)
        return self.serve_file(
            raw, fmt, name=name or 'imgtype-%s-%dM' % (fmt, size_mb),
            virtual_size=size_mb * 1024 * 1024, properties=properties,
            container_format=container_format, image_id=image_id)

    def serve_file(self, raw: str, fmt: str, *, name: str,
                   virtual_size: int, compressed: bool = False,
                   properties: Mapping[str, Any] | None = None,
                   container_format: str = 'bare',
                   image_id: str | None = None) -> dict[str, Any]:
        """Serve the raw disk ``raw`` as an image of ``fmt``.

        Unless ``fmt`` is ``raw`` or ``iso``, ``raw`` is converted to
        ``fmt`` with ``qemu-img convert`` (``-c``: ``compressed``) and
        removed. Registered in Nova's GlanceFixture with its real ``size``.

        :returns: the image as the fixture holds it; its file is
            ``self.image_files[image['id']]``.
        """
        image_id = image_id or str(uuid.uuid4())
        path = raw
        if fmt not in ('raw', 'iso'):
            path = os.path.join(self._image_dir, '%s.%s' % (image_id, fmt))
            subprocess.run(['qemu-img', 'convert', '-q', '-f', 'raw', '-O',
                            _QEMU_FORMAT.get(fmt, fmt),
                            *(['-c'] if compressed else []), raw, path],
                           check=True)
            os.unlink(raw)
        meta: dict[str, Any] = {
            'id': image_id,
            'name': name,
            'status': 'active',
            'visibility': 'public',
            'is_public': True,
            'protected': False,
            'disk_format': fmt,
            'container_format': container_format,
            'size': os.path.getsize(path),
            'virtual_size': virtual_size,
            'min_disk': 0,
            'min_ram': 0,
            'tags': [],
            'properties': dict(properties or {}),
        }
        with open(path, 'rb') as data:
            image: dict[str, Any] = self.glance.create(None, meta, data=data)
        self.image_files[image_id] = path
        return image

    # -- uploads ------------------------------------------------------------

    def capture_uploads(self) -> list[tuple[dict[str, Any], str]]:
        """Keep (metadata, file) of every image upload from now on.

        The uploaded bytes are also served by the fixture's ``download``
        afterwards (unshelve reads the shelve snapshot).
        """
        uploads: list[tuple[dict[str, Any], str]] = []
        real_update = self.glance.update
        tmp = self.useFixture(fixtures.TempDir()).path

        def update(context: Any, image_id: str, metadata: dict[str, Any],
                   data: Any = None, purge_props: bool = False) -> Any:
            if data is not None:
                path = os.path.join(tmp, image_id)
                content = data.read()
                with open(path, 'wb') as f:
                    f.write(content)
                uploads.append((dict(metadata), path))
                # GlanceFixture.update drops the bytes; keep them where its
                # download reads, so a shelved server can be unshelved.
                self.glance._imagedata[image_id] = content
            return real_update(context, image_id, metadata,
                               purge_props=purge_props)

        self.useFixture(fixtures.MockPatchObject(self.glance, 'update',
                                                 side_effect=update))
        # ServersTestBase makes snapshot uploads read an empty BytesIO.
        self.mock_file_open.side_effect = open
        return uploads

    def guest_head(self, path: str, fmt: str) -> bytes:
        """The first guest bytes of a disk or image read in ``fmt``: the
        format the domain gives QEMU (an instance disk), the one Nova
        declared (an upload) or the one the host recorded (a template);
        never one probed from bytes a guest or a tenant wrote."""
        raw = path + '.head.raw'
        subprocess.run(['qemu-img', 'convert', '-f', fmt, '-O', 'raw', path,
                        raw], check=True)
        try:
            with open(raw, 'rb') as f:
                return f.read(len(IMAGE_MARKER))
        finally:
            os.unlink(raw)
