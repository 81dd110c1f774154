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

import os
import uuid
from collections.abc import Callable
from collections.abc import Iterator
from xml.etree import ElementTree

import libvirt
from nova import exception as nova_exception
from nova.virt import images
from oslo_concurrency import processutils
from oslo_log import log as logging

from nova_imgtype import exception
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import sparse
from nova_imgtype.virt.libvirt.pool_specs import Connection
from nova_imgtype.virt.libvirt.pool_specs import Pool
from nova_imgtype.virt.libvirt.pool_specs import PoolSpec
from nova_imgtype.virt.libvirt.pool_specs import Volume
from nova_imgtype.virt.libvirt.pool_specs import _volume_xml
from nova_imgtype.virt.libvirt.pool_specs import location_key
from nova_imgtype.virt.libvirt.pool_specs import pool_source
from nova_imgtype.virt.libvirt.pool_specs import pool_type
from nova_imgtype.virt.libvirt.pool_specs import volume_format

LOG = logging.getLogger(__name__)


class StoragePools:
    """Pools and volumes on one libvirt connection.

    :param get_connection: returns the libvirt connection to use (the
        driver's ``Host.get_connection``), asked for at every call so a
        reconnection is picked up.
    """

    def __init__(self, get_connection: Callable[[], Connection]) -> None:
        self._get_connection = get_connection
        self._definitions: dict[str, PoolSpec] = {}
        self._names: dict[str, str] = {}

    def _conn(self, pool: str) -> Connection:
        """The connection, to work on ``pool`` (named in the error)."""
        try:
            return self._get_connection()
        except (libvirt.libvirtError,
                nova_exception.HypervisorUnavailable) as e:
            raise exception.StorageUnavailable(pool=pool,
                                               reason=str(e)) from e

    # -- pools --------------------------------------------------------------

    def ensure(self, spec: PoolSpec, autostart: bool = True) -> Pool:
        """Find or create the pool, started (and autostarted).

        :raises PoolConflict: the pool exists with another type or target.
        """
        conn = self._conn(spec.name)
        try:
            pool = conn.storagePoolLookupByName(spec.name)
        except libvirt.libvirtError as e:
            if e.get_error_code() != libvirt.VIR_ERR_NO_STORAGE_POOL:
                raise exception.StorageUnavailable(pool=spec.name,
                                                   reason=str(e)) from e
            LOG.info('Creating storage pool %s (%s) on %s', spec.name,
                     spec.type, spec.location())
            if spec.type == 'dir':
                os.makedirs(spec.target, exist_ok=True)
            try:
                pool = conn.storagePoolDefineXML(spec.to_xml(), 0)
            except libvirt.libvirtError as e:
                raise exception.StorageUnavailable(
                    pool=spec.name,
                    reason='cannot define it (%s on %s): %s' % (
                        spec.type, spec.location(), e)) from e
        else:
            self._check_definition(pool, spec)
        if not pool.isActive():
            try:
                pool.create(0)
            except libvirt.libvirtError as e:
                raise exception.StorageUnavailable(
                    pool=spec.name,
                    reason='cannot start it (%s on %s): %s' % (
                        spec.type, spec.location(), e)) from e
        if autostart and not pool.autostart():
            pool.setAutostart(1)
        return pool

    @staticmethod
    def _check_definition(pool: Pool, spec: PoolSpec) -> None:
        root = ElementTree.fromstring(pool.XMLDesc(0))
        found = PoolSpec(spec.name, root.get('type') or '',
                         target=root.findtext('target/path') or '',
                         source=root.findtext('source/name') or '')
        if spec.type == 'dir':
            same = (found.type == 'dir' and bool(found.target) and
                    os.path.normpath(found.target) ==
                    os.path.normpath(spec.target))
        else:
            same = found.type == spec.type and found.source == spec.source
        if not same:
            raise exception.PoolConflict(
                pool=spec.name,
                reason='it is a %s pool on %s, nova-imgtype needs a %s pool '
                       'on %s' % (found.type, found.location(), spec.type,
                                  spec.location()))

    def get(self, name: str) -> Pool:
        """The started pool ``name``.

        :raises PoolNotFound: no such pool.
        :raises PoolInactive: the pool exists but is not started.
        """
        try:
            pool = self._conn(name).storagePoolLookupByName(name)
        except libvirt.libvirtError as e:
            if e.get_error_code() == libvirt.VIR_ERR_NO_STORAGE_POOL:
                raise exception.PoolNotFound(pool=name) from e
            raise exception.StorageUnavailable(pool=name,
                                               reason=str(e)) from e
        if not pool.isActive():
            raise exception.PoolInactive(pool=name)
        return pool

    def definition(self, pool: Pool) -> PoolSpec:
        """The pool's definition (:func:`pool_source`), read from libvirt
        once per pool. A pool is known by its UUID, which the libvirt
        client holds: a pool undefined and defined again under the same
        name is another pool, read again."""
        key = pool.UUIDString()
        spec = self._definitions.get(key)
        if spec is None:
            spec = self._definitions[key] = pool_source(pool)
        return spec

    def dir_pool_at(self, directory: str) -> Pool | None:
        """The dir pool over ``directory``, started or not (found by its
        type and target, whatever its name), or None."""
        return self.find_by_location(location_key(PoolSpec('', 'dir',
                                                           directory)))

    def find_by_location(self, key: str) -> Pool | None:
        """This host's pool of the storage ``key`` names (a
        :func:`location_key`), started or not, whatever its name; None when
        this host has none."""
        for pool in self._conn(key).listAllStoragePools(0):
            try:
                spec = self.definition(pool)
            except libvirt.libvirtError as e:
                if pool_specs.vanished(e):
                    continue
                raise
            if pool_specs.same_storage(location_key(spec), key):
                return pool
        return None

    def name_for(self, key: str, recorded_name: str) -> str | None:
        """The name of this host's pool of the storage ``key`` names
        (:meth:`find_by_location`; found once: a pool is never redefined
        over other storage under its name). When this host has none: None
        if it has no pool of the recorded name either, else ``key``
        itself, which names no pool: another storage's pool of the
        recorded name is never taken for it."""
        name = self._names.get(key)
        if name is not None:
            return name
        pool = self.find_by_location(key)
        if pool is not None:
            name = self._names[key] = pool.name()
            return name
        named = self.find_pool(recorded_name)
        if named is None:
            return None
        if pool_specs.same_source(location_key(self.definition(named)),
                                  key):
            # The same Ceph pool, its monitors listed otherwise here (by
            # name, not address): the recorded pool, as it was found before
            # locations were recorded; said once, kept as a match.
            LOG.warning('Storage pool %(pool)s is taken for %(key)s: the '
                        'same Ceph pool, with no monitor address in common '
                        '(list the monitors alike on every host)',
                        {'pool': recorded_name, 'key': key})
            self._names[key] = recorded_name
            return recorded_name
        return key

    def own_pools(self) -> list[Pool]:
        """The pools nova-imgtype defines on this host, by their names
        (:data:`~.pool_specs.BASE_POOL`, ``nova-disks-pool*``), started or
        not."""
        conn = self._conn(pool_specs.DISKS_POOL)
        return sorted(
            (p for p in conn.listAllStoragePools(0)
             if p.name() == pool_specs.BASE_POOL or
             p.name().startswith(pool_specs.DISKS_POOL)),
            key=lambda p: p.name())

    def forget(self, pool: Pool) -> None:
        """Stop and undefine ``pool``, its storage as it is: a dir pool's
        directory and files, an rbd pool's images stay. A logical pool is
        only undefined: stopping it would deactivate its volume group,
        whose other volumes (stock's lvm disks) stay in use."""
        if pool_specs.pool_type(pool) != 'logical' and pool.isActive():
            pool.destroy()
        pool.undefine()
        self._definitions.pop(pool.UUIDString(), None)
        self._names = {k: v for k, v in self._names.items()
                       if v != pool.name()}

    def find_pool(self, name: str) -> Pool | None:
        """The pool ``name``, started or not; None when there is none."""
        try:
            return self._conn(name).storagePoolLookupByName(name)
        except libvirt.libvirtError as e:
            if e.get_error_code() == libvirt.VIR_ERR_NO_STORAGE_POOL:
                return None
            raise exception.StorageUnavailable(pool=name,
                                               reason=str(e)) from e

    def refresh(self, name: str) -> None:
        """Make libvirt see files added to the pool's directory by hand."""
        pool_specs.refresh(self.get(name))

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
        except (libvirt.libvirtError, OSError) as e:
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

    def create_empty(self, pool: Pool, name: str, fmt: str,
                     capacity: int) -> Volume:
        """An empty sparse volume (for data a copy fills in)."""
        xml = _volume_xml(name, fmt, capacity)
        return self._create(pool, name, lambda: pool.createXML(xml, 0))

    def copy(self, pool: Pool, name: str, source: Volume, source_format: str,
             fmt: str, capacity: int, preallocate: bool = False) -> Volume:
        """A full copy of ``source`` (in its recorded ``source_format``) in
        format ``fmt``, grown to capacity.

        libvirt reads a volume of a dir pool in the format it probed in the
        file: one it reads otherwise than recorded is refused
        (:class:`~nova_imgtype.exception.VolumeFormatMismatch`), never
        followed.

        ``createXMLFrom`` converts between formats; libvirt ignores a larger
        capacity for some targets, so the copy is resized afterwards. The
        copy is sparse unless ``preallocate``. A raw volume of a dir pool
        into a raw volume of a dir pool, which libvirt would copy by
        reading its whole virtual size, is a new sparse volume with the
        source's data extents copied in (:mod:`.sparse`), unless the source
        is not a regular file (a linked template's block device).
        """
        source_dir = pool_type(source.storagePoolLookupByVolume()) == 'dir'
        probed = volume_format(source) if source_dir else source_format
        if probed != source_format:
            raise exception.VolumeFormatMismatch(
                volume=source.name(), recorded=source_format, probed=probed)
        if (not preallocate and fmt == 'raw' and pool_type(pool) == 'dir'
                and source_format == 'raw' and source_dir and
                sparse.is_regular_file(source.path())):
            return self._create(pool, name, lambda: self._copy_data(
                pool, name, source, capacity))
        xml = _volume_xml(name, fmt, capacity, preallocate=preallocate)
        vol = self._create(pool, name,
                           lambda: pool.createXMLFrom(xml, source, 0))
        if vol.info()[1] < capacity:
            vol.resize(capacity, 0)
        return vol

    @staticmethod
    def _copy_data(pool: Pool, name: str, source: Volume,
                   capacity: int) -> Volume:
        vol = pool.createXML(_volume_xml(
            name, 'raw', max(capacity, source.info()[1])), 0)
        sparse.copy_data(source.path(), vol.path())
        return vol

    def import_file(self, pool: Pool, name: str, path: str,
                    fmt: str = 'raw') -> Volume:
        """A new volume ``name`` holding the bytes of the local file.

        Dir and logical pools: a volume of the file's size written through
        a libvirt stream (``virStorageVolUpload``). rbd pools, which libvirt
        cannot upload to: :meth:`upload_rbd_template`. A failed import
        leaves no volume.
        """
        if pool_type(pool) == 'rbd':
            return self.upload_rbd_template(pool, name, path, fmt)
        size = os.path.getsize(path)
        xml = _volume_xml(name, fmt if pool_type(pool) == 'dir' else '',
                          size, preallocate=pool_type(pool) == 'logical')

        def create() -> Volume:
            vol = pool.createXML(xml, 0)
            stream = pool.connect().newStream(0)
            try:
                vol.upload(stream, 0, size, 0)
                with open(path, 'rb') as f:
                    stream.sendAll(lambda _st, n, _f: f.read(n), None)
                stream.finish()
            except BaseException:
                stream.abort()
                raise
            return vol

        return self._create(pool, name, create)

    def upload_rbd_template(self, pool: Pool, name: str, path: str,
                            fmt: str, ceph_conf: str = '',
                            user: str = '', uploader: str = '') -> Volume:
        """The template at ``path`` as volume ``name`` of an rbd pool.

        libvirt has neither ``createXMLFrom`` from another pool's volume
        nor volume upload for rbd pools, so the guest data are written with
        ``qemu-img convert`` (rbd block driver) as
        ``<name>.part-<uploader>-<random>``, a name no other upload has,
        then renamed to ``name`` (``rbd rename``, which refuses an existing
        name: the cluster-wide exclusive create). A template found by name
        is always whole. Every compute of the Ceph cluster may upload the
        same template at once: one rename wins, the others remove their own
        copy and use the winner's. Only this uploader's leftovers of an
        earlier crash are removed, never another host's upload in progress.
        A failed upload leaves nothing behind.

        :param uploader: who uploads (the host); the caller holds a lock on
            ``name`` among this uploader's processes.
        """
        pool_specs.refresh(pool)
        found = self.find_volume(pool, name)
        if found is not None:
            return found
        ceph_pool = ElementTree.fromstring(pool.XMLDesc(0)).findtext(
            'source/name') or ''
        mine = '%s.part-%s-' % (name, uploader or 'host')
        for stale in list(self.volumes(pool, mine)):
            LOG.info('Removing %s, left by an interrupted upload',
                     stale.name())
            stale.delete(0)
        part = mine + uuid.uuid4().hex[:8]
        opts = ''.join((':conf=%s' % ceph_conf if ceph_conf else '',
                        ':id=%s' % user if user else ''))
        cli = (('--conf', ceph_conf) if ceph_conf else ()) + (
            ('--id', user) if user else ())
        try:
            images.convert_image(path, 'rbd:%s/%s%s' % (ceph_pool, part,
                                                        opts), fmt, 'raw')
            processutils.execute('rbd', 'rename', '--pool', ceph_pool, part,
                                 name, *cli)
        except (processutils.ProcessExecutionError, OSError,
                nova_exception.NovaException) as e:
            pool_specs.refresh(pool)
            half = self.find_volume(pool, part)
            if half is not None:
                half.delete(0)
            won = self.find_volume(pool, name)
            if won is not None:
                # Another compute's upload was renamed first.
                LOG.info('Template %s was uploaded by another compute; '
                         'using it', name)
                return won
            raise exception.VolumeCreateFailed(
                pool=pool.name(), volume=name, reason=str(e)) from e
        pool_specs.refresh(pool)
        LOG.info('Uploaded template %s into storage pool %s (Ceph pool %s)',
                 name, pool.name(), ceph_pool)
        return pool.storageVolLookupByName(name)

    def volumes(self, pool: Pool, prefix: str = '') -> Iterator[Volume]:
        for vol in pool.listAllVolumes(0):
            if vol.name().startswith(prefix):
                yield vol

    def delete_instance_volumes(self, pool: Pool, instance_uuid: str,
                                suffix: str = '') -> list[str]:
        """Delete every ``{instance_uuid}_*`` volume (ending with
        ``suffix``); returns their names."""
        deleted = []
        for vol in list(self.volumes(pool, instance_uuid + '_')):
            if vol.name().endswith(suffix):
                LOG.debug('Deleting volume %s of pool %s', vol.name(),
                          pool.name())
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
