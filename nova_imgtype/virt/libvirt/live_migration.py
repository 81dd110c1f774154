"""Live block migration of instances whose disks are, or become, volumes.

Stock Nova's live block migration knows disks as files: the source lists
them (``get_instance_disk_info``), the destination makes empty ones or
overlays on the same template under the same paths, and libvirt copies the
data (``VIR_MIGRATE_NON_SHARED_INC``: only the overlay where a disk has a
backing file). An instance's disks here are volumes ``{uuid}_{name}`` of a
dir pool, or files ``<instance dir>/{name}``, and the destination makes them
where *it* keeps such disks (:meth:`BackendResolver.arrival`). This module
holds what is independent of a driver:

- :func:`local_disks`: the instance's own disks in its guest XML, and
  :func:`config_drive`: its read-only config drive, which libvirt does not
  copy (the source sends it before the migration starts);
- :func:`arriving_disk_info`: the source's disk info, renamed as the
  destination's disks;
- :func:`destination_xml`: the guest XML with those disks at the
  destination's volumes or files, which
  :class:`nova_imgtype.stock.migration_xml.RetargetedGuest` gives stock.

The formats never change: a qcow2 overlay stays a qcow2 overlay on the same
template, a raw disk stays raw.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import stat
from collections.abc import Iterator
from typing import Any

from lxml import etree

from nova_imgtype import record as record_mod
from nova_imgtype.virt.libvirt import pool_specs

#: The name of an instance's config drive.
CONFIG_DRIVE = 'disk.config'


@dataclasses.dataclass(frozen=True)
class LocalDisk:
    """One of an instance's own disks in its guest XML."""

    #: The guest's device name (``vda``).
    target: str
    #: The instance's name of the disk (``disk``, ``disk.local``).
    name: str
    #: ``volume`` or ``file``.
    source_type: str
    #: The pool of a volume ('' for a file).
    pool: str = ''
    #: The path of a file ('' for a volume).
    path: str = ''


def disk_name(instance_uuid: str, path_or_volume: str) -> str:
    """The disk name of a volume ``{uuid}_{name}`` or a file ``.../name``."""
    base = os.path.basename(path_or_volume)
    prefix = instance_uuid + '_'
    return base[len(prefix):] if base.startswith(prefix) else base


def _own_disks(xml: str, instance_uuid: str,
               instance_dir: str) -> Iterator[tuple[Any, LocalDisk]]:
    """The instance's own disks in a domain XML, with their elements: its
    volumes (``{uuid}_{name}`` of any pool, by pool or by path) and its
    files in the instance directory."""
    for dev in etree.fromstring(xml).findall('./devices/disk'):
        target = dev.find('target')
        source = dev.find('source')
        if target is None or source is None:
            continue
        kind = dev.get('type')
        if kind == 'volume':
            volume = source.get('volume', '')
            if volume.startswith(instance_uuid + '_'):
                yield dev, LocalDisk(target.get('dev', ''),
                                     disk_name(instance_uuid, volume),
                                     'volume', source.get('pool', ''))
        elif kind == 'file':
            # A file of the instance directory, or a volume of a dir pool
            # named by its path (as a live migration leaves it).
            path = source.get('file', '')
            if (os.path.dirname(path) == instance_dir or
                    os.path.basename(path).startswith(instance_uuid + '_')):
                yield dev, LocalDisk(target.get('dev', ''),
                                     disk_name(instance_uuid, path), 'file',
                                     path=path)


def local_disks(xml: str, instance_uuid: str,
                instance_dir: str) -> list[LocalDisk]:
    """The instance's own writable disks in a domain XML: what libvirt
    copies. Cinder volumes, read-only and shareable disks are not the
    instance's own and are left out, as stock does."""
    return [disk for dev, disk in _own_disks(xml, instance_uuid,
                                             instance_dir)
            if dev.find('readonly') is None and
            dev.find('shareable') is None]


def config_drive(xml: str, instance_uuid: str,
                 instance_dir: str) -> LocalDisk | None:
    """The instance's read-only config drive (``disk.config``, an ISO 9660
    CD-ROM), or None (no drive, or a writable vfat one, which libvirt
    copies as any other disk).

    libvirt copies no read-only disk in a block migration (and refuses to
    be asked to), and the destination made it empty: its bytes are sent
    before the migration starts.
    """
    for dev, disk in _own_disks(xml, instance_uuid, instance_dir):
        if disk.name == CONFIG_DRIVE and dev.find('readonly') is not None:
            return disk
    return None


def destination_path(instance_uuid: str, disk: LocalDisk, storage: str,
                     directory: str) -> str:
    """Where the destination made ``disk``: the file
    ``<directory>/<name>`` of a host without pools, the volume
    ``<directory>/{uuid}_{name}`` of its dir pool."""
    return os.path.join(directory, pool_specs.volume_name(
        instance_uuid, disk.name) if storage == record_mod.POOLS
        else disk.name)


def arriving_disk_info(disk_info: list[dict[str, Any]], instance_uuid: str,
                       instance_dir: str) -> list[dict[str, Any]]:
    """The source's disk info (``get_instance_disk_info``) as the disks the
    destination makes: each ``path`` is ``<instance_dir>/<disk name>``, the
    name stock's image backends are asked for (a pool backend makes the
    volume ``{uuid}_{name}`` of it)."""
    return [dict(info, path=os.path.join(
        instance_dir, disk_name(instance_uuid, info['path'])))
        for info in disk_info]


def volume_disk_info(vol: Any, fmt: str) -> dict[str, Any]:
    """A volume as an entry of stock's ``get_instance_disk_info``: its
    recorded format ``fmt`` (what the guest's XML gives QEMU), path,
    virtual and allocated sizes, and the basename of its backing file (the
    template) when it is a qcow2 overlay.

    Nothing is taken from what libvirt probed in a raw volume, whose bytes
    the guest writes: a raw volume is as large as its file and has no
    backing file, whatever header the guest wrote into it. A qcow2
    volume's header (its size, its backing file) is not the guest's to
    write.
    """
    _kind, capacity, allocation = vol.info()
    backing = ''
    if fmt == 'qcow2':
        root = etree.fromstring(vol.XMLDesc(0))
        backing = os.path.basename(root.findtext('backingStore/path') or '')
    else:
        with contextlib.suppress(OSError):
            st = os.stat(vol.path())
            if stat.S_ISREG(st.st_mode):
                capacity = st.st_size
    return {'type': fmt,
            'path': vol.path(),
            'virt_disk_size': capacity,
            'backing_file': backing,
            'disk_size': allocation,
            'over_committed_disk_size': max(0, capacity - allocation)}


def destination_xml(xml: str, instance_uuid: str, disks: list[LocalDisk],
                    storage: str, directory: str) -> str:
    """``xml`` with the instance's own disks where the destination made
    them: the files ``<directory>/<name>`` of a host without pools, the
    volumes ``<directory>/{uuid}_{name}`` of its dir pool.

    A volume is named by its path (``<disk type='file'>``): libvirt 9.0
    refuses an incremental copy to a ``<disk type='volume'>`` ("pre-creation
    of storage targets for incremental storage migration is not
    supported"), as it cannot tell that the volume exists. The guest's
    next start names it by pool and volume again (Nova writes its XML
    anew).

    :param storage: ``pools`` or ``legacy`` on the destination, and
    :param directory: where its disks are, as
        :meth:`BackendResolver.recorded_arrival` returns them.
    """
    by_target = {d.target: d for d in disks}
    root = etree.fromstring(xml)
    for dev in root.findall('./devices/disk'):
        target = dev.find('target')
        disk = by_target.get(target.get('dev', '') if target is not None
                             else '')
        if disk is None:
            continue
        _set_source(dev, 'file', file=destination_path(
            instance_uuid, disk, storage, directory))
    return etree.tostring(root, encoding='unicode')


def persistent_xml(xml: str, instance_uuid: str, pool: str,
                   directory: str) -> str:
    """``xml`` with the instance's volumes of the dir pool ``pool`` (whose
    directory is ``directory``) named as volumes again
    (``<disk type='volume'>``, pool and volume): what the guest's
    definition says once it has arrived, where :func:`destination_xml`
    named them by path for the copy. Every later step that reads the
    definition of the stopped guest (a cold move's list of disks, a
    snapshot) then finds a volume of the pool, not a path that a step
    before it may have moved."""
    root = etree.fromstring(xml)
    for dev in root.findall('./devices/disk'):
        source = dev.find('source')
        if dev.get('type') != 'file' or source is None:
            continue
        path = source.get('file', '')
        volume = os.path.basename(path)
        if (os.path.dirname(path) != os.path.normpath(directory) or
                not volume.startswith(instance_uuid + '_')):
            continue
        _set_source(dev, 'volume', pool=pool, volume=volume)
    return etree.tostring(root, encoding='unicode')


def _set_source(dev: Any, kind: str, **source: str) -> None:
    """Make the disk element ``dev`` a ``kind`` disk of ``source``: its
    source and backing chain replaced (libvirt reads a file's or a
    volume's chain itself)."""
    for child in dev.findall('source') + dev.findall('backingStore'):
        dev.remove(child)
    dev.set('type', kind)
    dev.insert(_source_index(dev), etree.Element('source', **source))


def _source_index(dev: Any) -> int:
    """Where ``<source>`` goes: after ``<driver>``, as libvirt writes it."""
    for i, child in enumerate(dev):
        if child.tag == 'driver':
            return i + 1
    return 0
