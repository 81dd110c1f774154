"""Files on another compute node, through its libvirtd instead of SSH.

:class:`LibvirtRemoteFilesystem` answers the interface of Nova's
:class:`nova.virt.libvirt.volume.remotefs.RemoteFilesystem` (what stock's
cold migration and resize call to make the instance directory on the
destination, to learn whether a path is shared, to copy disks and to clean
up after a failure) with libvirt's storage API, over the connection Nova
already opens between compute nodes for live migration
(``[libvirt]live_migration_uri``, else ``live_migration_scheme``):

* a file is a volume of the dir pool holding its directory: the pool the
  destination defines there (``nova-disks-pool``), else a transient pool
  made for the call and destroyed after it;
* a directory is made by building a transient dir pool on it, removed by
  deleting a pool defined on it for the call;
* libvirt allows one pool per directory: the calls of this process that
  use a transient pool over one directory of one host take turns (a lock
  per host and directory), so that none destroys its pool under another;
  copies into a defined pool run at once;
* a pool of another request that vanishes while the host's pools are
  listed (another cold move into that host ending) is passed over;
* data go through a sparse libvirt stream (``virStorageVolUpload``): holes
  stay holes, a qcow2 overlay keeps its header and backing file name, and
  progress is logged at INFO.

Nothing here needs SSH between compute nodes nor
``[libvirt]remote_filesystem_transport``.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from typing import Any
from xml.etree import ElementTree

import libvirt
from nova.virt.libvirt import utils as libvirt_utils
from oslo_concurrency import lockutils
from oslo_log import log as logging
from oslo_utils import fileutils

from nova_imgtype import exception
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import sparse

LOG = logging.getLogger(__name__)

#: Share of a copy between two progress lines in the log.
PROGRESS_STEP = 0.1


class LibvirtRemoteFilesystem:
    """Nova's remote filesystem operations, on the destination's libvirtd.

    :param uri_for: the libvirt URI of a host (stock's
        ``LibvirtDriver._live_migration_uri``).
    """

    def __init__(self, uri_for: Callable[[str], str]) -> None:
        self._uri_for = uri_for

    @contextlib.contextmanager
    def _connection(self, host: str) -> Iterator[libvirt.virConnect]:
        conn = libvirt.open(self._uri_for(host))
        try:
            yield conn
        finally:
            conn.close()

    def create_file(self, host: str, dst_path: str,
                    on_execute: Any = None, on_completion: Any = None) -> None:
        """An empty file ``dst_path`` on ``host``."""
        with self._connection(host) as conn, \
                _pool_at(conn, os.path.dirname(dst_path)) as pool:
            pool.createXML(pool_specs._volume_xml(
                os.path.basename(dst_path), 'raw', 0), 0)

    def remove_file(self, host: str, dst_path: str,
                    on_execute: Any = None, on_completion: Any = None) -> None:
        """Delete the file ``dst_path`` on ``host``."""
        with self._connection(host) as conn, \
                _pool_at(conn, os.path.dirname(dst_path)) as pool:
            pool.storageVolLookupByName(os.path.basename(dst_path)).delete(0)

    def create_dir(self, host: str, dst_path: str,
                   on_execute: Any = None, on_completion: Any = None) -> None:
        """The directory ``dst_path`` on ``host`` (``mkdir -p``)."""
        with self._connection(host) as conn, _turn(conn, dst_path):
            pool = conn.storagePoolCreateXML(
                _pool_xml(dst_path),
                libvirt.VIR_STORAGE_POOL_CREATE_WITH_BUILD)
            pool.destroy()

    def remove_dir(self, host: str, dst_path: str,
                   on_execute: Any = None, on_completion: Any = None) -> None:
        """Delete the directory ``dst_path`` on ``host`` and the files in
        it (``rm -rf`` of an instance directory, which holds no
        subdirectory); nothing when it is not there."""
        with self._connection(host) as conn, _turn(conn, dst_path):
            pool = conn.storagePoolDefineXML(_pool_xml(dst_path), 0)
            try:
                try:
                    pool.create(0)
                except libvirt.libvirtError:
                    # No such directory: nothing to remove.
                    return
                for vol in pool.listAllVolumes(0):
                    vol.delete(0)
                pool.destroy()
                pool.delete(0)
            finally:
                if pool.isActive():
                    pool.destroy()
                pool.undefine()

    def copy_file(self, src: str, dst: str, on_execute: Any = None,
                  on_completion: Any = None, compression: bool = True) -> None:
        """Copy the local file ``src`` to ``dst``, ``host:path``."""
        host, _, path = dst.rpartition(':')
        self.upload(src, host, path)

    def upload(self, src: str, host: str, dst_path: str) -> None:
        """The local file ``src`` as ``dst_path`` on ``host``, the same
        bytes, holes kept; a failed copy leaves no file there (as long as
        the destination answers). A file already there, what an earlier
        failed copy could not remove, is replaced, as ``scp`` does."""
        size = os.path.getsize(src)
        name = os.path.basename(dst_path)
        with self._connection(host) as conn, \
                _pool_at(conn, os.path.dirname(dst_path)) as pool:
            _replace_leftover(pool, host, dst_path)
            vol = pool.createXML(pool_specs._volume_xml(name, 'raw', size), 0)
            try:
                _write(conn, vol, src, size, '%s:%s' % (host, dst_path))
            except BaseException:
                vol.delete(0)
                raise
        LOG.info('Copied %(src)s to %(host)s:%(dst)s through libvirt '
                 '(%(size)d bytes)',
                 {'src': src, 'host': host, 'dst': dst_path, 'size': size})

    def fill(self, src: str, host: str, dst_path: str) -> None:
        """Write the local file ``src`` into ``dst_path`` on ``host``, an
        empty (all holes) file of the same size that ``host`` made for it:
        a disk it made for an arriving instance. Holes are skipped, so
        they stay zeros. A failed copy leaves the file to its maker.

        :raises libvirtError: ``host`` has no such file, or the copy failed.
        """
        size = os.path.getsize(src)
        with self._connection(host) as conn, \
                _pool_at(conn, os.path.dirname(dst_path)) as pool:
            vol = pool.storageVolLookupByName(os.path.basename(dst_path))
            _write(conn, vol, src, size, '%s:%s' % (host, dst_path))
        LOG.info('Copied %(src)s into %(host)s:%(dst)s through libvirt '
                 '(%(size)d bytes)',
                 {'src': src, 'host': host, 'dst': dst_path, 'size': size})


def send(remote: LibvirtRemoteFilesystem, host: str,
         copies: Sequence[tuple[str, str, bool]]) -> None:
    """Copy each local file to its path on ``host``: ``(source, target,
    shared)``, where ``shared`` says that this host sees the target's
    directory too (a local copy then, as stock's ``cp``).

    :raises DiskCopyFailed: a copy failed (the destination's libvirtd went
        away, its disk is full, ...); what was copied before it has been
        removed there, as far as the destination still answers.
    """
    copied: list[tuple[str, bool]] = []
    for src, target, shared in copies:
        try:
            if shared:
                libvirt_utils.copy_image(src, target)
            else:
                remote.upload(src, host, target)
        except Exception as e:
            for done, done_shared in reversed(copied):
                try:
                    if done_shared:
                        fileutils.delete_if_exists(done)
                    else:
                        remote.remove_file(host, done)
                except Exception as cleanup:  # noqa: BLE001 - said; the
                    # failed copy is what is raised
                    LOG.warning('Could not remove %(target)s on %(host)s '
                                'after a failed copy: %(e)s',
                                {'target': done, 'host': host,
                                 'e': cleanup})
            raise exception.DiskCopyFailed(
                src=src, host=host, target=target, reason=e) from e
        copied.append((target, shared))


def _replace_leftover(pool: libvirt.virStoragePool, host: str,
                      path: str) -> None:
    try:
        old = pool.storageVolLookupByName(os.path.basename(path))
    except libvirt.libvirtError:
        return
    LOG.warning('Replacing %(host)s:%(path)s, left by an earlier copy',
                {'host': host, 'path': path})
    old.delete(0)


def _pool_xml(path: str) -> str:
    pool = ElementTree.Element('pool', type='dir')
    ElementTree.SubElement(pool, 'name').text = (
        'nova-imgtype-remote-%s' % uuid.uuid4().hex[:12])
    target = ElementTree.SubElement(pool, 'target')
    ElementTree.SubElement(target, 'path').text = path
    return ElementTree.tostring(pool, encoding='unicode')


@contextlib.contextmanager
def _turn(conn: libvirt.virConnect, directory: str) -> Iterator[None]:
    """This process's turn at the pools over ``directory`` on ``conn``'s
    host: libvirt allows one pool per directory, and a transient one is
    destroyed by the call that made it."""
    with lockutils.lock('nova-imgtype-remote-%s-%s' % (
            conn.getURI(), os.path.normpath(directory))):
        yield


def _active_pool_at(conn: libvirt.virConnect,
                    directory: str) -> libvirt.virStoragePool | None:
    """The active dir pool over ``directory`` on ``conn``, refreshed, or
    None; a pool that vanishes meanwhile (another request's transient
    one) is passed over."""
    for pool in conn.listAllStoragePools(
            libvirt.VIR_CONNECT_LIST_STORAGE_POOLS_ACTIVE |
            libvirt.VIR_CONNECT_LIST_STORAGE_POOLS_DIR):
        try:
            if os.path.normpath(pool_specs.pool_target(pool)) != directory:
                continue
            pool_specs.refresh(pool)
        except libvirt.libvirtError as e:
            if pool_specs.vanished(e):
                continue
            raise
        return pool
    return None


@contextlib.contextmanager
def _pool_at(conn: libvirt.virConnect,
             directory: str) -> Iterator[libvirt.virStoragePool]:
    """The active dir pool of ``directory`` on ``conn``, refreshed: the
    one defined there, else a transient one destroyed afterwards (libvirt
    refuses two pools of one directory), during this process's turn at
    the directory (:func:`_turn`) unless the pool is a defined one.

    :raises libvirtError: the directory does not exist.
    """
    directory = os.path.normpath(directory)
    with contextlib.ExitStack() as turn:
        turn.enter_context(_turn(conn, directory))
        pool = _active_pool_at(conn, directory)
        if pool is not None and pool.isPersistent():
            # A defined pool (the destination's disks pool) outlives every
            # call: the copies into it need no turn.
            turn.close()
        if pool is not None:
            yield pool
            pool_specs.refresh(pool)
            return
        pool = conn.storagePoolCreateXML(_pool_xml(directory), 0)
        try:
            yield pool
        finally:
            pool.destroy()


def _write(conn: libvirt.virConnect, vol: libvirt.virStorageVol, src: str,
           size: int, what: str) -> None:
    """The local file ``src`` (``size`` bytes) into ``vol`` of ``conn``,
    as a sparse stream."""
    stream = conn.newStream(0)
    try:
        vol.upload(stream, 0, size,
                   libvirt.VIR_STORAGE_VOL_UPLOAD_SPARSE_STREAM)
        with open(src, 'rb') as f:
            _send_sparse(stream, f, size, what)
        stream.finish()
    except BaseException:
        with contextlib.suppress(libvirt.libvirtError):
            stream.abort()
        raise


def _send_sparse(stream: libvirt.virStream, f: Any, size: int,
                 what: str) -> None:
    """Send the file ``f`` (``size`` bytes) through ``stream`` with
    libvirt's ``virStream.sparseSendAll``: its data as data, its holes (as
    the filesystem reports them, :func:`.sparse.section`) as holes."""
    fd = f.fileno()
    os.lseek(fd, 0, os.SEEK_SET)
    progress = {'logged': 0.0}

    def data(_stream: libvirt.virStream, nbytes: int, _fd: int) -> bytes:
        chunk = os.read(fd, nbytes)
        offset = os.lseek(fd, 0, os.SEEK_CUR)
        if nbytes and not chunk:
            raise OSError('%s: short read at %d' % (f.name, offset))
        if size and offset / size - progress['logged'] >= PROGRESS_STEP:
            progress['logged'] = offset / size
            LOG.info('Copying to %(what)s: %(done)d of %(size)d bytes '
                     '(%(pct)d%%)', {'what': what, 'done': offset,
                                    'size': size,
                                    'pct': 100 * offset // size})
        return chunk

    def hole(_stream: libvirt.virStream, _fd: int) -> tuple[bool, int]:
        return sparse.section(fd, size)

    def skip(_stream: libvirt.virStream, length: int, _fd: int) -> int:
        return os.lseek(fd, length, os.SEEK_CUR)

    stream.sparseSendAll(data, hole, skip, fd)
