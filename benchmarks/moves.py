"""Cold moves: a disk to another host, stock's SSH path against libvirt.

What a resize or cold migration spends on each disk: stock Nova copies it
with ``nova.virt.libvirt.utils.copy_image(src, dst, host=dest)``, which
runs ``scp`` (``[libvirt]remote_filesystem_transport = ssh``, the default)
or ``rsync --sparse --compress`` (``rsync``) over SSH; nova-imgtype sends
it through the destination's libvirtd as a sparse stream
(:meth:`~nova_imgtype.virt.libvirt.remote_storage.LibvirtRemoteFilesystem.upload`).
Disks: 512 MiB of random data (dense) and 4 GiB holding 100 MiB of random
data (sparse), as a compute's instance disk files are.

Real: Nova's ``copy_image`` and its ``scp``/``rsync`` to a key-only sshd
on a loopback address; the plugin's upload to a throwaway libvirtd over
``qemu+tcp`` on another loopback address (no authentication, no TLS, as
sshd's cipher is the only encryption in the race: a lower bound for
libvirt, as loopback is for both). Each copy goes to a fresh file, then
``sync``; medians of several runs (one for the 4 GiB disk: scp takes 45 s),
the sides alternated in one run. The
destination's file is compared with the source once per case, untimed.

Live block migration: a running guest whose disk is a qcow2 overlay
holding 256 MiB of random data on a 1 GiB template (both hosts have the
template), between two throwaway libvirtds (each its own host UUID,
``qemu+tcp`` on loopback, peer to peer, ``VIR_MIGRATE_NON_SHARED_INC``: only
the overlay crosses, as Nova asks). Each side makes the destination's
disk with the function its image backend calls in ``pre_live_migration``
(the template's safety check included): stock, a file of the instance
directory made by ``nova.virt.libvirt.utils.create_image`` (what its
``Qcow2`` backend calls: Nova's format inspector, then ``qemu-img info``
of the template through oslo's prlimit wrapper, then ``qemu-img create``;
the backend's own second safety check left out, so still a lower bound
for stock); nova-imgtype, a volume of its dir pool made as its pool
backend makes it (:func:`~nova_imgtype.virt.libvirt.sizes.checked_template`,
then :meth:`~nova_imgtype.virt.libvirt.pools.StoragePools.create_cow` in
the format the check read), the guest XML rewritten by
:func:`~nova_imgtype.virt.libvirt.live_migration.destination_xml`. Until
2026-11-27 stock's side was a bare ``qemu-img create``, less than its
backend runs. The guest runs :data:`GUEST_SETTLE_S` seconds before it is
migrated, its data written back, untimed (until 2026-11-28 it was migrated
in its first second, and 11 runs a side were timed). Timed: making the
destination's disk and the migration, to the guest running there; the
copy is QEMU's for both.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import libvirt
from nova.virt.libvirt import utils as libvirt_utils

from benchmarks import sampling
from benchmarks import tables
from nova_imgtype.virt.libvirt import live_migration
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import pools as pools_mod
from nova_imgtype.virt.libvirt import remote_storage
from nova_imgtype.virt.libvirt import resolver as resolver_mod
from nova_imgtype.virt.libvirt import sizes
from nova_imgtype_testing import libvirtd as real

MiB = 1024 ** 2
GiB = 1024 ** 3
RUNS = 3
#: Live block migrations per side, the side that goes first alternating:
#: one migration takes 1.1-2.0 s here from one run to the next, for either
#: side, so that the median of 11 moved by 10% between whole runs with
#: nothing changed.
LIVE_RUNS = 21
#: Seconds the guest runs before it is migrated (untimed): its firmware
#: past its boot attempt, idle as a running guest is, rather than caught
#: in its first second, which made each migration slower and its time
#: depend on when it started.
GUEST_SETTLE_S = 3.0
SSH_ADDRESS = '127.0.0.41'
LIBVIRT_ADDRESS = '127.0.0.42'
#: The source host of the live migrations (the destination's is above).
LIVE_SOURCE_ADDRESS = '127.0.0.43'
LIVE_CASE = ('256 MiB overlay on a 1 GiB template', GiB, 256 * MiB)
LIVE_FLAGS = (libvirt.VIR_MIGRATE_LIVE | libvirt.VIR_MIGRATE_PEER2PEER |
              libvirt.VIR_MIGRATE_NON_SHARED_INC |
              libvirt.VIR_MIGRATE_PERSIST_DEST |
              libvirt.VIR_MIGRATE_UNDEFINE_SOURCE)
#: (case, size, bytes of data at its start, runs): scp takes 45-57 s to
#: send the 4 GiB disk (120 s a 10 GiB one), once is enough to see it; it
#: sends a dense 1 GiB in 37 s, 512 MiB are enough to compare (both keep
#: ``make bench`` within 20 minutes).
CASES = (('512 MiB dense', 512 * MiB, 512 * MiB, RUNS),
         ('4 GiB sparse', 4 * GiB, 100 * MiB, 1))

# Stock's copy, run where /etc/ssh/ssh_config is ours (a private mount
# namespace): prints the seconds copy_image took.
_STOCK = '''
import sys, time
import nova.conf
from nova.virt.libvirt import utils
nova.conf.CONF([], project='nova')
nova.conf.CONF.set_override('remote_filesystem_transport', sys.argv[1],
                            group='libvirt')
t = time.monotonic()
utils.copy_image(sys.argv[2], sys.argv[3], host=sys.argv[4],
                 compression=True)
print(time.monotonic() - t)
'''


def _disk(path: str, size: int, data: int) -> None:
    with open(path, 'wb') as f:
        f.truncate(size)
        left = data
        while left:
            n = min(left, 64 * MiB)
            f.write(os.urandom(n))
            left -= n


def _sshd(work: str) -> subprocess.Popen[bytes]:
    for name in ('id_ed25519', 'host_key'):
        subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f',
                        os.path.join(work, name)], check=True)
    shutil.copy(os.path.join(work, 'id_ed25519.pub'),
                os.path.join(work, 'authorized_keys'))
    with open(os.path.join(work, 'sshd_config'), 'w') as f:
        f.write('ListenAddress %s:22\nHostKey %s/host_key\n'
                'PidFile %s/sshd.pid\n'
                'AuthorizedKeysFile %s/authorized_keys\n'
                'PermitRootLogin prohibit-password\n'
                'PasswordAuthentication no\n'
                'UsePAM no\nStrictModes no\nUseDNS no\n'
                'Subsystem sftp internal-sftp\n' % (SSH_ADDRESS, work, work,
                                                    work))
    with open(os.path.join(work, 'ssh_config'), 'w') as f:
        f.write('Host %s\n    User root\n    IdentityFile %s/id_ed25519\n'
                '    IdentitiesOnly yes\n    StrictHostKeyChecking no\n'
                '    UserKnownHostsFile /dev/null\n    BatchMode yes\n'
                '    LogLevel ERROR\n' % (SSH_ADDRESS, work))
    os.makedirs('/run/sshd', exist_ok=True)
    proc = subprocess.Popen(['/usr/sbin/sshd', '-D', '-e', '-f',
                             os.path.join(work, 'sshd_config')],
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while subprocess.run(['ssh', '-F', os.path.join(work, 'ssh_config'),
                          SSH_ADDRESS, 'true'],
                         capture_output=True).returncode:
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError('the benchmark sshd did not start')
        time.sleep(0.2)
    return proc


def _stock(work: str, transport: str, src: str, dst: str) -> float:
    script = ('mount --bind %s/ssh_config /etc/ssh/ssh_config && exec %s '
              '-c "$0" "$@"' % (work, sys.executable))
    out = subprocess.run(
        ['unshare', '--mount', '--propagation', 'private', 'sh', '-c',
         script, _STOCK, transport, src, dst, SSH_ADDRESS],
        capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[-1])


def _plugin(remote: remote_storage.LibvirtRemoteFilesystem, src: str,
            dst: str) -> float:
    start = time.monotonic()
    remote.upload(src, 'dest', dst)
    return time.monotonic() - start


def _same(a: str, b: str) -> bool:
    return subprocess.run(['cmp', '-s', a, b]).returncode == 0


def _pool(conn: libvirt.virConnect, directory: str) -> Any:
    os.makedirs(directory, exist_ok=True)
    pool = pools_mod.StoragePools(lambda: conn).ensure(
        pool_specs.PoolSpec(pool_specs.DISKS_POOL, 'dir', directory),
        autostart=False)
    pool.refresh(0)     # the last run's volumes were removed as files
    return pool


def _live_once(src: libvirt.virConnect, dst: libvirt.virConnect,
               work: str, template: str, side: str,
               kvm: bool) -> tuple[float, bool]:
    """One live block migration of a guest on an overlay; (seconds, the
    destination's disk reads as the source's did)."""
    _case, size, data = LIVE_CASE
    name = 'bench-live-%s' % ('stock' if side == 'stock' else 'imgtype')
    if side == 'stock':
        disk = os.path.join(work, 'src-instance', 'disk')
        there = os.path.join(work, 'dst-instance', 'disk')
        for d in (disk, there):
            os.makedirs(os.path.dirname(d), exist_ok=True)
        real.qemu_img('create', '-q', '-f', 'qcow2', '-F', 'qcow2', '-b',
                      template, disk, str(size))
    else:
        vol = pools_mod.StoragePools(lambda: src).create_cow(
            _pool(src, os.path.join(work, 'src-disks')), 'u_disk', template,
            'qcow2', size)
        disk = vol.path()
    subprocess.run(['qemu-io', '-f', 'qcow2', '-c',
                    'write -P 0x5a 0 %d' % data, disk], check=True,
                   capture_output=True)
    dom = real.start_domain(src, name, [real.file_disk_xml(disk, 'qcow2')],
                            kvm)
    try:
        sampling.settle()           # the guest's data written back
        time.sleep(GUEST_SETTLE_S)
        xml = dom.XMLDesc(libvirt.VIR_DOMAIN_XML_MIGRATABLE)
        # The destination's pool is there already, as on a compute.
        pool = _pool(dst, os.path.join(work, 'dst-disks'))
        start = time.monotonic()
        if side == 'stock':
            libvirt_utils.create_image(there, 'qcow2', size,
                                       backing_file=template)
            xml = xml.replace(disk, there)
        else:
            there = pools_mod.StoragePools(lambda: dst).create_cow(
                pool, 'u_disk', template,
                sizes.template_format(sizes.checked_template(template)),
                size).path()
            xml = live_migration.destination_xml(
                xml, 'u', [live_migration.LocalDisk('vda', 'disk', 'file',
                                                    path=disk)],
                resolver_mod.POOLS, os.path.dirname(there))
        dom.migrateToURI3('qemu+tcp://%s/system' % LIBVIRT_ADDRESS, {
            libvirt.VIR_MIGRATE_PARAM_DEST_XML: xml,
            libvirt.VIR_MIGRATE_PARAM_MIGRATE_DISKS: ['vda'],
            libvirt.VIR_MIGRATE_PARAM_URI: 'tcp://%s' % LIBVIRT_ADDRESS},
            LIVE_FLAGS)
        took = time.monotonic() - start
    finally:
        with contextlib.suppress(libvirt.libvirtError):
            real.destroy_domain(src.lookupByName(name))
    moved = dst.lookupByName(name)
    real.destroy_domain(moved)
    same = subprocess.run(['qemu-img', 'compare', '-q', '-f', 'qcow2',
                           '-F', 'qcow2', disk, there]
                          ).returncode == 0
    for path in (disk, there):
        os.unlink(path)
    return took, same


def run_live() -> list[dict[str, Any]]:
    """Live block migrations of an overlay disk, stock's and the plugin's
    alternated; their rows."""
    from nova.tests import fixtures as nova_fixtures

    work = tempfile.mkdtemp(prefix='bench-live-', dir='/var/tmp')
    # Privsep'd calls (the check's utime of the template) in this process,
    # as root, as the other benchmarks run them.
    privsep = nova_fixtures.PrivsepFixture()
    privsep.setUp()
    src_daemon = real.start_libvirtd('system',
                                     tcp_address=LIVE_SOURCE_ADDRESS)
    dst_daemon = real.start_libvirtd('system', tcp_address=LIBVIRT_ADDRESS)
    src = libvirt.open(src_daemon.uri)
    dst = libvirt.open(dst_daemon.uri)
    case, size, data = LIVE_CASE
    try:
        template = os.path.join(work, 'template')
        real.make_image(template, 'qcow2', size)
        kvm = real.kvm_usable(src)
        times: dict[str, list[float]] = {'stock': [], 'nova-imgtype': []}
        for run in range(LIVE_RUNS):
            # Who goes first alternates: the guest and daemons warm up
            # over the runs, for neither side alone.
            for side in sorted(times, reverse=bool(run % 2)):
                took, same = _live_once(src, dst, work, template, side, kvm)
                if not same:
                    raise RuntimeError('%s: the migrated disk differs' % side)
                times[side].append(took)
    finally:
        src.close()
        dst.close()
        src_daemon.stop()
        dst_daemon.stop()
        privsep.cleanUp()
        shutil.rmtree(work, ignore_errors=True)
    stock = statistics.median(times['stock'])
    return [{'benchmark': 'moves', 'case': 'live: ' + case, 'size': size,
             'data': data, 'side': side, 'runs': LIVE_RUNS,
             'median_s': statistics.median(ts), 'all_s': ts,
             'vs_stock': statistics.median(ts) / stock,
             'domain_type': 'kvm' if kvm else 'qemu (TCG)'}
            for side, ts in times.items()]


def run() -> list[dict[str, Any]]:
    # Errors raise libvirtError; do not also print them (the daemon's
    # socket is polled until it answers).
    libvirt.registerErrorHandler(lambda ctx, err: None, None)
    rows: list[dict[str, Any]] = []
    work = tempfile.mkdtemp(prefix='bench-moves-', dir='/var/tmp')
    daemon = real.start_libvirtd('system', tcp_address=LIBVIRT_ADDRESS)
    sshd = _sshd(work)
    remote = remote_storage.LibvirtRemoteFilesystem(
        lambda host: 'qemu+tcp://%s/system' % LIBVIRT_ADDRESS)
    dest = os.path.join(work, 'dest')
    os.makedirs(dest)
    sides = {'stock ssh (scp)': lambda s, d: _stock(work, 'ssh', s, d),
             'stock rsync': lambda s, d: _stock(work, 'rsync', s, d),
             'libvirt stream': lambda s, d: _plugin(remote, s, d)}
    try:
        for case, size, data, runs in CASES:
            src = os.path.join(work, 'disk')
            _disk(src, size, data)
            times: dict[str, list[float]] = {side: [] for side in sides}
            allocated: dict[str, int] = {}
            while any(sampling.more(ts, runs) for ts in times.values()):
                for side, copy in sides.items():
                    if not sampling.more(times[side], runs):
                        continue
                    dst = os.path.join(dest, 'disk')
                    took = copy(src, dst)
                    if len(times[side]) == 0 and not _same(src, dst):
                        raise RuntimeError('%s: %s differs' % (side, case))
                    allocated[side] = os.stat(dst).st_blocks * 512
                    os.unlink(dst)
                    subprocess.run(['sync'], check=True)
                    times[side].append(took)
            stock = statistics.median(times['stock ssh (scp)'])
            for side, ts in times.items():
                rows.append({
                    'benchmark': 'moves', 'case': case, 'size': size,
                    'data': data, 'side': side, 'runs': len(ts),
                    'median_s': statistics.median(ts), 'all_s': ts,
                    'vs_stock_scp': statistics.median(ts) / stock,
                    'dest_allocated': allocated[side]})
            os.unlink(src)
    finally:
        sshd.terminate()
        sshd.wait()
        daemon.stop()
        shutil.rmtree(work, ignore_errors=True)
    return rows + run_live()


def to_markdown(rows: list[dict[str, Any]]) -> str:
    """The moves section of ``results/latest.md``."""
    lines = [
        '## Cold moves: a disk to another host', '',
        "Stock's `libvirt_utils.copy_image(host=...)` (`scp`, the default "
        '`remote_filesystem_transport`, and `rsync --sparse --compress`) to '
        'a key-only sshd on loopback, against the plugin\'s sparse libvirt '
        'stream (`virStorageVolUpload`) to a libvirtd over `qemu+tcp` on '
        'loopback (no TLS: a lower bound). Disk files of random data: '
        'dense, and sparse with 100 MiB of data. Sides alternated in one '
        'run; median of `runs` runs; `vs scp` is the ratio of medians (see '
        '`benchmarks/moves.py`).', '',
        tables.markdown(
            ['disk', 'copied by', 'runs', 'median s', 'vs scp',
             'MiB allocated there'],
            ([r['case'], r['side'], '%d' % r['runs'],
              '%.2f' % r['median_s'], '%.2f' % r['vs_stock_scp'],
              '%d' % (r['dest_allocated'] // MiB)]
             for r in rows if 'vs_stock_scp' in r),
            left=['disk', 'copied by'])]
    live = [r for r in rows if 'vs_stock' in r]
    if live:
        lines += [
            '', '## Live block migration of an overlay disk', '',
            'A running guest (domain type %s) on a qcow2 overlay holding '
            '256 MiB of random data on a 1 GiB template, between two '
            'libvirtds over `qemu+tcp` on loopback, peer to peer, '
            '`VIR_MIGRATE_NON_SHARED_INC` (only the overlay crosses): '
            "stock's file overlays (destination's made by stock's "
            '`libvirt_utils.create_image`, what its Qcow2 backend calls) '
            "against the plugin's dir pool volumes (destination's made as "
            'its pool backend makes them: `checked_template`, `create_cow`; '
            'XML by `destination_xml`). The guest runs %d s before it is '
            'migrated, its data written back (untimed). Timed: the '
            "destination's disk and the migration. Sides alternated, the one "
            'that goes first too; median of %d runs.' % (
                live[0]['domain_type'], GUEST_SETTLE_S, live[0]['runs']), '',
            tables.markdown(
                ['disk', 'side', 'median s', 'vs stock'],
                ([r['case'], r['side'], '%.2f' % r['median_s'],
                  '%.2f' % r['vs_stock']] for r in live),
                left=['disk', 'side'])]
    return '\n'.join(lines) + '\n'


if __name__ == '__main__':
    json.dump(run(), sys.stdout, indent=2)
