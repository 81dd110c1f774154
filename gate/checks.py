"""Gate checks tempest cannot make, against a running gate cloud.

Each check looks at the computes themselves (inside their mount
namespaces: ``qemu-img``, ``virsh``, the image cache) and at placement:

``traits``
    Each compute's ``COMPUTE_IMAGE_TYPE_*`` traits in placement are what
    ``nova-imgtype check`` says of its configuration.
``precache``
    Image pre-caching through the aggregates API (2.81) leaves in ``_base``
    the template a boot uses: the native qcow2 file on a host whose mapping
    keeps qcow2.
``disks``
    The instance disk and its template are what the mapping says: a qcow2
    overlay volume on the unconverted template on the pools host, a raw
    file on the flat host.
``novalidhost``
    An image of a format no compute supports ends in NoValidHost.
``cold-migration`` / ``resize-revert`` / ``pools-to-files``
    A marker written into the instance disk before a move between the two
    computes (separate storage) is read back after it: files into the pools
    host, and a pool volume to the host without pools (reverted, then
    confirmed).
``live-migration``
    A running pool instance live-migrates (block migration, no shared
    storage, no SSH) to the host without pools, where its disk becomes a
    file, and back into the pool; its marker reads back after each move and
    nothing of it is left on the host it left.

CLI: ``python -m gate.checks --cloud <base>/cloud.json`` prints one line
per check and writes ``<base>/checks.json``; exit 1 if any failed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
import traceback
import uuid
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any
from xml.etree import ElementTree

from gate import image
from gate import tempest

Cloud = Mapping[str, Any]
MARKER = b'nova-imgtype gate marker'
TIMEOUT = 300.0


class CheckFailed(Exception):
    """A check found the cloud not as it should be."""


def _run(argv: list[str]) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise CheckFailed('%s: %s' % (' '.join(argv), proc.stderr.strip()))
    return proc.stdout


def _compute(cloud: Cloud, host: str) -> Mapping[str, Any]:
    for c in cloud['computes']:
        if c['host'] == host:
            return c
    raise CheckFailed('no compute %s in cloud.json' % host)


def _hosts(cloud: Cloud) -> tuple[str, str]:
    """(the pools host, the files host) of the plugin's configuration."""
    pools = [c['host'] for c in cloud['computes']
             if c.get('use_storage_pools')]
    files = [c['host'] for c in cloud['computes']
             if not c.get('use_storage_pools')]
    if not pools or not files:
        raise CheckFailed('the computes are not on the plugin')
    return pools[0], files[0]


# -- servers -----------------------------------------------------------------

def _wait(conn: Any, server: Any, status: str) -> Any:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        server = conn.compute.get_server(server.id)
        if server.status == status and not server.task_state:
            return server
        if server.status == 'ERROR' and status != 'ERROR':
            raise CheckFailed('server %s ERROR: %s' % (server.id,
                                                      server.fault))
        time.sleep(1)
    raise CheckFailed('server %s not %s after %ds (%s, task %s)' % (
        server.id, status, TIMEOUT, server.status, server.task_state))


def _boot(conn: Any, res: Mapping[str, Any], fmt: str,
          host: str | None = None, status: str = 'ACTIVE') -> Any:
    kwargs: dict[str, Any] = {}
    if host:
        kwargs['availability_zone'] = 'nova:%s' % host
    server = conn.compute.create_server(
        name='gate-check-%s' % uuid.uuid4().hex[:8],
        image_id=res['images'][fmt],
        flavor_id=res['flavors']['gate.tiny'], networks='none', **kwargs)
    return _wait(conn, server, status)


def _host_of(server: Any) -> str:
    return str(server.compute_host)


def _disk(cloud: Cloud, server: Any) -> tuple[Mapping[str, Any], str, str]:
    """(compute, path inside its namespace, kind) of the root disk."""
    c = _compute(cloud, _host_of(server))
    virsh = [*c['nsenter'], 'virsh', '-c', c['libvirt_uri']]
    xml = ElementTree.fromstring(_run([*virsh, 'dumpxml',
                                       server.instance_name]))
    disk = xml.find("./devices/disk[@device='disk']")
    if disk is None:
        raise CheckFailed('no disk in the domain of %s' % server.id)
    source = disk.find('source')
    assert source is not None
    if disk.get('type') == 'volume':
        path = _run([*virsh, 'vol-path', '--pool', source.get('pool', ''),
                     source.get('volume', '')]).strip()
        return c, path, 'volume'
    path = source.get('file', '')
    # A volume named by its path (a live-migrated guest, until its next
    # start): libvirt knows the path as a volume of one of its pools.
    by_path = subprocess.run([*virsh, 'vol-name', path], capture_output=True,
                             text=True, check=False)
    return c, path, 'volume' if by_path.returncode == 0 else 'file'


def _chain(c: Mapping[str, Any], path: str) -> list[dict[str, Any]]:
    out = _run([*c['nsenter'], 'qemu-img', 'info', '-U', '--backing-chain',
                '--output=json', path])
    chain: list[dict[str, Any]] = json.loads(out)
    return chain


# -- the checks -------------------------------------------------------------

def check_traits(cloud: Cloud, conn: Any, res: Mapping[str, Any]) -> str:
    said = []
    for c in cloud['computes']:
        out = _run([os.path.join(cloud['venv'], 'bin', 'nova-imgtype'),
                    'check', '--format', 'json', '--config-file',
                    c['config']])
        want = {r['trait'] for r in json.loads(out)['formats']
                if r['trait'] != '-'}
        rp = next(iter(conn.placement.resource_providers(name=c['host'])))
        got = {t for t in conn.placement.get(
            '/resource_providers/%s/traits' % rp.id,
            microversion='1.6').json()['traits']
            if t.startswith('COMPUTE_IMAGE_TYPE_')}
        if want != got:
            raise CheckFailed('%s: nova-imgtype check says %s, placement '
                              'has %s' % (c['host'], sorted(want),
                                          sorted(got)))
        said.append('%s: %s' % (c['host'], ', '.join(
            t[len('COMPUTE_IMAGE_TYPE_'):] for t in sorted(got))))
    return '; '.join(said)


def _cache_name(image_id: str) -> str:
    """Nova's image cache name of an image (``imagecache.get_cache_fname``,
    said again here: the gate imports no Nova)."""
    return hashlib.sha1(image_id.encode()).hexdigest()


def check_precache(cloud: Cloud, conn: Any, res: Mapping[str, Any]) -> str:
    pools_host, _ = _hosts(cloud)
    c = _compute(cloud, pools_host)
    # A fresh upload: nothing of it is cached anywhere yet.
    fresh = conn.image.create_image(
        name='gate-precache-%s' % uuid.uuid4().hex[:8],
        filename=res['files']['qcow2'], disk_format='qcow2',
        container_format='bare', wait=True, timeout=300)
    agg = conn.compute.create_aggregate(
        name='gate-precache-%s' % uuid.uuid4().hex[:8])
    try:
        conn.compute.add_host_to_aggregate(agg, pools_host)
        conn.compute.post('/os-aggregates/%s/images' % agg.id, json={
            'cache': [{'id': fresh.id}]}, microversion='2.81')
        want = os.path.join(c['host_instances_path'], '_base',
                            '%s_qcow2' % _cache_name(fresh.id))
        deadline = time.monotonic() + TIMEOUT
        while not os.path.exists(want):
            if time.monotonic() > deadline:
                base = os.path.join(c['host_instances_path'], '_base')
                raise CheckFailed('%s not cached as %s; _base has %s' % (
                    fresh.id, want, sorted(os.listdir(base))
                    if os.path.isdir(base) else []))
            time.sleep(1)
        fmt = image.disk_format(want)
        if fmt != 'qcow2':
            raise CheckFailed('pre-cached template %s is %s' % (want, fmt))
        return '%s: %s (qcow2, native)' % (pools_host, os.path.basename(want))
    finally:
        conn.compute.remove_host_from_aggregate(agg, pools_host)
        conn.compute.delete_aggregate(agg)
        conn.image.delete_image(fresh, ignore_missing=True)


def check_disks(cloud: Cloud, conn: Any, res: Mapping[str, Any]) -> str:
    pools_host, files_host = _hosts(cloud)
    said = []
    for fmt, host, want in (('qcow2', pools_host, 'volume'),
                            ('raw', files_host, 'file')):
        server = _boot(conn, res, fmt, host)
        try:
            c, path, kind = _disk(cloud, server)
            chain = _chain(c, path)
            if kind != want:
                raise CheckFailed('%s image on %s: a %s disk, not a %s' % (
                    fmt, host, kind, want))
            base = os.path.join(c['instances_path'], '_base')
            if fmt == 'qcow2':
                layers = [(layer['format'], layer['filename'])
                          for layer in chain]
                ok = (len(chain) == 2 and chain[0]['format'] == 'qcow2'
                      and chain[1]['format'] == 'qcow2'
                      and chain[1]['filename'].startswith(base + '/')
                      and chain[1]['filename'].endswith('_qcow2'))
            else:
                layers = [(chain[0]['format'], chain[0]['filename'])]
                ok = len(chain) == 1 and chain[0]['format'] == 'raw'
            if not ok:
                raise CheckFailed('%s image on %s: %s' % (fmt, host, layers))
            said.append('%s on %s: %s' % (fmt, host, ' <- '.join(
                '%s %s' % (f, os.path.basename(p)) for f, p in layers)))
        finally:
            conn.compute.delete_server(server)
    return '; '.join(said)


def check_novalidhost(cloud: Cloud, conn: Any,
                      res: Mapping[str, Any]) -> str:
    fmt = res['unsupported_disk_format']
    server = _boot(conn, res, fmt, status='ERROR')
    try:
        fault = (server.fault or {}).get('message', '')
        if 'No valid host' not in fault:
            raise CheckFailed('%s image: ERROR, but %r' % (fmt, fault))
        return '%s image: %s' % (fmt, fault)
    finally:
        conn.compute.delete_server(server)


def _mark(cloud: Cloud, conn: Any, server: Any) -> tuple[Any, bytes]:
    """Stop the server and write a new marker into its disk; (the stopped
    server, the marker)."""
    conn.compute.stop_server(server)
    server = _wait(conn, server, 'SHUTOFF')
    c, path, _ = _disk(cloud, server)
    marker = MARKER + uuid.uuid4().hex[:6].encode()
    image.write_marker(path, marker, argv_prefix=c['nsenter'])
    return server, marker


def _move(cloud: Cloud, conn: Any, res: Mapping[str, Any],
          revert: bool, from_pools: bool = False) -> str:
    pools_host, files_host = _hosts(cloud)
    source = pools_host if from_pools else files_host
    server = _boot(conn, res, 'qcow2' if from_pools else 'raw', source)
    try:
        server, marker = _mark(cloud, conn, server)
        if revert:
            conn.compute.resize_server(server, res['flavors']['gate.small'])
        else:
            conn.compute.migrate_server(server)
        server = _wait(conn, server, 'VERIFY_RESIZE')
        moved_to = _host_of(server)
        if moved_to == source:
            raise CheckFailed('the move stayed on %s' % source)
        if revert:
            conn.compute.revert_server_resize(server)
        else:
            conn.compute.confirm_server_resize(server)
        server = _wait(conn, server, 'SHUTOFF')
        c, path, kind = _disk(cloud, server)
        got = image.read_marker(path, len(marker), argv_prefix=c['nsenter'])
        if got != marker:
            raise CheckFailed('after the move to %s and %s, the disk %s on '
                              '%s reads %r, not %r' % (
                                  moved_to, 'revert' if revert else
                                  'confirm', path, c['host'], got, marker))
        return '%s -> %s%s: marker read back from the %s %s on %s' % (
            source, moved_to, ' (reverted)' if revert else '',
            kind, os.path.basename(path), c['host'])
    finally:
        conn.compute.delete_server(server)


def check_cold_migration(cloud: Cloud, conn: Any,
                         res: Mapping[str, Any]) -> str:
    return _move(cloud, conn, res, revert=False)


def check_resize_revert(cloud: Cloud, conn: Any,
                        res: Mapping[str, Any]) -> str:
    return _move(cloud, conn, res, revert=True)


def check_pools_to_files(cloud: Cloud, conn: Any,
                         res: Mapping[str, Any]) -> str:
    # A pool volume (a qcow2 overlay) to the host without pools, reverted
    # (the volume goes back), then confirmed (it becomes a file there).
    reverted = _move(cloud, conn, res, revert=True, from_pools=True)
    return '%s; %s' % (reverted, _move(cloud, conn, res, revert=False,
                                       from_pools=True))


def _left_on(cloud: Cloud, host: str, server: Any) -> list[str]:
    """What of the server is still on ``host``: its instance directory and
    its volumes in the dir pool's directory."""
    root = _compute(cloud, host)['host_instances_path']
    left = [p for p in (os.path.join(root, server.id),)
            if os.path.exists(p)]
    disks = os.path.join(root, 'disks')
    if os.path.isdir(disks):
        left += [os.path.join(disks, n) for n in sorted(os.listdir(disks))
                 if n.startswith(server.id + '_')]
    return left


def _live_migrate(cloud: Cloud, conn: Any, server: Any, to: str,
                  marker: bytes, want: str) -> tuple[Any, str]:
    """Live block migration of a running server to ``to``: its marker reads
    back from a ``want`` disk there, and nothing of it stays behind."""
    server = conn.compute.get_server(server.id)
    source = _host_of(server)
    conn.compute.live_migrate_server(server, host=to, block_migration='auto')
    deadline = time.monotonic() + TIMEOUT
    while True:
        server = _wait(conn, server, 'ACTIVE')
        if _host_of(server) != source or time.monotonic() > deadline:
            break
        time.sleep(1)
    if _host_of(server) != to:
        raise CheckFailed('live migration of %s from %s: on %s, not %s' % (
            server.id, source, _host_of(server), to))
    c, path, kind = _disk(cloud, server)
    got = image.read_marker(path, len(marker), argv_prefix=c['nsenter'])
    if kind != want or got != marker:
        raise CheckFailed('after the live migration %s -> %s: a %s disk %s '
                          'reading %r (wanted a %s disk reading %r)' % (
                              source, to, kind, path, got, want, marker))
    left = _left_on(cloud, source, server)
    if left:
        raise CheckFailed('after the live migration %s -> %s, left on %s: '
                          '%s' % (source, to, source, ', '.join(left)))
    return server, '%s -> %s: marker read back from the %s %s' % (
        source, to, kind, os.path.basename(path))


def check_live_migration(cloud: Cloud, conn: Any,
                         res: Mapping[str, Any]) -> str:
    # A running pool instance (a qcow2 overlay volume) to the host without
    # pools, where it becomes a file; back, into the pool again.
    pools_host, files_host = _hosts(cloud)
    server = _boot(conn, res, 'qcow2', pools_host)
    try:
        server, marker = _mark(cloud, conn, server)
        conn.compute.start_server(server)
        server = _wait(conn, server, 'ACTIVE')
        server, there = _live_migrate(cloud, conn, server, files_host,
                                      marker, 'file')
        server, back = _live_migrate(cloud, conn, server, pools_host,
                                     marker, 'volume')
        return '%s; %s' % (there, back)
    finally:
        conn.compute.delete_server(server)


CHECKS: dict[str, Callable[[Cloud, Any, Mapping[str, Any]], str]] = {
    'traits': check_traits,
    'precache': check_precache,
    'disks': check_disks,
    'novalidhost': check_novalidhost,
    'cold-migration': check_cold_migration,
    'resize-revert': check_resize_revert,
    'pools-to-files': check_pools_to_files,
    'live-migration': check_live_migration,
}


def run(cloud_path: str) -> list[dict[str, Any]]:
    """Every check, in order; their results (also ``<base>/checks.json``)."""
    cloud = tempest.load_cloud(cloud_path)
    res = tempest.prepare(cloud)
    conn = tempest.connect(cloud)
    results = []
    for name, check in CHECKS.items():
        start = time.monotonic()
        try:
            detail, status = check(cloud, conn, res), 'pass'
        except CheckFailed as e:
            detail, status = str(e), 'fail'
        except Exception as e:  # noqa: BLE001 - reported as the check's
            detail, status = '%s\n%s' % (e, traceback.format_exc()), 'error'
        took = time.monotonic() - start
        print('[check] %-15s %-5s %5.1fs  %s' % (
            name, status, took, detail.splitlines()[0]), flush=True)
        results.append({'check': name, 'status': status, 'detail': detail,
                        'seconds': round(took, 1)})
    path = os.path.join(cloud['base'], 'checks.json')
    with open(path, 'w') as f:
        json.dump(results, f, indent=2)
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog='python -m gate.checks',
                                description=__doc__.split('\n\n')[0])
    p.add_argument('--cloud', required=True, help='path of cloud.json')
    args = p.parse_args(argv)
    results = run(args.cloud)
    return int(any(r['status'] != 'pass' for r in results))


if __name__ == '__main__':
    sys.exit(main())
