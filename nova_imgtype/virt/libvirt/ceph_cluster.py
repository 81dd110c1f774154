"""Which Ceph cluster a host's rbd storage is in, in Ceph's own words.

A Ceph cluster is known by its fsid, which never changes and which every
client of the cluster reads alike; its monitors are where a client reaches
it, and every host may list them otherwise (names or addresses, some or
all). Both are asked of Ceph through stock Nova's
:class:`nova.storage.rbd_utils.RBDDriver` (``get_fsid()``, and
``get_mon_addrs()``, ``ceph mon dump``, which stock's own rbd disks name
in their XML), never read from ceph.conf by hand. What ceph.conf says is
read by librados' own configuration reader.
"""

from __future__ import annotations

import dataclasses
import threading

from nova.storage import rbd_utils
from oslo_log import log as logging

from nova_imgtype import exception

LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class CephCluster:
    """A Ceph cluster as a client of it sees it.

    ``fsid`` is the cluster's identity; ``monitors`` are ``host:port`` of
    its monitors as the cluster lists them (``ceph mon dump``).
    """

    fsid: str
    monitors: tuple[str, ...]


#: What each client (ceph.conf, cephx user, Ceph pool) found, read once per
#: process: a cluster's fsid never changes, and its monitors are written
#: into the rbd pool's definition once, when the pool is defined.
_FOUND: dict[tuple[str, str, str], CephCluster] = {}
_LOCK = threading.Lock()


def identify(ceph_conf: str, user: str, pool: str) -> CephCluster:
    """The cluster this host reaches with ``ceph_conf`` as cephx ``user``
    (its fsid and monitors), asked of the cluster once per process.

    :raises StorageUnavailable: the cluster did not answer (it is asked
        again next time).
    """
    key = (ceph_conf, user, pool)
    with _LOCK:
        found = _FOUND.get(key)
    if found is not None:
        return found
    driver = rbd_utils.RBDDriver(pool=pool, user=user, ceph_conf=ceph_conf)
    try:
        fsid = driver.get_fsid()
        hosts, ports = driver.get_mon_addrs()
    except Exception as e:  # noqa: BLE001 - rados, processutils: said
        raise exception.StorageUnavailable(
            pool='Ceph pool %s' % pool,
            reason='the Ceph cluster of %s did not answer: %s' % (
                ceph_conf or 'the default ceph.conf', e)) from e
    found = CephCluster(fsid, tuple(
        '%s:%s' % pair for pair in zip(hosts, ports, strict=True)))
    LOG.debug('Ceph cluster of %(conf)s: fsid %(fsid)s, monitors %(mons)s',
              {'conf': ceph_conf, 'fsid': found.fsid,
               'mons': ', '.join(found.monitors)})
    with _LOCK:
        _FOUND[key] = found
    return found


def names_monitors(ceph_conf: str, user: str) -> bool:
    """Whether ``ceph_conf``, read by librados as a client of cephx
    ``user`` reads it, says how to reach a cluster (``mon_host``), without
    asking the cluster: a host is configured for rbd only where it does.
    A missing or unreadable file says nothing."""
    try:
        import rados
    except ImportError:
        LOG.warning('No rbd storage: the rados Python library is not '
                    'installed')
        return False
    try:
        client = rados.Rados(conffile=ceph_conf, rados_id=user or None)
    except rados.Error:
        return False
    try:
        return bool((client.conf_get('mon_host') or '').strip())
    finally:
        client.shutdown()


def forget() -> None:
    """Forget every cluster found (tests; a host asks again)."""
    with _LOCK:
        _FOUND.clear()
