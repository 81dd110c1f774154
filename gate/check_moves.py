"""The gate checks that move servers between the two computes (separate
storage, no shared instances path): cold migration, resize with revert and
confirm, live block migration, and moves toward a compute that runs stock's
driver.

Described in :mod:`gate.checks`, which runs them.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from collections.abc import Mapping
from typing import Any

from gate import checks_base as B

IMGTYPE_TRAITS = 'CUSTOM_IMGTYPE_'


def _ssh_sessions(cloud: B.Cloud) -> int:
    """SSH logins the computes' sshd accepted so far."""
    count = 0
    for c in cloud['computes']:
        path = os.path.join(cloud['logs'], c['host'] + '-sshd.log')
        if os.path.exists(path):
            with open(path, errors='replace') as f:
                count += sum(1 for line in f if line.startswith('Accepted '))
    return count


def _no_ssh_since(cloud: B.Cloud, logins: int, move: str) -> None:
    """The plugin's moves reach the destination through its libvirtd
    (issue 13): not one SSH session between the computes."""
    ssh = _ssh_sessions(cloud) - logins
    if ssh:
        raise B.CheckFailed('the move %s opened %d SSH session(s)'
                            % (move, ssh))


def _move(cloud: B.Cloud, conn: Any, res: Mapping[str, Any],
          revert: bool, from_pools: bool = False) -> str:
    pools_host, files_host = B.hosts(cloud)
    source = pools_host if from_pools else files_host
    server = B.boot(conn, res, 'qcow2' if from_pools else 'raw', source)
    try:
        server, marker = B.mark(cloud, conn, server)
        logins = _ssh_sessions(cloud)
        if revert:
            # nova-api allows a resize to the same host (the project's
            # scenario needs it): the source is taken out of scheduling
            # for it, as a resize names no destination.
            with B.scheduled_elsewhere(conn, source):
                conn.compute.resize_server(server,
                                           res['flavors']['gate.small'])
                server = B.wait(conn, server, 'VERIFY_RESIZE')
        else:
            # A cold migration never stays on its host (libvirt cannot).
            conn.compute.migrate_server(server)
            server = B.wait(conn, server, 'VERIFY_RESIZE')
        moved_to = B.host_of(server)
        if moved_to == source:
            raise B.CheckFailed('the move stayed on %s' % source)
        if revert:
            conn.compute.revert_server_resize(server)
        else:
            conn.compute.confirm_server_resize(server)
        server = B.wait(conn, server, 'SHUTOFF')
        got, c, path, kind, fmt = B.read_back(cloud, server, marker)
        if got != marker:
            raise B.CheckFailed('after the move to %s and %s, the disk %s on '
                                '%s reads %r, not %r' % (
                                    moved_to, 'revert' if revert else
                                    'confirm', path, c['host'], got, marker))
        _no_ssh_since(cloud, logins, '%s -> %s' % (source, moved_to))
        # Nothing of it on the host it left (templates in _base excepted).
        left_host = moved_to if revert else source
        left = B.left_on(cloud, left_host, server)
        if left:
            raise B.CheckFailed('after the move %s -> %s and %s, left on '
                                '%s: %s' % (source, moved_to, 'revert' if
                                            revert else 'confirm',
                                            left_host, ', '.join(left)))
        return ('%s -> %s%s: marker read back from the %s %s on %s; nothing '
                'left on %s; no SSH' % (
                    source, moved_to, ' (reverted)' if revert else '',
                    kind, os.path.basename(path), c['host'], left_host))
    finally:
        conn.compute.delete_server(server)


def check_cold_migration(cloud: B.Cloud, conn: Any,
                         res: Mapping[str, Any]) -> str:
    return _move(cloud, conn, res, revert=False)


def check_resize_revert(cloud: B.Cloud, conn: Any,
                        res: Mapping[str, Any]) -> str:
    return _move(cloud, conn, res, revert=True)


def check_pools_to_files(cloud: B.Cloud, conn: Any,
                         res: Mapping[str, Any]) -> str:
    # A pool volume (a qcow2 overlay) to the host without pools, reverted
    # (the volume goes back), then confirmed (it becomes a file there).
    reverted = _move(cloud, conn, res, revert=True, from_pools=True)
    return '%s; %s' % (reverted, _move(cloud, conn, res, revert=False,
                                       from_pools=True))


def _live_migrate(cloud: B.Cloud, conn: Any, server: Any, to: str,
                  marker: bytes, want: str) -> tuple[Any, str]:
    """Live block migration of a running server to ``to``: its marker reads
    back from a ``want`` disk there, its config drive holds the same bytes
    as on the source, and nothing of it stays behind."""
    server = conn.compute.get_server(server.id)
    source = B.host_of(server)
    drive, digest = B.config_drive(cloud, server)
    conn.compute.live_migrate_server(server, host=to, block_migration='auto')
    for _ in B.poll('live migration of %s from %s to %s' % (
            server.id, source, to)):
        server = B.wait(conn, server, 'ACTIVE')
        if B.host_of(server) != source:
            break
        last = _last_migration(conn, server, 'live-migration')
        if last and last['status'] in ('error', 'failed'):
            raise B.CheckFailed('live migration of %s from %s to %s: %s '
                                '(see the computes\' logs)' % (
                                    server.id, source, to, last['status']))
    if B.host_of(server) != to:
        raise B.CheckFailed('live migration of %s from %s: on %s, not %s' % (
            server.id, source, B.host_of(server), to))
    got, c, path, kind, fmt = B.read_back(cloud, server, marker)
    if kind != want or got != marker:
        raise B.CheckFailed('after the live migration %s -> %s: a %s disk %s '
                          'reading %r (wanted a %s disk reading %r)' % (
                              source, to, kind, path, got, want, marker))
    # The record says where the disks are now (issue 27, 4: no stale
    # save by stock may lose what the destination wrote).
    rec = B.record(server)
    want_storage = 'pools' if want == 'volume' else 'legacy'
    # And the root disk's template, as the host that made it fetched it:
    # the server's image, under one of its cache names.
    image_id, _, cache_name = rec.get('imgtype_root_template',
                                      '').partition(':')
    if (rec.get('imgtype_storage') != want_storage or
            bool(rec.get('imgtype_pool')) != (want == 'volume') or
            'imgtype_live_migration_arrival' in rec or
            image_id != server.image['id'] or not cache_name.startswith(
                hashlib.sha1(image_id.encode()).hexdigest())):
        raise B.CheckFailed('after the live migration %s -> %s: the record '
                            'of %s is %s, its disks are %s %ss' % (
                                source, to, server.id, rec, fmt, want))
    there, got_digest = B.config_drive(cloud, server)
    if got_digest != digest:
        raise B.CheckFailed('after the live migration %s -> %s: the config '
                          'drive %s differs from %s on the source' % (
                              source, to, there, drive))
    left = B.left_on(cloud, source, server)
    if left:
        raise B.CheckFailed('after the live migration %s -> %s, left on %s: '
                          '%s' % (source, to, source, ', '.join(left)))
    return server, ('%s -> %s: marker read back from the %s %s (%s), '
                    'recorded %s, config drive %s the same' % (
                        source, to, kind, os.path.basename(path), fmt,
                        want_storage, os.path.basename(there)))


def _running_marked(cloud: B.Cloud, conn: Any,
                    server: Any) -> tuple[Any, bytes]:
    """A marker written into the server's disk, the server running again;
    (the server, the marker)."""
    server, marker = B.mark(cloud, conn, server)
    conn.compute.start_server(server)
    return B.wait(conn, server, 'ACTIVE'), marker


def check_live_migration(cloud: B.Cloud, conn: Any,
                         res: Mapping[str, Any]) -> str:
    # In both directions, there and back: a running pool instance (a qcow2
    # overlay volume) to the host without pools, where its disks become
    # files, and back into the pool; a running instance of files (a raw
    # flat disk) into the pool, and back to files. Each with a config
    # drive (an ISO 9660 CD-ROM, which libvirt does not copy).
    pools_host, files_host = B.hosts(cloud)
    said = []
    for fmt, first, second, kinds in (
            ('qcow2', files_host, pools_host, ('file', 'volume')),
            ('raw', pools_host, files_host, ('volume', 'file'))):
        start = second
        server = B.boot(conn, res, fmt, start, config_drive=True)
        try:
            server, marker = _running_marked(cloud, conn, server)
            logins = _ssh_sessions(cloud)
            server, there = _live_migrate(cloud, conn, server, first,
                                          marker, kinds[0])
            server, back = _live_migrate(cloud, conn, server, second,
                                         marker, kinds[1])
            _no_ssh_since(cloud, logins, 'live, there and back')
            said.append('%s; %s' % (there, back))
        finally:
            conn.compute.delete_server(server)
    return '%s; no SSH' % '; '.join(said)


def check_cold_move_after_live_arrival(cloud: B.Cloud, conn: Any,
                                       res: Mapping[str, Any]) -> str:
    # Issue 33, 3: a running instance live-migrated into the pools (its
    # domain names the volume by its path until the guest's next start),
    # cold-migrated back at once, running: it ends ACTIVE on the host
    # without pools, its marker read back in the domain's format, nothing
    # of it left in the pool.
    pools_host, files_host = B.hosts(cloud)
    server = B.boot(conn, res, 'qcow2', files_host, config_drive=True)
    try:
        server, marker = _running_marked(cloud, conn, server)
        server, there = _live_migrate(cloud, conn, server, pools_host,
                                      marker, 'volume')
        conn.compute.migrate_server(server)
        server = B.wait(conn, server, 'VERIFY_RESIZE')
        if B.host_of(server) != files_host:
            raise B.CheckFailed('the cold move of %s after its live arrival '
                                'went to %s' % (server.id,
                                                B.host_of(server)))
        conn.compute.confirm_server_resize(server)
        server = B.wait(conn, server, 'ACTIVE')
        got, c, path, kind, fmt = B.read_back(cloud, server, marker)
        if got != marker:
            raise B.CheckFailed('after the cold move %s -> %s that followed '
                                'a live arrival, the %s disk %s reads %r, '
                                'not %r' % (pools_host, files_host, kind,
                                            path, got, marker))
        left = B.left_on(cloud, pools_host, server)
        if left:
            raise B.CheckFailed('after the cold move %s -> %s, left on %s: '
                                '%s' % (pools_host, files_host, pools_host,
                                        ', '.join(left)))
        return ('%s; then cold-moved at once %s -> %s: marker read back '
                'from the %s %s (%s), nothing left on %s' % (
                    there, pools_host, files_host, kind,
                    os.path.basename(path), fmt, pools_host))
    finally:
        conn.compute.delete_server(server)


# -- a compute without nova-imgtype -------------------------------------------

def _imgtype_traits(conn: Any, host: str) -> tuple[str, list[str], int]:
    """(resource provider, its traits, generation) of ``host``."""
    rp = next(iter(conn.placement.resource_providers(name=host)))
    body = conn.placement.get('/resource_providers/%s/traits' % rp.id,
                              microversion='1.6').json()
    return rp.id, body['traits'], body['resource_provider_generation']


def _drop_imgtype_traits(conn: Any, host: str) -> None:
    """What the README tells an operator whose compute leaves nova-imgtype:
    its ``CUSTOM_IMGTYPE_*`` traits removed from placement."""
    rp, have, generation = _imgtype_traits(conn, host)
    keep = [t for t in have if not t.startswith(IMGTYPE_TRAITS)]
    resp = conn.placement.put(
        '/resource_providers/%s/traits' % rp, microversion='1.6',
        json={'traits': keep, 'resource_provider_generation': generation})
    if resp.status_code != 200:
        raise B.CheckFailed('removing the traits of %s: %s %s' % (
            host, resp.status_code, resp.text))


@contextlib.contextmanager
def _on_stock(cloud: B.Cloud, conn: Any, host: str) -> Iterator[None]:
    """``host``'s nova-compute on stock's driver for a while, its
    nova-imgtype traits removed; then back on the plugin's."""
    from gate.cloud import computes
    from gate.cloud import layout as L
    from gate.cloud import proc as P

    state = P.State.load(cloud['base'])
    computes.stop_nova_computes(state, [host])
    _drop_imgtype_traits(conn, host)
    try:
        computes.restart(state, L.STOCK_DRIVER, [host])
        yield
    finally:
        computes.restart(state, L.PLUGIN_DRIVER, [host])
        for _ in B.poll('a nova-imgtype trait of %s back on the plugin'
                        % host):
            if [t for t in _imgtype_traits(conn, host)[1]
                    if t.startswith(IMGTYPE_TRAITS)]:
                break


def _last_migration(conn: Any, server: Any,
                    kind: str) -> dict[str, Any] | None:
    """The server's last migration of ``kind``, or None."""
    found = [m for m in conn.compute.get(
        '/os-migrations?instance_uuid=%s' % server.id,
        microversion='2.59').json()['migrations']
        if m['migration_type'] == kind]
    return max(found, key=lambda m: m['id']) if found else None


def _failed_migration(conn: Any, server: Any, kind: str) -> dict[str, Any]:
    """The server's last migration of ``kind``, once it has failed."""
    seen: list[dict[str, Any] | None] = [None]
    for _ in B.poll('the %s of %s refused' % (kind, server.id),
                    detail=lambda: seen[0] and seen[0]['status']):
        seen[0] = last = _last_migration(conn, server, kind)
        if last and last['status'] in ('error', 'failed'):
            return last
        if last and last['status'] in ('finished', 'completed', 'confirmed'):
            raise B.CheckFailed('the %s of %s to %s was not refused: %s' % (
                kind, server.id, last['dest_compute'], last['status']))
    raise AssertionError('unreachable: poll() raises on timeout')


def _logged(path: str, *words: str) -> bool:
    with open(path, errors='replace') as f:
        return any(all(w in line for w in words) for line in f)


def check_stock_destination(cloud: B.Cloud, conn: Any,
                            res: Mapping[str, Any]) -> str:
    # A pool instance, while the other compute runs stock's driver: a cold
    # migration finds no host (the instance_backend request filter), a
    # live migration forced there (2.30) is refused by the source.
    pools_host, files_host = B.hosts(cloud)
    server = B.boot(conn, res, 'qcow2', pools_host)
    try:
        server, marker = _running_marked(cloud, conn, server)
        with _on_stock(cloud, conn, files_host):
            conn.compute.post('/servers/%s/action' % server.id,
                              json={'migrate': None}, microversion='2.56')
            _failed_migration(conn, server, 'migration')
            scheduler_log = os.path.join(cloud['logs'], 'nova-scheduler.log')
            if not _logged(scheduler_log, server.id, 'instance_backend'):
                raise B.CheckFailed('the scheduler did not ask for the '
                                    'backend of %s' % server.id)
            B.wait(conn, server, 'ACTIVE')
            conn.compute.post('/servers/%s/action' % server.id, json={
                'os-migrateLive': {'host': files_host, 'force': True,
                                   'block_migration': 'auto'}},
                microversion='2.30')
            _failed_migration(conn, server, 'live-migration')
            source_log = B.compute(cloud, pools_host)['log']
            if not _logged(source_log, server.id, 'runs no nova-imgtype'):
                raise B.CheckFailed('the forced live migration of %s was '
                                    'not refused by %s' % (server.id,
                                                           pools_host))
            server = B.wait(conn, server, 'ACTIVE')
        if B.host_of(server) != pools_host:
            raise B.CheckFailed('%s moved to %s' % (server.id,
                                                    B.host_of(server)))
        got, c, path, kind, fmt = B.read_back(cloud, server, marker)
        left = B.left_on(cloud, files_host, server)
        if got != marker or left:
            raise B.CheckFailed('after the refused moves: the %s %s reads '
                                '%r (wanted %r); left on %s: %s' % (
                                    kind, path, got, marker, files_host,
                                    left))
        return ('%s on stock: cold migration found no host, forced live '
                'migration refused by %s; the marker reads back from the '
                '%s %s' % (files_host, pools_host, kind,
                           os.path.basename(path)))
    finally:
        conn.compute.delete_server(server)
