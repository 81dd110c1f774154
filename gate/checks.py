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
    confirmed), each leaving nothing of it on the host it left and without
    a single SSH session between the computes (disks go through the
    destination's libvirtd).
``live-migration``
    A running pool instance with a config drive live-migrates (block
    migration, no shared storage, no SSH) to the host without pools, where
    its disks become files, and back into the pool; its marker reads back
    after each move, its config drive holds the bytes it held on the
    source, nothing of it is left on the host it left, and no SSH session
    opened.
``cold-after-live``
    A running instance live-migrated into the pools (its domain names the
    volume by its path until the guest's next start) is cold-migrated out
    again at once and ends ACTIVE there, its marker read back in the format
    its domain gives QEMU, nothing of it left in the pool.
``stock-destination``
    With the host without pools restarted on stock's ``libvirt.LibvirtDriver``
    (its nova-imgtype traits removed, as the README says), a running pool
    instance is not moved there: a cold migration finds no valid host (the
    ``instance_backend`` request filter), a live migration forced there
    (microversion 2.30) is refused by the source; the instance stays, its
    marker reads back, nothing of it is on the stock compute. That compute
    is then back on the plugin.
``move-matrix``
    Every move (live migration, cold migration, resize up reverted and
    confirmed, shelve and unshelve, rebuild, evacuation), each followed by
    a hard reboot, between the pools host and the files host in both
    directions, of a raw and a qcow2 image with a root, an ephemeral and a
    swap disk and a config drive, each leg then a snapshot downloaded from
    Glance; its guests hostile (a qcow2 header naming a root-only host file
    at offset 0 of every raw disk): see :mod:`gate.check_matrix`. Its
    table goes into the gate's results.
``way-back``
    Each compute taken back to stock's driver with ``nova-imgtype
    prepare-uninstall --apply``, its instances' guests hostile, then
    started, hard rebooted and snapshotted by stock: see
    :mod:`gate.check_way_back`. Last, as it restarts the computes.

CLI: ``python -m gate.checks --cloud <base>/cloud.json [--check NAME]``
prints one line per check and writes ``<base>/checks.json``; exit 1 if any
failed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import traceback
import uuid
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from gate import check_ceph as ceph
from gate import check_matrix as matrix
from gate import check_moves as moves
from gate import check_way_back as way_back
from gate import checks_base as B
from gate import image
from gate import tempest

# The name callers catch.
CheckFailed = B.CheckFailed


def check_traits(cloud: B.Cloud, conn: Any, res: Mapping[str, Any]) -> str:
    said = []
    for c in cloud['computes']:
        out = B.run_cmd([os.path.join(cloud['venv'], 'bin', 'nova-imgtype'),
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
            raise B.CheckFailed('%s: nova-imgtype check says %s, placement '
                              'has %s' % (c['host'], sorted(want),
                                          sorted(got)))
        said.append('%s: %s' % (c['host'], ', '.join(
            t[len('COMPUTE_IMAGE_TYPE_'):] for t in sorted(got))))
    return '; '.join(said)


def _cache_name(image_id: str) -> str:
    """Nova's image cache name of an image (``imagecache.get_cache_fname``,
    said again here: the gate imports no Nova)."""
    return hashlib.sha1(image_id.encode()).hexdigest()


def check_precache(cloud: B.Cloud, conn: Any, res: Mapping[str, Any]) -> str:
    pools_host, _ = B.hosts(cloud)
    c = B.compute(cloud, pools_host)
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
        base = os.path.join(c['host_instances_path'], '_base')
        for _ in B.poll('%s cached as %s' % (fresh.id, want),
                        detail=lambda: '_base has %s' % (
                            sorted(os.listdir(base))
                            if os.path.isdir(base) else [])):
            if os.path.exists(want):
                break
        fmt = image.disk_format(want)
        if fmt != 'qcow2':
            raise B.CheckFailed('pre-cached template %s is %s' % (want, fmt))
        return '%s: %s (qcow2, native)' % (pools_host, os.path.basename(want))
    finally:
        conn.compute.remove_host_from_aggregate(agg, pools_host)
        conn.compute.delete_aggregate(agg)
        conn.image.delete_image(fresh, ignore_missing=True)


def check_disks(cloud: B.Cloud, conn: Any, res: Mapping[str, Any]) -> str:
    pools_host, files_host = B.hosts(cloud)
    said = []
    for fmt, host, want in (('qcow2', pools_host, 'volume'),
                            ('raw', files_host, 'file')):
        server = B.boot(conn, res, fmt, host)
        try:
            c, path, kind, _fmt = B.disk(cloud, server)
            chain = B.chain(c, path)
            if kind != want:
                raise B.CheckFailed('%s image on %s: a %s disk, not a %s' % (
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
                raise B.CheckFailed('%s image on %s: %s' % (fmt, host, layers))
            said.append('%s on %s: %s' % (fmt, host, ' <- '.join(
                '%s %s' % (f, os.path.basename(p)) for f, p in layers)))
        finally:
            conn.compute.delete_server(server)
    return '; '.join(said)


def check_novalidhost(cloud: B.Cloud, conn: Any,
                      res: Mapping[str, Any]) -> str:
    fmt = res['unsupported_disk_format']
    server = B.boot(conn, res, fmt, status='ERROR')
    try:
        fault = (server.fault or {}).get('message', '')
        if 'No valid host' not in fault:
            raise B.CheckFailed('%s image: ERROR, but %r' % (fmt, fault))
        return '%s image: %s' % (fmt, fault)
    finally:
        conn.compute.delete_server(server)


CHECKS: dict[str, B.Check] = {
    'traits': check_traits,
    'precache': check_precache,
    'disks': check_disks,
    'novalidhost': check_novalidhost,
    'cold-migration': moves.check_cold_migration,
    'resize-revert': moves.check_resize_revert,
    'pools-to-files': moves.check_pools_to_files,
    'live-migration': moves.check_live_migration,
    'cold-after-live': moves.check_cold_move_after_live_arrival,
    'stock-destination': moves.check_stock_destination,
    'move-matrix': matrix.check_move_matrix,
    # Last: it takes each compute to stock's driver and back.
    'way-back': way_back.check_way_back,
}


#: The ceph profile's: its own, and the move matrix on Ceph.
CEPH_CHECKS: dict[str, B.Check] = {
    **ceph.CHECKS,
    'move-matrix': matrix.check_move_matrix,
}


def checks_of(cloud: B.Cloud) -> Mapping[str, B.Check]:
    """The checks of the cloud's profile."""
    return CEPH_CHECKS if cloud.get('profile') == 'ceph' else CHECKS


def run_one(name: str, check: B.Check, cloud: B.Cloud, conn: Any,
            res: Mapping[str, Any]) -> dict[str, Any]:
    """One check, its line printed; its result (a table of its own
    included)."""
    start = time.monotonic()
    report: B.Report | None = None
    try:
        found, status = check(cloud, conn, res), 'pass'
        if isinstance(found, B.Report):
            report, detail = found, found.summary
        else:
            detail = found
    except B.CheckFailed as e:
        detail, status, report = str(e), 'fail', e.report
    except Exception as e:  # noqa: BLE001 - reported as the check's
        detail, status = '%s\n%s' % (e, traceback.format_exc()), 'error'
    took = time.monotonic() - start
    print('[check] %-17s %-5s %5.1fs  %s' % (
        name, status, took, detail.splitlines()[0]), flush=True)
    result = {'check': name, 'status': status, 'detail': detail,
              'seconds': round(took, 1)}
    if report is not None:
        result['table'] = report.as_json()
    return result


def run(cloud_path: str,
        only: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Every check (or those named ``only``), in order; their results
    (also ``<base>/checks.json``)."""
    cloud = tempest.load_cloud(cloud_path)
    checks = checks_of(cloud)
    unknown = sorted(set(only) - set(checks))
    if unknown:
        raise ValueError('no check %s (checks: %s)' % (
            ', '.join(unknown), ', '.join(checks)))
    res = tempest.prepare(cloud)
    conn = tempest.connect(cloud)
    results = [run_one(name, check, cloud, conn, res)
               for name, check in checks.items()
               if not only or name in only]
    path = os.path.join(cloud['base'], 'checks.json')
    with open(path, 'w') as f:
        json.dump(results, f, indent=2)
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog='python -m gate.checks',
                                description=__doc__.split('\n\n')[0])
    p.add_argument('--cloud', required=True, help='path of cloud.json')
    p.add_argument('--check', action='append', default=[], metavar='NAME',
                   help='run this check only (again for more)')
    args = p.parse_args(argv)
    try:
        results = run(args.cloud, args.check)
    except ValueError as e:
        p.error(str(e))
    return int(any(r['status'] != 'pass' for r in results))


if __name__ == '__main__':
    sys.exit(main())
