"""Gate checks of the ``ceph`` profile: both computes on one Ceph cluster.

``evacuation``
    In each direction, for an instance of a raw image (its disk in Ceph:
    stock's rbd disk on compute1, a volume of the rbd pool on compute2)
    and of a qcow2 image (a local overlay on compute1, ``qcow2:qcow2``), each
    with a config drive and a marker written into its disk: the compute it
    runs on is stopped and forced down, the instance evacuated, and the
    compute brought back (its nova-compute destroys what it had of the
    evacuated instance, its disks too unless they are shared). A disk in
    Ceph is the same RBD image on the destination (the marker reads back);
    a local disk is made anew from the image, as stock does. The config
    drive the destination uses still reads as an ISO 9660 image once the
    source came back; nothing of the instance is left on the source; Ceph
    holds exactly the instance's images the destination's domain uses. An
    instance on compute2's rbd pool evacuated to compute1, which has no
    pools, keeps its RBD image there as a stock rbd disk (the same Ceph
    pool). An evacuation that fails loses nothing: the instance's images
    are all still there.
``ceph-resize-revert``
    An instance whose disk is in Ceph (stock's rbd disk on compute1, a
    volume of the rbd pool on compute2) resized on its own host (the other
    one out of scheduling) and across, from compute1 to compute2, with a
    marker written before the resize and another into the resized disk:
    reverted, the disk reads the first marker and has its first size again
    (stock's Rbd rolls back to its ``nova-resize`` snapshot), no snapshot
    is left, and Ceph holds exactly the images its domain uses.
``ceph-cold-move``
    A cold migration, confirmed, of an instance in Ceph and of a local
    overlay (compute1's ``qcow2:qcow2``) from compute1 to compute2: the
    marker reads back there, nothing of it stays on compute1, and Ceph holds
    exactly the images its domain uses.
``ceph-live-migration``
    A running instance in Ceph live-migrates (shared storage: no block
    migration) from compute1 to compute2 and back: its marker reads back
    after each leg from the same RBD image, nothing stays on the host it
    left, and no image is added or lost in Ceph.
``move-matrix``
    The default profile's move matrix (:mod:`gate.check_matrix`, its
    guests hostile) between compute2's rbd pool and compute1's stock rbd
    disks and local overlays; registered by :mod:`gate.checks`.
``ceph-rebuild``
    An instance in Ceph on each compute rebuilt from its image: its disk
    is made anew (the marker is gone), the instance stopped as it was, and Ceph
    holds exactly the images its domain uses: the old disk is not left
    behind.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from xml.etree import ElementTree

from gate import checks_base as B
from gate import evacuation
from gate import image

#: (source, destination) of each evacuation.
DIRECTIONS = (('compute1', 'compute2'), ('compute2', 'compute1'))


def rbd_images(cloud: B.Cloud, server: Any) -> list[str]:
    """The images of the server in Nova's Ceph pool (``{uuid}_*``)."""
    ceph = cloud['ceph']
    names = json.loads(B.run_cmd(['rbd', '-c', ceph['conf'], 'ls',
                                  ceph['pool'], '--format', 'json']))
    return sorted(n for n in names if n.startswith(server.id + '_'))


def used_rbd_images(cloud: B.Cloud, server: Any) -> list[str]:
    """The RBD images the server's domain uses, where it runs."""
    c = B.compute(cloud, B.host_of(server))
    virsh = [*c['nsenter'], 'virsh', '-c', c['libvirt_uri']]
    xml = ElementTree.fromstring(B.run_cmd([*virsh, 'dumpxml',
                                            server.instance_name]))
    used = []
    for disk in xml.findall('./devices/disk'):
        source = disk.find('source')
        if source is None:
            continue
        if disk.get('type') == 'network' and source.get('protocol') == 'rbd':
            used.append(source.get('name', '').split('/', 1)[-1])
        elif disk.get('type') == 'volume':
            path = B.run_cmd([*virsh, 'vol-path', '--pool',
                              source.get('pool', ''),
                              source.get('volume', '')]).strip()
            if not path.startswith('/'):
                used.append(path.split('/', 1)[-1])
    return sorted(used)


def _one(cloud: B.Cloud, conn: Any, res: Mapping[str, Any], fmt: str,
         source: str, dest: str) -> str:
    server = B.boot(conn, res, fmt, host=source, config_drive=True)
    try:
        _c, _path, _kind, disk_fmt = B.disk(cloud, server)
        in_ceph = bool(used_rbd_images(cloud, server))
        server, marker = B.mark(cloud, conn, server)
        conn.compute.start_server(server)
        server = B.wait(conn, server, 'ACTIVE')
        before = rbd_images(cloud, server)
        moved, = evacuation.evacuate(cloud, conn, [server], source)
        if moved is None:
            # Refused: nothing of it may be lost.
            if rbd_images(cloud, server) != before:
                raise B.CheckFailed(
                    'refused evacuation of %s from %s: its images in Ceph '
                    'were %s, are %s' % (server.id, source, before,
                                         rbd_images(cloud, server)))
            return '%s %s->%s refused, kept' % (fmt, source, dest)
        if B.host_of(moved) != dest:
            raise B.CheckFailed('evacuated %s is on %s, not %s' % (
                server.id, B.host_of(moved), dest))
        c, path, kind, fmt_now = B.disk(cloud, moved)
        got = image.read_marker(path, len(marker), fmt=fmt_now,
                                argv_prefix=c['nsenter'])
        if in_ceph and got != marker:
            raise B.CheckFailed(
                'evacuated %s lost its disk in Ceph: marker %r read %r on %s '
                '(%s %s)' % (server.id, marker, got, dest, kind, path))
        if not in_ceph and got == marker:
            raise B.CheckFailed('evacuated %s kept a local disk of %s?' % (
                server.id, source))
        B.config_drive(cloud, moved)
        left = B.left_on(cloud, source, moved)
        if left:
            raise B.CheckFailed('%s came back and kept %s of evacuated %s'
                                % (source, left, server.id))
        images, used = rbd_images(cloud, moved), used_rbd_images(cloud,
                                                                 moved)
        if images != used:
            raise B.CheckFailed(
                'evacuated %s: Ceph holds %s of it, its domain on %s uses %s'
                % (server.id, images, dest, used))
        return '%s %s->%s (%s %s, was %s%s)' % (
            fmt, source, dest, kind, fmt_now, disk_fmt,
            ', in Ceph' if in_ceph else '')
    finally:
        conn.compute.delete_server(server)


def check_evacuation(cloud: B.Cloud, conn: Any,
                     res: Mapping[str, Any]) -> str:
    return '; '.join(_one(cloud, conn, res, fmt, source, dest)
                     for source, dest in DIRECTIONS
                     for fmt in ('raw', 'qcow2'))


def _images_as_used(cloud: B.Cloud, server: Any, what: str) -> list[str]:
    """The server's images in Ceph, which must be exactly those its domain
    uses (nothing left behind, nothing missing)."""
    images, used = rbd_images(cloud, server), used_rbd_images(cloud, server)
    if images != used:
        raise B.CheckFailed('%s: Ceph holds %s of %s, its domain on %s uses '
                            '%s' % (what, images, server.id,
                                    B.host_of(server), used))
    return images


def _snapshots(cloud: B.Cloud, names: list[str]) -> list[str]:
    """The snapshots of the images ``names`` of Nova's pool."""
    ceph = cloud['ceph']
    snaps = []
    for name in names:
        for snap in json.loads(B.run_cmd([
                'rbd', '-c', ceph['conf'], 'snap', 'ls', '--format',
                'json', '%s/%s' % (ceph['pool'], name)])):
            snaps.append('%s@%s' % (name, snap['name']))
    return snaps


def _virtual_size(cloud: B.Cloud, server: Any) -> int:
    """The root disk's virtual size, read in the format its domain
    names."""
    c, path, _kind, fmt = B.disk(cloud, server)
    info = json.loads(B.run_cmd([*c['nsenter'], 'qemu-img', 'info', '-U',
                                 '-f', fmt, '--output=json', path]))
    return int(info['virtual-size'])


def _read(cloud: B.Cloud, server: Any) -> tuple[bytes | None, str]:
    c, path, kind, fmt = B.disk(cloud, server)
    return image.read_marker(path, len(B.MARKER) + 6, fmt=fmt,
                             argv_prefix=c['nsenter']), '%s %s' % (kind, fmt)


def _resize_revert(cloud: B.Cloud, conn: Any, res: Mapping[str, Any],
                   source: str, dest: str) -> str:
    other = next(c['host'] for c in cloud['computes']
                 if c['host'] != dest)
    server = B.boot(conn, res, 'raw', host=source)
    try:
        if not used_rbd_images(cloud, server):
            raise B.CheckFailed('raw image on %s: its disk is not in Ceph'
                                % source)
        size = _virtual_size(cloud, server)
        server, marker = B.mark(cloud, conn, server)
        with B.scheduled_elsewhere(conn, other):
            conn.compute.resize_server(server, res['flavors']['gate.small'])
            server = B.wait(conn, server, 'VERIFY_RESIZE')
        if B.host_of(server) != dest:
            raise B.CheckFailed('resize of %s from %s went to %s, not %s' % (
                server.id, source, B.host_of(server), dest))
        grown = _virtual_size(cloud, server)
        if grown <= size:
            raise B.CheckFailed('resized %s on %s: disk of %d bytes, was %d'
                                % (server.id, dest, grown, size))
        # What the resized instance writes is what a revert undoes.
        c, path, _kind, fmt = B.disk(cloud, server)
        image.write_marker(path, B.MARKER + b'resize', fmt=fmt,
                           argv_prefix=c['nsenter'])
        conn.compute.revert_server_resize(server)
        server = B.wait(conn, server, 'SHUTOFF')
        if B.host_of(server) != source:
            raise B.CheckFailed('reverted %s is on %s, not %s' % (
                server.id, B.host_of(server), source))
        got, disk = _read(cloud, server)
        now = _virtual_size(cloud, server)
        if got != marker or now != size:
            raise B.CheckFailed(
                'reverted %s (%s -> %s): its %s disk reads %r (wanted %r), '
                '%d bytes (was %d)' % (server.id, source, dest, disk, got,
                                       marker, now, size))
        images = _images_as_used(cloud, server, 'after the revert')
        snaps = _snapshots(cloud, images)
        if snaps:
            raise B.CheckFailed('reverted %s: snapshots left: %s' % (
                server.id, snaps))
        if dest != source:
            left = B.left_on(cloud, dest, server)
            if left:
                raise B.CheckFailed('reverted %s: left on %s: %s' % (
                    server.id, dest, left))
        return '%s->%s: %s, marker and %d bytes back' % (source, dest, disk,
                                                        size)
    finally:
        conn.compute.delete_server(server)


def check_resize_revert(cloud: B.Cloud, conn: Any,
                        res: Mapping[str, Any]) -> str:
    return '; '.join(_resize_revert(cloud, conn, res, source, dest)
                     for source, dest in (('compute1', 'compute1'),
                                          ('compute2', 'compute2'),
                                          ('compute1', 'compute2')))


def _cold_move(cloud: B.Cloud, conn: Any, res: Mapping[str, Any], fmt: str,
               source: str, dest: str) -> str:
    server = B.boot(conn, res, fmt, host=source)
    try:
        in_ceph = bool(used_rbd_images(cloud, server))
        server, marker = B.mark(cloud, conn, server)
        conn.compute.migrate_server(server, host=dest)
        server = B.wait(conn, server, 'VERIFY_RESIZE')
        conn.compute.confirm_server_resize(server)
        server = B.wait(conn, server, 'SHUTOFF')
        if B.host_of(server) != dest:
            raise B.CheckFailed('cold move of %s from %s: on %s, not %s' % (
                server.id, source, B.host_of(server), dest))
        got, disk = _read(cloud, server)
        if got != marker:
            raise B.CheckFailed('moved %s (%s, %s -> %s): its %s disk reads '
                                '%r, not %r' % (server.id, fmt, source, dest,
                                                disk, got, marker))
        _images_as_used(cloud, server, 'after the cold move')
        left = B.left_on(cloud, source, server)
        if left:
            raise B.CheckFailed('moved %s: left on %s: %s' % (
                server.id, source, left))
        return '%s %s->%s: %s (was %s)' % (fmt, source, dest, disk,
                                           'in Ceph' if in_ceph else 'local')
    finally:
        conn.compute.delete_server(server)


def check_cold_move(cloud: B.Cloud, conn: Any,
                    res: Mapping[str, Any]) -> str:
    return '; '.join(_cold_move(cloud, conn, res, fmt, 'compute1',
                                'compute2') for fmt in ('raw', 'qcow2'))


def _live(cloud: B.Cloud, conn: Any, server: Any, to: str,
          marker: bytes, images: list[str]) -> Any:
    source = B.host_of(server)
    conn.compute.live_migrate_server(server, host=to, block_migration='auto')
    for _ in B.poll('live migration of %s from %s to %s' % (
            server.id, source, to)):
        server = B.wait(conn, server, 'ACTIVE')
        if B.host_of(server) == to:
            break
        found = [m for m in conn.compute.get(
            '/os-migrations?instance_uuid=%s' % server.id,
            microversion='2.59').json()['migrations']
            if m['migration_type'] == 'live-migration']
        last = max(found, key=lambda m: m['id']) if found else None
        if last and last['status'] in ('error', 'failed'):
            raise B.CheckFailed('live migration of %s from %s to %s: %s' % (
                server.id, source, to, last['status']))
    now = _images_as_used(cloud, server, 'after the live migration')
    if now != images:
        raise B.CheckFailed('live migration of %s %s -> %s: Ceph held %s, '
                            'holds %s' % (server.id, source, to, images, now))
    left = B.left_on(cloud, source, server)
    if left:
        raise B.CheckFailed('live migration of %s: left on %s: %s' % (
            server.id, source, left))
    # The marker, read while the guest runs (-U), from the same image.
    got, _disk = _read(cloud, server)
    if got != marker:
        raise B.CheckFailed('live migration of %s %s -> %s: reads %r, not '
                            '%r' % (server.id, source, to, got, marker))
    return server


def check_live_migration(cloud: B.Cloud, conn: Any,
                         res: Mapping[str, Any]) -> str:
    server = B.boot(conn, res, 'raw', host='compute1')
    try:
        server, marker = B.mark(cloud, conn, server)
        conn.compute.start_server(server)
        server = B.wait(conn, server, 'ACTIVE')
        images = _images_as_used(cloud, server, 'before the live migration')
        if not images:
            raise B.CheckFailed('raw image on compute1: not in Ceph')
        server = _live(cloud, conn, server, 'compute2', marker, images)
        server = _live(cloud, conn, server, 'compute1', marker, images)
        return 'compute1->compute2->compute1: %s, the same RBD image' % (
            ', '.join(images))
    finally:
        conn.compute.delete_server(server)


def _rebuild(cloud: B.Cloud, conn: Any, res: Mapping[str, Any],
             host: str) -> str:
    server = B.boot(conn, res, 'raw', host=host)
    try:
        before = _images_as_used(cloud, server, 'before the rebuild')
        server, marker = B.mark(cloud, conn, server)
        conn.compute.rebuild_server(server, image=res['images']['raw'])
        # A stopped server stays stopped through its rebuild.
        server = B.wait(conn, server, 'SHUTOFF')
        got, disk = _read(cloud, server)
        if got == marker:
            raise B.CheckFailed('rebuilt %s on %s: its %s disk still holds '
                                'the marker' % (server.id, host, disk))
        after = _images_as_used(cloud, server, 'after the rebuild')
        if len(after) != len(before):
            raise B.CheckFailed('rebuilt %s on %s: Ceph held %s, holds %s' % (
                server.id, host, before, after))
        return '%s: %s made anew' % (host, disk)
    finally:
        conn.compute.delete_server(server)


def check_rebuild(cloud: B.Cloud, conn: Any,
                  res: Mapping[str, Any]) -> str:
    return '; '.join(_rebuild(cloud, conn, res, host)
                     for host in ('compute1', 'compute2'))


CHECKS: dict[str, B.Check] = {
    'evacuation': check_evacuation,
    'ceph-resize-revert': check_resize_revert,
    'ceph-cold-move': check_cold_move,
    'ceph-live-migration': check_live_migration,
    'ceph-rebuild': check_rebuild,
}
