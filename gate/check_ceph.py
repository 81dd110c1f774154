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
    evacuation the destination cannot take (an instance on a storage pool
    to a compute without pools) is refused by the scheduler and loses
    nothing: the instance's images are all still there.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any
from xml.etree import ElementTree

from gate import checks_base as B
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


def _service(conn: Any, host: str) -> Any:
    return next(conn.compute.services(binary='nova-compute', host=host))


def _forced_down(conn: Any, host: str, forced: bool) -> None:
    r = conn.compute.put('/os-services/%s' % _service(conn, host).id,
                         json={'forced_down': forced}, microversion='2.53')
    if r.status_code >= 400:
        raise B.CheckFailed('forced_down %s for %s: %s %s' % (
            forced, host, r.status_code, r.text))


def _evacuations(conn: Any, server: Any) -> list[dict[str, Any]]:
    migrations: list[dict[str, Any]] = conn.compute.get(
        '/os-migrations?instance_uuid=%s' % server.id,
        microversion='2.59').json()['migrations']
    return [m for m in migrations if m['migration_type'] == 'evacuation']


def _evacuated(conn: Any, server: Any, source: str) -> Any | None:
    """The server once its evacuation from ``source`` ended: on another
    host (done), or None when it failed (the server stays on source)."""
    deadline = time.monotonic() + B.TIMEOUT
    while time.monotonic() < deadline:
        found = _evacuations(conn, server)
        last = max(found, key=lambda m: m['id']) if found else None
        if last and last['status'] in ('error', 'failed'):
            return None
        if last and last['status'] == 'done':
            return B.wait(conn, server, 'ACTIVE')
        time.sleep(1)
    raise B.CheckFailed('evacuation of %s from %s not over after %ds' % (
        server.id, source, B.TIMEOUT))


def _evacuate(cloud: B.Cloud, conn: Any, server: Any,
              source: str) -> Any | None:
    """Stop ``source``'s nova-compute, force it down, evacuate the server
    and bring ``source`` back whatever happened; the evacuated server, or
    None if the evacuation failed."""
    from gate.cloud import computes
    from gate.cloud import proc as P

    state = P.State.load(cloud['base'])
    computes.stop_nova_computes(state, [source])
    try:
        _forced_down(conn, source, True)
        conn.compute.post('/servers/%s/action' % server.id,
                          json={'evacuate': {}}, microversion='2.14')
        return _evacuated(conn, server, source)
    finally:
        _bring_back(cloud, conn, server, source)


def _bring_back(cloud: B.Cloud, conn: Any, server: Any, host: str) -> None:
    """``host``'s nova-compute started again, on the plugin: as it starts
    it destroys the instances evacuated from it (moving their evacuations
    from done to completed), and only then may it be forced up again."""
    from gate.cloud import computes
    from gate.cloud import layout as L
    from gate.cloud import proc as P

    state = P.State.load(cloud['base'])
    compute = next(c for c in state.computes if c.host == host)
    since = time.time()
    proc = computes.start_nova_compute(state, compute, L.PLUGIN_DRIVER)
    deadline = time.monotonic() + B.TIMEOUT
    while any(m['status'] == 'done' and m['source_compute'] == host
              for m in _evacuations(conn, server)):
        if time.monotonic() > deadline:
            raise B.CheckFailed('%s did not complete the evacuation of %s '
                                'after %ds' % (host, server.id, B.TIMEOUT))
        P.check_alive(proc, host + ' nova-compute',
                      state.layout.log(host + '-nova-compute'))
        time.sleep(1)
    _forced_down(conn, host, False)
    computes.wait_computes_reporting(state, since, {host: proc})


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
        moved = _evacuate(cloud, conn, server, source)
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


CHECKS: dict[str, Callable[[B.Cloud, Any, Mapping[str, Any]], str]] = {
    'evacuation': check_evacuation,
}
