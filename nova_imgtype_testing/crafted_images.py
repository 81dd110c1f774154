"""Hostile images, made for real with ``qemu-img``, for the safety tests.

Each :class:`Crafted` image tries to make an instance disk (or a template)
reference a file of the host outside the image cache, to disguise its
format, or to break the tools that read it. :func:`make_all` makes every
one in a directory, next to the host file they point at.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable

from nova_imgtype_testing import libvirtd as real

MiB = 1024 * 1024
SIZE = 16 * MiB
#: What the host file holds: a guest must never read it.
SECRET = b'host secret: never in a guest\n'


@dataclasses.dataclass(frozen=True)
class Crafted:
    """A crafted image.

    :param name: the test id.
    :param claimed: the ``disk_format`` the image service says it is.
    :param hostile: whether every path must refuse it. A benign image
        (only disguised) may be used as stock uses it; nothing it makes may
        reference a file outside the image cache either way.
    """

    name: str
    claimed: str
    hostile: bool
    make: Callable[[str, str], None]


def _backing(path: str, secret: str) -> None:
    real.qemu_img('create', '-f', 'qcow2', '-u', '-b', secret, '-F', 'raw',
                  path, str(SIZE))


def _json_backing(path: str, secret: str) -> None:
    spec = json.dumps({'driver': 'raw',
                       'file': {'driver': 'file', 'filename': secret}})
    real.qemu_img('create', '-f', 'qcow2', '-u', '-b', 'json:' + spec,
                  '-F', 'raw', path, str(SIZE))


def _data_file(path: str, secret: str, raw: bool = False) -> None:
    # qemu-img truncates the data file it creates: make it on a scratch
    # name, then point the header at the host file by renaming.
    opts = 'data_file=%s' % secret + (',data_file_raw=on' if raw else '')
    scratch = secret + '.scratch'
    os.rename(secret, scratch)
    try:
        real.qemu_img('create', '-f', 'qcow2', '-o', opts, path, str(SIZE))
    finally:
        os.replace(scratch, secret)


def _data_file_raw(path: str, secret: str) -> None:
    _data_file(path, secret, raw=True)


def _vmdk_flat_extent(path: str, secret: str) -> None:
    real.qemu_img('create', '-f', 'vmdk', '-o', 'subformat=monolithicFlat',
                  path, str(SIZE))
    flat = path[:-len('.vmdk')] + '-flat.vmdk' if path.endswith(
        '.vmdk') else path + '-flat.vmdk'
    with open(path) as f:
        text = f.read()
    with open(path, 'w') as f:
        f.write(text.replace('"%s"' % os.path.basename(flat),
                             '"%s"' % secret))
    os.unlink(flat)


def _qcow2(path: str, secret: str) -> None:
    real.make_image(path, 'qcow2', SIZE)


def _absurd_size(path: str, secret: str) -> None:
    # 1 PiB of virtual size in a few hundred KiB of qcow2.
    real.qemu_img('create', '-f', 'qcow2', path, str(1024 ** 5))


def _truncated(path: str, secret: str) -> None:
    real.make_image(path, 'qcow2', SIZE)
    with open(path, 'r+b') as f:
        f.truncate(200)


CRAFTED: tuple[Crafted, ...] = (
    Crafted('backing-file', 'qcow2', True, _backing),
    Crafted('json-backing', 'qcow2', True, _json_backing),
    Crafted('data-file', 'qcow2', True, _data_file),
    Crafted('data-file-raw', 'qcow2', True, _data_file_raw),
    Crafted('vmdk-flat-extent', 'vmdk', True, _vmdk_flat_extent),
    Crafted('backing-file-as-raw', 'raw', True, _backing),
    Crafted('qcow2-as-raw', 'raw', False, _qcow2),
    Crafted('absurd-virtual-size', 'qcow2', False, _absurd_size),
    Crafted('truncated-qcow2', 'qcow2', False, _truncated),
)


def make_secret(directory: str) -> str:
    """The host file the images point at."""
    path = os.path.join(directory, 'host-secret')
    with open(path, 'wb') as f:
        f.write(SECRET * (SIZE // len(SECRET)))
        f.truncate(SIZE)
    return path


def make(crafted: Crafted, directory: str, secret: str) -> str:
    """Make ``crafted`` in ``directory``; its path."""
    path = os.path.join(directory, crafted.name + (
        '.vmdk' if crafted.claimed == 'vmdk' else '.img'))
    crafted.make(path, secret)
    return path
