"""Cold moves: a disk to another host, stock's SSH path against libvirt.

What a resize or cold migration spends on each disk: stock Nova copies it
with ``nova.virt.libvirt.utils.copy_image(src, dst, host=dest)``, which
runs ``scp`` (``[libvirt]remote_filesystem_transport = ssh``, the default)
or ``rsync --sparse --compress`` (``rsync``) over SSH; nova-imgtype sends
it through the destination's libvirtd as a sparse stream
(:meth:`~nova_imgtype.virt.libvirt.remote_storage.LibvirtRemoteFilesystem.upload`).
Disks: 1 GiB of random data (dense) and 10 GiB holding 100 MiB of random
data (sparse), as a compute's instance disk files are.

Real: Nova's ``copy_image`` and its ``scp``/``rsync`` to a key-only sshd
on a loopback address; the plugin's upload to a throwaway libvirtd over
``qemu+tcp`` on another loopback address (no authentication, no TLS, as
sshd's cipher is the only encryption in the race: a lower bound for
libvirt, as loopback is for both). Each copy goes to a fresh file, then
``sync``; medians of several runs, the sides alternated in one run. The
destination's file is compared with the source once per case, untimed.

Not measured here: live block migration (QEMU's own NBD copy, the same
for stock and the plugin: the gate exercises it between two computes).
"""

from __future__ import annotations

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

from nova_imgtype.testing import libvirtd as real
from nova_imgtype.virt.libvirt import remote_storage

MiB = 1024 ** 2
GiB = 1024 ** 3
RUNS = 3
SSH_ADDRESS = '127.0.0.41'
LIBVIRT_ADDRESS = '127.0.0.42'
#: (case, size, bytes of data at its start)
CASES = (('1 GiB dense', GiB, GiB), ('10 GiB sparse', 10 * GiB, 100 * MiB))

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
        for case, size, data in CASES:
            src = os.path.join(work, 'disk')
            _disk(src, size, data)
            times: dict[str, list[float]] = {side: [] for side in sides}
            allocated: dict[str, int] = {}
            for _ in range(RUNS):
                for side, copy in sides.items():
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
                    'data': data, 'side': side, 'runs': RUNS,
                    'median_s': statistics.median(ts), 'all_s': ts,
                    'vs_stock_scp': statistics.median(ts) / stock,
                    'dest_allocated': allocated[side]})
            os.unlink(src)
    finally:
        sshd.terminate()
        sshd.wait()
        daemon.stop()
        shutil.rmtree(work, ignore_errors=True)
    return rows


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
        'run; median of %d runs; `vs scp` is the ratio of medians (see '
        '`benchmarks/moves.py`).' % (rows[0]['runs'] if rows else RUNS),
        '',
        '| disk | copied by | median s | vs scp | MiB allocated there |',
        '| --- | --- | ---: | ---: | ---: |']
    for r in rows:
        lines.append('| %s | %s | %.2f | %.2f | %d |' % (
            r['case'], r['side'], r['median_s'], r['vs_stock_scp'],
            r['dest_allocated'] // MiB))
    return '\n'.join(lines) + '\n'


if __name__ == '__main__':
    json.dump(run(), sys.stdout, indent=2)
