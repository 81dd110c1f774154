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

import configparser
import dataclasses
import os
import re
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from typing import Any
from xml.etree import ElementTree

import libvirt
from nova import exception as nova_exception
from nova.virt import images
from oslo_concurrency import processutils
from oslo_log import log as logging

from nova_imgtype import exception

LOG = logging.getLogger(__name__)

BASE_POOL = 'nova-base-images-pool'
DISKS_POOL = 'nova-disks-pool'
#: Templates uploaded into an rbd disks pool: ``nova-base_<cache file>``.
RBD_TEMPLATE_PREFIX = 'nova-base_'

Connection = Any    # libvirt.virConnect
Pool = Any          # libvirt.virStoragePool
Volume = Any        # libvirt.virStorageVol


#: libvirt pool type implementing each image backend's disks.
POOL_TYPES = {'raw': 'dir', 'flat': 'dir', 'qcow2': 'dir',
              'lvm': 'logical', 'rbd': 'rbd'}


@dataclasses.dataclass(frozen=True)
class PoolSpec:
    """What a pool must be: its name, libvirt type and location.

    ``target`` is the directory of a dir pool (and ``/dev/<vg>`` of a
    logical one); ``source`` the volume group of a logical pool or the Ceph
    pool of an rbd one, with ``hosts`` (``host:port`` monitors) and the
    cephx ``auth_user``/``auth_secret_uuid`` of an rbd pool.
    """

    name: str
    type: str
    target: str = ''
    source: str = ''
    hosts: tuple[str, ...] = ()
    auth_user: str = ''
    auth_secret_uuid: str = ''

    def to_xml(self) -> str:
        pool = ElementTree.Element('pool', type=self.type)
        ElementTree.SubElement(pool, 'name').text = self.name
        if self.source:
            source = ElementTree.SubElement(pool, 'source')
            for host in self.hosts:
                name, _sep, port = host.rpartition(':')
                attrs = {'name': name or port}
                if name:
                    attrs['port'] = port
                ElementTree.SubElement(source, 'host', attrs)
            ElementTree.SubElement(source, 'name').text = self.source
            if self.type == 'logical':
                ElementTree.SubElement(source, 'format', type='lvm2')
            if self.auth_user:
                auth = ElementTree.SubElement(source, 'auth', type='ceph',
                                              username=self.auth_user)
                ElementTree.SubElement(auth, 'secret',
                                       uuid=self.auth_secret_uuid)
        if self.target:
            target = ElementTree.SubElement(pool, 'target')
            ElementTree.SubElement(target, 'path').text = self.target
        return ElementTree.tostring(pool, encoding='unicode')

    def location(self) -> str:
        """What identifies the storage behind the pool, for messages."""
        return ('Ceph pool %s' % self.source if self.type == 'rbd' else
                'volume group %s' % self.source if self.type == 'logical'
                else self.target)


def default_specs(instances_path: str,
                  cache_subdir: str = '_base') -> tuple[PoolSpec, PoolSpec]:
    """The image cache pool and the disks pool of a file-based host."""
    return (PoolSpec(BASE_POOL, 'dir',
                     os.path.join(instances_path, cache_subdir)),
            PoolSpec(DISKS_POOL, 'dir', os.path.join(instances_path,
                                                     'disks')))


def disks_pool_name(pool_type: str, default_type: str) -> str:
    """The name of the disks pool of ``pool_type`` on a host.

    The pool of the host's own ``images_type`` is ``nova-disks-pool``; a
    pool of another type that the mapping needs on the same host is
    ``nova-disks-pool-<type>`` (``nova-disks-pool-dir``,
    ``nova-disks-pool-logical``, ``nova-disks-pool-rbd``).
    """
    return (DISKS_POOL if pool_type == default_type
            else '%s-%s' % (DISKS_POOL, pool_type))


def ceph_monitors(ceph_conf: str) -> tuple[str, ...]:
    """``host:port`` of the monitors in a ceph.conf (``mon_host``).

    Accepts the forms Ceph does: ``a,b c``, ``host:port`` and messenger
    address vectors ``[v2:h:3300,v1:h:6789]`` (the v1 address is taken,
    which librados reaches through libvirt's ``host:port``).
    """
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    try:
        with open(ceph_conf) as f:
            parser.read_file(f)
    except OSError:
        return ()
    value = ''
    for section in ('global', 'client'):
        for key in ('mon_host', 'mon host'):
            if parser.has_option(section, key):
                value = parser.get(section, key)
    hosts = []
    for vector in re.findall(r'\[([^\]]*)\]|([^\s,;\[\]]+)', value):
        addrs = (vector[0].split(',') if vector[0] else [vector[1]])
        v1 = [a[3:] for a in addrs if a.startswith('v1:')]
        plain = [a for a in addrs if not a.startswith(('v1:', 'v2:'))]
        pick = (v1 or plain or [a[3:] for a in addrs])[0]
        hosts.append(pick.split('/')[0])
    return tuple(hosts)


def disks_pool_spec(conf: Any, backend: str) -> PoolSpec:
    """The disks pool implementing ``backend`` on this host's config."""
    pool_type = POOL_TYPES[backend]
    default_type = POOL_TYPES.get(conf.libvirt.images_type,
                                  'dir')
    name = disks_pool_name(pool_type, default_type)
    if pool_type == 'logical':
        vg = conf.libvirt.images_volume_group
        return PoolSpec(name, 'logical', '/dev/%s' % vg, source=vg)
    if pool_type == 'rbd':
        return PoolSpec(
            name, 'rbd', source=conf.libvirt.images_rbd_pool,
            hosts=ceph_monitors(conf.libvirt.images_rbd_ceph_conf),
            auth_user=(conf.libvirt.rbd_user
                       if conf.libvirt.rbd_secret_uuid else ''),
            auth_secret_uuid=conf.libvirt.rbd_secret_uuid or '')
    return PoolSpec(name, 'dir', os.path.join(conf.instances_path, 'disks'))


def host_specs(conf: Any, backends: Iterable[str]) -> list[PoolSpec]:
    """Every pool a host needs: the image cache pool, then one disks pool
    per pool type of ``backends`` (those pools implement)."""
    specs = [PoolSpec(BASE_POOL, 'dir', os.path.join(
        conf.instances_path, conf.image_cache.subdirectory_name))]
    seen = set()
    for backend in backends:
        if backend in POOL_TYPES and POOL_TYPES[backend] not in seen:
            seen.add(POOL_TYPES[backend])
            specs.append(disks_pool_spec(conf, backend))
    return specs


def pool_target(pool: Pool) -> str:
    """The target directory of a pool."""
    return ElementTree.fromstring(pool.XMLDesc(0)).findtext(
        'target/path') or ''



def volume_path(pool: Pool, name: str) -> str:
    """Where a volume of the pool is: ``<target>/<name>`` for dir and
    logical pools, ``<ceph pool>/<name>`` for rbd ones."""
    root = ElementTree.fromstring(pool.XMLDesc(0))
    target = root.findtext('target/path')
    if target:
        return os.path.join(target, name)
    return '%s/%s' % (root.findtext('source/name') or pool.name(), name)


def pool_source(pool: Pool) -> PoolSpec:
    """A pool's definition read back from libvirt (type, target, source,
    ``host:port`` hosts, cephx auth)."""
    root = ElementTree.fromstring(pool.XMLDesc(0))
    hosts = tuple(
        '%s:%s' % (h.get('name'), h.get('port')) if h.get('port')
        else h.get('name') or '' for h in root.findall('source/host'))
    auth = root.find('source/auth')
    secret = auth.find('secret') if auth is not None else None
    return PoolSpec(
        pool.name(), root.get('type') or '',
        target=root.findtext('target/path') or '',
        source=root.findtext('source/name') or '', hosts=hosts,
        auth_user=auth.get('username', '') if auth is not None else '',
        auth_secret_uuid=(secret.get('uuid', '') if secret is not None
                          else ''))


def pool_type(pool: Pool) -> str:
    """The libvirt type of a pool (dir, logical, rbd, ...)."""
    return ElementTree.fromstring(pool.XMLDesc(0)).get('type') or ''


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
    if fmt:
        # Logical and rbd volumes take none: they are raw by nature.
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

    def create_empty(self, pool: Pool, name: str, fmt: str,
                     capacity: int) -> Volume:
        """An empty sparse volume (for data a copy fills in)."""
        xml = _volume_xml(name, fmt, capacity)
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
                            user: str = '') -> Volume:
        """The template at ``path`` as volume ``name`` of an rbd pool.

        libvirt has neither ``createXMLFrom`` from another pool's volume
        nor volume upload for rbd pools, so the guest data are written with
        ``qemu-img convert`` (rbd block driver) as ``<name>.part`` and
        renamed once complete (``rbd rename``): a template found by name is
        always whole. A failed upload leaves nothing behind. The caller
        holds a lock on ``name``.
        """
        pool.refresh(0)
        found = self.find_volume(pool, name)
        if found is not None:
            return found
        ceph_pool = ElementTree.fromstring(pool.XMLDesc(0)).findtext(
            'source/name') or ''
        part = name + '.part'
        opts = ''.join((':conf=%s' % ceph_conf if ceph_conf else '',
                        ':id=%s' % user if user else ''))
        cli = (('--conf', ceph_conf) if ceph_conf else ()) + (
            ('--id', user) if user else ())
        stale = self.find_volume(pool, part)
        if stale is not None:
            stale.delete(0)
        try:
            images.convert_image(path, 'rbd:%s/%s%s' % (ceph_pool, part,
                                                        opts), fmt, 'raw')
            processutils.execute('rbd', 'rename', '--pool', ceph_pool, part,
                                 name, *cli)
        except (processutils.ProcessExecutionError, OSError,
                nova_exception.NovaException) as e:
            pool.refresh(0)
            half = self.find_volume(pool, part)
            if half is not None:
                half.delete(0)
            raise exception.VolumeCreateFailed(
                pool=pool.name(), volume=name, reason=str(e)) from e
        pool.refresh(0)
        LOG.info('Uploaded template %s into storage pool %s (Ceph pool %s)',
                 name, pool.name(), ceph_pool)
        return pool.storageVolLookupByName(name)

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
