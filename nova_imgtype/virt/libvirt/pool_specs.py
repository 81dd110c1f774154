"""What a host's storage pools are: names, types, targets and definitions,
and what is read from a pool's or a volume's XML. No libvirt call is made
here; :mod:`~nova_imgtype.virt.libvirt.pools` makes them. The Ceph cluster
of an rbd disks pool is asked of the cluster
(:mod:`~nova_imgtype.virt.libvirt.ceph_cluster`).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterable
from typing import Any
from xml.etree import ElementTree

import libvirt
from oslo_log import log as logging

from nova_imgtype.virt.libvirt import ceph_cluster

BASE_POOL = 'nova-base-images-pool'
DISKS_POOL = 'nova-disks-pool'
#: Templates uploaded into an rbd disks pool: ``nova-base_<cache file>``.
RBD_TEMPLATE_PREFIX = 'nova-base_'

LOG = logging.getLogger(__name__)

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
    cephx ``auth_user``/``auth_secret_uuid`` of an rbd pool, and
    ``cluster``, the fsid of its Ceph cluster where it is known (a pool
    defined from this host's configuration; libvirt's definition of a
    pool does not say it).
    """

    name: str
    type: str
    target: str = ''
    source: str = ''
    hosts: tuple[str, ...] = ()
    auth_user: str = ''
    auth_secret_uuid: str = ''
    cluster: str = ''

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

    def volume_path(self, name: str) -> str:
        """Where the pool's volume ``name`` is: ``<target>/<name>`` for dir
        and logical pools, ``<ceph pool>/<name>`` for rbd ones."""
        if self.target:
            return os.path.join(self.target, name)
        return '%s/%s' % (self.source or self.name, name)

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


def disks_pool_name_for(conf: Any, backend: str) -> str:
    """The name of this host's disks pool implementing ``backend``
    (:func:`disks_pool_name`), asking no storage."""
    return disks_pool_name(POOL_TYPES[backend], POOL_TYPES.get(
        conf.libvirt.images_type, 'dir'))


def disks_pool_name(pool_type: str, default_type: str) -> str:
    """The name of the disks pool of ``pool_type`` on a host.

    The pool of the host's own ``images_type`` is ``nova-disks-pool``; a
    pool of another type that the mapping needs on the same host is
    ``nova-disks-pool-<type>`` (``nova-disks-pool-dir``,
    ``nova-disks-pool-logical``, ``nova-disks-pool-rbd``).
    """
    return (DISKS_POOL if pool_type == default_type
            else '%s-%s' % (DISKS_POOL, pool_type))


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
        # The cluster says who it is and where its monitors are, as
        # stock's rbd disks ask it (asked once per process).
        cluster = ceph_cluster.identify(conf.libvirt.images_rbd_ceph_conf,
                                        conf.libvirt.rbd_user or '',
                                        conf.libvirt.images_rbd_pool)
        return PoolSpec(
            name, 'rbd', source=conf.libvirt.images_rbd_pool,
            hosts=cluster.monitors, cluster=cluster.fsid,
            auth_user=(conf.libvirt.rbd_user
                       if conf.libvirt.rbd_secret_uuid else ''),
            auth_secret_uuid=conf.libvirt.rbd_secret_uuid or '')
    return PoolSpec(name, 'dir', dir_disks_location(conf))


def dir_disks_location(conf: Any) -> str:
    """Where this host's dir pool keeps instance disks, whatever the
    pool's name: ``<instances_path>/disks``."""
    return os.path.join(conf.instances_path, 'disks')


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


def vanished(e: libvirt.libvirtError) -> bool:
    """Whether ``e`` says that a pool is gone: listed a moment ago, then
    destroyed by the request that made it (a transient pool over an
    instance directory, made by a cold move arriving from another host,
    lives only for one of its copies). Whoever lists the pools of a host
    passes over such a pool; it is not an error of theirs."""
    return e.get_error_code() == libvirt.VIR_ERR_NO_STORAGE_POOL


#: What follows the monitors in the location key of an rbd pool whose
#: cluster's fsid is known.
_FSID = ';fsid='


def location_key(spec: PoolSpec) -> str:
    """What identifies a pool's storage on every host, whatever the pool's
    name: ``dir:<directory>``, ``logical:<volume group>``, ``rbd:<Ceph
    pool>@<monitors>`` (sorted, comma separated) followed by
    ``;fsid=<fsid>`` where the Ceph cluster's fsid is known (records
    written before 2026-11-28 have none)."""
    if spec.type == 'rbd':
        return 'rbd:%s@%s%s' % (spec.source, ','.join(sorted(spec.hosts)),
                                _FSID + spec.cluster if spec.cluster
                                else '')
    if spec.type == 'logical':
        return 'logical:%s' % spec.source
    return '%s:%s' % (spec.type, os.path.normpath(spec.target)
                      if spec.target else '')


#: The messenger ports a Ceph monitor listens on by default (msgr2,
#: msgr1): hosts name one monitor by either, or by none (ceph.conf).
_MON_PORTS = ('3300', '6789')

#: The (key, other) pairs whose refusal was logged: said once a process.
_REFUSED: set[tuple[str, str]] = set()


def _monitor(address: str) -> tuple[str, str]:
    """(host, port) of a monitor address (``host[:port]``, an IPv6 host
    bracketed), a default messenger port or none as ''."""
    if address.startswith('['):
        host, _sep, rest = address[1:].partition(']')
        port = rest[1:] if rest.startswith(':') else ''
    elif address.count(':') == 1:
        host, _sep, port = address.partition(':')
    else:
        host, port = address, ''
    return host, '' if port in _MON_PORTS else port


def _rbd_place(place: str) -> tuple[str, set[tuple[str, str]], str]:
    """The Ceph pool, the monitors (:func:`_monitor`) and the fsid (''
    when not recorded) of an rbd location key's place."""
    pool, _sep, rest = place.partition('@')
    mons, _sep, fsid = rest.partition(_FSID)
    return pool, {_monitor(h) for h in mons.split(',') if h}, fsid


def location_fsid(key: str) -> str:
    """The Ceph cluster's fsid in an rbd location key, '' when it has
    none (another type, a key written before fsids were)."""
    if not key.startswith('rbd:'):
        return ''
    return _rbd_place(key[4:])[2]


def same_storage(key: str, other: str) -> bool:
    """Whether two :func:`location_key` values name the same storage: the
    same type and place; for rbd, the same Ceph pool of the same cluster:
    the same fsid where both keys have one, else a monitor in common, its
    address and port (two hosts may list its monitors differently, by
    either default messenger port), or no monitor known on either side
    (the host's default cluster). A key without fsid whose monitors share
    only a host with the other's (another cluster there, on other ports)
    is refused with a warning naming it."""
    kind, _sep, place = key.partition(':')
    other_kind, _sep, other_place = other.partition(':')
    if kind != other_kind:
        return False
    if kind != 'rbd':
        return place == other_place
    pool, mons, fsid = _rbd_place(place)
    other_pool, other_mons, other_fsid = _rbd_place(other_place)
    if pool != other_pool:
        return False
    if fsid and other_fsid:
        return fsid == other_fsid
    if mons & other_mons or not (mons or other_mons):
        return True
    hosts = {h for h, _p in mons} & {h for h, _p in other_mons}
    if hosts and (key, other) not in _REFUSED:
        _REFUSED.add((key, other))
        # The key without fsid is the record (where both lack one, a pool
        # definition's is the first).
        record, against = (key, other) if other_fsid else (other, key)
        LOG.warning('The Ceph storage %(record)s, recorded without its '
                    'cluster\'s fsid, is not taken for %(against)s: their '
                    'monitors share host(s) %(hosts)s on other ports (two '
                    'clusters there)', {'record': record, 'against': against,
                                        'hosts': ', '.join(sorted(hosts))})
    return False


def same_source(key: str, other: str) -> bool:
    """Whether two rbd :func:`location_key` values name the same Ceph pool,
    whatever their monitors."""
    if not (key.startswith('rbd:') and other.startswith('rbd:')):
        return False
    return key[4:].partition('@')[0] == other[4:].partition('@')[0]


def is_shared_location(key: str) -> bool:
    """Whether storage of that location is shared between hosts (an rbd
    pool of a Ceph cluster); a directory or a volume group is the host's
    own."""
    return key.startswith('rbd:')


def volume_path(pool: Pool, name: str) -> str:
    """Where a volume of the pool is: ``<target>/<name>`` for dir and
    logical pools, ``<ceph pool>/<name>`` for rbd ones."""
    return pool_source(pool).volume_path(name)


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
    """The format libvirt reads a volume in (raw, qcow2, ...), named as
    QEMU names it: an ISO 9660 file, which a dir pool calls ``iso``, is a
    raw disk."""
    fmt = ElementTree.fromstring(vol.XMLDesc(0)).find('target/format')
    found = (fmt.get('type') if fmt is not None else None) or 'raw'
    return 'raw' if found == 'iso' else found


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


#: How long a refresh waits for libvirt's other jobs in the pool (a volume
#: another request is building or copying) before it gives up.
REFRESH_WAIT = 300.0


def refresh(pool: Any, wait: float = REFRESH_WAIT) -> None:
    """Read the pool's volumes again (``virStoragePoolRefresh``).

    libvirt refuses to refresh a pool while it builds or copies a volume
    of it (``createXMLFrom``: an RBD clone, a dir pool copy): "pool ... has
    asynchronous jobs running". That is another request's work, not a
    failure of this one: the refresh is tried again, less and less often,
    until it goes through or ``wait`` seconds have passed.

    :raises libvirtError: another refusal, or jobs still running after
        ``wait`` seconds.
    """
    deadline = time.monotonic() + wait
    delay = 0.05
    while True:
        try:
            pool.refresh(0)
            return
        except libvirt.libvirtError as e:
            if (ASYNC_JOBS not in str(e) or
                    time.monotonic() + delay > deadline):
                raise
        time.sleep(delay)
        delay = min(delay * 2, 2.0)


#: What libvirt says when it refuses a refresh during a volume job (its
#: daemons run in the C locale, as systemd starts them).
ASYNC_JOBS = 'has asynchronous jobs running'
