"""libvirt storage pools and volumes for instance disks and the image cache.

The contract (spec ``use-libvirt-storage-pools``):

* ``nova-base-images-pool`` is a dir pool over the image cache directory
  (``<instances_path>/_base``); declaring it changes nothing of the cache's
  layout, so legacy backends and pools share one cache.
* ``nova-disks-pool`` holds instance disks as volumes named
  ``{instance-uuid}_{name}`` (``disk``, ``disk.local``, ``disk.swap``, ...).
* Pools are created, started and set to autostart when missing, and found
  again when they exist. A pool that exists with another definition (type or
  target) is an error: it is never silently redefined.
* Copy-on-write volumes are qcow2 (compat 1.1) with a ``<backingStore>`` on
  the cached template; copies use ``createXMLFrom``, which converts to the
  target's format.
* Nothing is overwritten: creating a volume that exists is an error, and a
  volume whose creation failed is removed.

Every error names the pool and, where there is one, the volume.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any
from xml.etree import ElementTree

import libvirt
from oslo_log import log as logging

from nova_imgtype import exception

LOG = logging.getLogger(__name__)

BASE_POOL = 'nova-base-images-pool'
DISKS_POOL = 'nova-disks-pool'

Connection = Any    # libvirt.virConnect
Pool = Any          # libvirt.virStoragePool
Volume = Any        # libvirt.virStorageVol


@dataclasses.dataclass(frozen=True)
class PoolSpec:
    """What a pool must be: its name, libvirt type and target."""

    name: str
    type: str
    target: str

    def to_xml(self) -> str:
        pool = ElementTree.Element('pool', type=self.type)
        ElementTree.SubElement(pool, 'name').text = self.name
        target = ElementTree.SubElement(pool, 'target')
        ElementTree.SubElement(target, 'path').text = self.target
        return ElementTree.tostring(pool, encoding='unicode')


def default_specs(instances_path: str,
                  cache_subdir: str = '_base') -> tuple[PoolSpec, PoolSpec]:
    """The image cache pool and the disks pool of a file-based host."""
    return (PoolSpec(BASE_POOL, 'dir',
                     os.path.join(instances_path, cache_subdir)),
            PoolSpec(DISKS_POOL, 'dir', os.path.join(instances_path,
                                                     'disks')))


def pool_target(pool: Pool) -> str:
    """The target directory of a pool."""
    return ElementTree.fromstring(pool.XMLDesc(0)).findtext(
        'target/path') or ''



def volume_format(vol: Volume) -> str:
    """The format libvirt found for a volume (raw, qcow2, ...)."""
    fmt = ElementTree.fromstring(vol.XMLDesc(0)).find('target/format')
    return (fmt.get('type') if fmt is not None else None) or 'raw'


def volume_name(instance_uuid: str, disk_name: str) -> str:
    """``{instance-uuid}_{name}``, the name of an instance's volume."""
    return '%s_%s' % (instance_uuid, disk_name)


def _volume_xml(name: str, fmt: str, capacity: int,
                backing: tuple[str, str] | None = None,
                preallocate: bool = False) -> str:
    vol = ElementTree.Element('volume')
    ElementTree.SubElement(vol, 'name').text = name
    ElementTree.SubElement(vol, 'capacity', unit='bytes').text = str(
        capacity)
    # Without <allocation>, libvirt allocates the whole capacity up front;
    # stock Nova's disks are sparse unless preallocate_images = space.
    ElementTree.SubElement(vol, 'allocation', unit='bytes').text = str(
        capacity if preallocate else 0)
    target = ElementTree.SubElement(vol, 'target')
    ElementTree.SubElement(target, 'format', type=fmt)
    if fmt == 'qcow2':
        # libvirt makes compat 0.10 images unless asked.
        ElementTree.SubElement(target, 'compat').text = '1.1'
    if backing is not None:
        store = ElementTree.SubElement(vol, 'backingStore')
        ElementTree.SubElement(store, 'path').text = backing[0]
        ElementTree.SubElement(store, 'format', type=backing[1])
    return ElementTree.tostring(vol, encoding='unicode')


class StoragePools:
    """Pools and volumes on one libvirt connection.

    :param get_connection: returns the libvirt connection to use (the
        driver's ``Host.get_connection``), asked for at every call so a
        reconnection is picked up.
    """

    def __init__(self, get_connection: Callable[[], Connection]) -> None:
        self._get_connection = get_connection

    def _conn(self) -> Connection:
        try:
            return self._get_connection()
        except libvirt.libvirtError as e:
            raise exception.StorageUnavailable(reason=str(e)) from e

    # -- pools --------------------------------------------------------------

    def ensure(self, spec: PoolSpec, autostart: bool = True) -> Pool:
        """Find or create the pool, started (and autostarted).

        :raises PoolConflict: the pool exists with another type or target.
        """
        conn = self._conn()
        try:
            pool = conn.storagePoolLookupByName(spec.name)
        except libvirt.libvirtError as e:
            if e.get_error_code() != libvirt.VIR_ERR_NO_STORAGE_POOL:
                raise exception.StorageUnavailable(reason=str(e)) from e
            LOG.info('Creating storage pool %s (%s) at %s', spec.name,
                     spec.type, spec.target)
            os.makedirs(spec.target, exist_ok=True)
            pool = conn.storagePoolDefineXML(spec.to_xml(), 0)
        else:
            self._check_definition(pool, spec)
        if not pool.isActive():
            pool.create(0)
        if autostart and not pool.autostart():
            pool.setAutostart(1)
        return pool

    @staticmethod
    def _check_definition(pool: Pool, spec: PoolSpec) -> None:
        root = ElementTree.fromstring(pool.XMLDesc(0))
        found_type = root.get('type')
        found_target = root.findtext('target/path')
        if found_type != spec.type or (
                found_target is None or
                os.path.normpath(found_target) !=
                os.path.normpath(spec.target)):
            raise exception.PoolConflict(
                pool=spec.name,
                reason='it is a %s pool at %s, nova-imgtype needs a %s pool '
                       'at %s' % (found_type, found_target, spec.type,
                                  spec.target))

    def get(self, name: str) -> Pool:
        """The started pool ``name``.

        :raises PoolNotFound: no such pool.
        :raises PoolInactive: the pool exists but is not started.
        """
        try:
            pool = self._conn().storagePoolLookupByName(name)
        except libvirt.libvirtError as e:
            if e.get_error_code() == libvirt.VIR_ERR_NO_STORAGE_POOL:
                raise exception.PoolNotFound(pool=name) from e
            raise exception.StorageUnavailable(reason=str(e)) from e
        if not pool.isActive():
            raise exception.PoolInactive(pool=name)
        return pool

    def refresh(self, name: str) -> None:
        """Make libvirt see files added to the pool's directory by hand."""
        self.get(name).refresh(0)

    # -- volumes ------------------------------------------------------------

    @staticmethod
    def find_volume(pool: Pool, name: str) -> Volume | None:
        try:
            return pool.storageVolLookupByName(name)
        except libvirt.libvirtError as e:
            if e.get_error_code() == libvirt.VIR_ERR_NO_STORAGE_VOL:
                return None
            raise

    def _create(self, pool: Pool, name: str,
                create: Callable[[], Volume]) -> Volume:
        if self.find_volume(pool, name) is not None:
            raise exception.VolumeExists(pool=pool.name(), volume=name)
        try:
            return create()
        except libvirt.libvirtError as e:
            # Leave nothing behind: remove a half-made volume.
            half = self.find_volume(pool, name)
            if half is not None:
                half.delete(0)
            raise exception.VolumeCreateFailed(
                pool=pool.name(), volume=name, reason=str(e)) from e

    def create_cow(self, pool: Pool, name: str, backing_path: str,
                   backing_format: str, capacity: int) -> Volume:
        """A qcow2 overlay on ``backing_path``; O(1) whatever the size."""
        xml = _volume_xml(name, 'qcow2', capacity,
                          backing=(backing_path, backing_format))
        return self._create(pool, name, lambda: pool.createXML(xml, 0))

    def copy(self, pool: Pool, name: str, source: Volume, fmt: str,
             capacity: int, preallocate: bool = False) -> Volume:
        """A full copy of ``source`` in format ``fmt``, grown to capacity.

        ``createXMLFrom`` converts between formats; libvirt ignores a larger
        capacity for some targets, so the copy is resized afterwards. The
        copy is sparse unless ``preallocate``.
        """
        xml = _volume_xml(name, fmt, capacity, preallocate=preallocate)
        vol = self._create(pool, name,
                           lambda: pool.createXMLFrom(xml, source, 0))
        if vol.info()[1] < capacity:
            vol.resize(capacity, 0)
        return vol

    def volumes(self, pool: Pool, prefix: str = '') -> Iterator[Volume]:
        for vol in pool.listAllVolumes(0):
            if vol.name().startswith(prefix):
                yield vol

    def delete_instance_volumes(self, pool: Pool,
                                instance_uuid: str) -> list[str]:
        """Delete every ``{instance_uuid}_*`` volume; returns their names."""
        deleted = []
        for vol in list(self.volumes(pool, instance_uuid + '_')):
            vol.delete(0)
            deleted.append(vol.name())
        return deleted

    def backing_paths(self, pool: Pool) -> set[str]:
        """Paths of the templates the pool's volumes are backed by.

        Read from each volume's ``<backingStore>`` in libvirt: no
        ``qemu-img info`` per file.
        """
        paths = set()
        for vol in self.volumes(pool):
            path = ElementTree.fromstring(vol.XMLDesc(0)).findtext(
                'backingStore/path')
            if path:
                paths.add(path)
        return paths
