"""The two computes: each a mount + UTS namespace ("host") with its own
libvirtd, virtlogd, sshd and instances_path, and a nova-compute in it."""

from __future__ import annotations

import datetime
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Collection
from typing import Any

from gate.cloud import configs
from gate.cloud import identity
from gate.cloud import layout as L
from gate.cloud import proc as P
from gate.cloud.infra import _write

NSHOST = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      'nshost.py')
QEMU_USER = 'libvirt-qemu'


def kvm_usable() -> bool:
    try:
        fd = os.open('/dev/kvm', os.O_RDWR)
    except OSError:
        return False
    os.close(fd)
    return True


def prepare(state: P.State) -> None:
    """What both computes share: ssh keys, mount points, the QEMU user."""
    ssh_keys(state)
    for _, target in L.LIBVIRT_MOUNTS:
        # The package's own directories: made if missing, never removed
        # (the project's real tier mounts over them too).
        os.makedirs(target, mode=0o755, exist_ok=True)
    _ensure_dir(state, L.INSTANCES_PATH)
    _ensure_dir(state, '/run/sshd')
    _ensure_qemu_user()


def ssh_keys(state: P.State) -> None:
    """A client key pair (root, every compute) and one host key."""
    d = state.layout.ssh
    os.makedirs(d, mode=0o700, exist_ok=True)
    log = state.layout.log('ssh-keygen')
    for name in ('id_ed25519', 'host_ed25519_key'):
        P.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-C',
               'nova-imgtype-gate', '-f', os.path.join(d, name)], log)
    with open(os.path.join(d, 'id_ed25519.pub')) as f:
        _write(os.path.join(d, 'authorized_keys'), f.read(), 0o600)
    _write(os.path.join(d, 'ssh_config'), configs.ssh_config(
        state.layout.base))


def _hosts_file() -> str:
    lines = ['127.0.0.1 localhost', '::1 localhost ip6-localhost']
    lines += ['%s %s' % (c.ip, c.host) for c in L.COMPUTES]
    return '\n'.join(lines) + '\n'


def _ensure_dir(state: P.State, path: str) -> None:
    """A mount point on the host; what we create is removed by ``down``."""
    missing = []
    p = path
    while not os.path.exists(p):
        missing.append(p)
        p = os.path.dirname(p)
    if missing:
        os.makedirs(path, mode=0o755)
        state.add_created(missing[-1])


def _ensure_qemu_user() -> None:
    import pwd

    try:
        pwd.getpwnam(QEMU_USER)
    except KeyError:
        subprocess.run(['useradd', '--system', '--no-create-home',
                        QEMU_USER], check=True, capture_output=True)


def start_host(state: P.State, c: L.Compute) -> subprocess.Popen[bytes]:
    """The compute's namespace with its daemons (no nova-compute yet)."""
    lay = state.layout
    d = lay.compute_dir(c.host)
    lv = lay.libvirt_dir(c.host)
    for sub, _ in L.LIBVIRT_MOUNTS:
        os.makedirs(os.path.join(lv, sub), exist_ok=True)
    for sub in ('instances', 'state', 'locks'):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    _write(os.path.join(lv, 'etc', 'libvirtd.conf'), configs.libvirtd_conf(c))
    _write(os.path.join(lv, 'etc', 'qemu.conf'), configs.qemu_conf(c))
    _write(os.path.join(lv, 'etc', 'virtlogd.conf'),
           'log_outputs = "3:file:/var/log/libvirt/virtlogd.log"\n')
    _write(os.path.join(d, 'sshd_config'), configs.sshd_config(lay.base, c))
    _write(os.path.join(d, 'hosts'), _hosts_file())
    mounts = [(os.path.join(lv, sub), target)
              for sub, target in L.LIBVIRT_MOUNTS]
    mounts += [(lay.host_instances(c.host), L.INSTANCES_PATH),
               (os.path.join(d, 'hosts'), '/etc/hosts'),
               (os.path.join(lay.ssh, 'ssh_config'), '/etc/ssh/ssh_config')]
    ready = os.path.join(d, 'nshost.ready')
    spec = {
        'hostname': c.host,
        'mounts': mounts,
        'ready': ready,
        'daemons': [
            {'argv': ['virtlogd', '-f', '/etc/libvirt/virtlogd.conf',
                      '-p', os.path.join(d, 'virtlogd.pid')],
             'log': lay.log(c.host + '-virtlogd'),
             'wait_for': os.path.join(lv, 'run', 'virtlogd-sock')},
            {'argv': ['libvirtd', '--listen', '-f',
                      '/etc/libvirt/libvirtd.conf',
                      '-p', os.path.join(d, 'libvirtd.pid')],
             'log': lay.log(c.host + '-libvirtd')},
            {'argv': ['/usr/sbin/sshd', '-D', '-e', '-f',
                      os.path.join(d, 'sshd_config')],
             'log': lay.log(c.host + '-sshd')},
        ],
    }
    spec_path = os.path.join(d, 'nshost.json')
    _write(spec_path, json.dumps(spec, indent=1))
    proc = P.spawn(state, c.host + '-host', [
        'unshare', '--mount', '--uts', '--propagation', 'private', '--',
        sys.executable, NSHOST, spec_path])
    P.wait_for(c.host + ' namespace', lambda: os.path.exists(ready), 30,
               proc, lay.log(c.host + '-host'), 0.05)
    state.add_namespace(c.host, proc.pid, P.mnt_ns(proc.pid))
    P.wait_for(c.host + ' libvirtd', lambda: _libvirt_ready(lay, c), 60,
               proc, lay.log(c.host + '-libvirtd'))
    P.wait_for(c.host + ' sshd', lambda: P.port_open(c.ip, L.SSH_PORT), 30,
               proc, lay.log(c.host + '-sshd'), 0.05)
    P.progress('%s: namespace, virtlogd, libvirtd (%s), sshd ready'
               % (c.host, libvirt_uri(lay, c)))
    return proc


def libvirt_uri(lay: L.Layout, c: L.Compute) -> str:
    return 'qemu+unix:///system?socket=' + lay.libvirt_sock(c.host)


def _libvirt_ready(lay: L.Layout, c: L.Compute) -> bool:
    import libvirt

    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    conn = libvirt.open(libvirt_uri(lay, c))
    try:
        conn.getCapabilities()
    finally:
        conn.close()
    return P.port_open(c.ip, L.LIBVIRT_PORT)


def nsenter(state: P.State, host: str) -> list[str]:
    pid = state.data['namespaces'][host]['pid']
    return ['nsenter', '-t', str(pid), '-m', '-u', '--']


def write_compute_conf(state: P.State, c: L.Compute, driver: str,
                       images_type: str = '') -> str:
    lay = state.layout
    path = lay.compute_conf(c.host)
    _write(path, configs.nova_compute_conf(lay.base, c, driver,
                                           kvm_usable(), images_type))
    return path


def start_nova_compute(state: P.State, c: L.Compute, driver: str,
                       images_type: str = '') -> subprocess.Popen[bytes]:
    conf = write_compute_conf(state, c, driver, images_type)
    name = c.host + '-nova-compute'
    return P.spawn(state, name, [*nsenter(state, c.host),
                                 L.venv_bin('nova-compute'),
                                 '--config-file', conf])


def stop_nova_computes(state: P.State,
                       hosts: Collection[str] | None = None) -> None:
    """All of them (or those of ``hosts``) at once; SIGKILL when a
    graceful stop takes over 10 s."""
    names = [c.host + '-nova-compute' for c in state.computes
             if hosts is None or c.host in hosts]
    pids = [pid for pid in map(state.pid, names) if pid]
    P.terminate(pids, grace=10, groups=True)
    for name in names:
        state.drop_proc(name)


def _parse_time(value: str | None) -> float:
    if not value:
        return 0.0
    t = datetime.datetime.fromisoformat(value.split('.')[0])
    return t.replace(tzinfo=datetime.UTC).timestamp()


def wait_computes_reporting(state: P.State, since: float,
                            procs: dict[str, subprocess.Popen[bytes]],
                            timeout: float = 180) -> None:
    """Until the service record of every compute of ``procs`` was updated
    after ``since`` and is up (the nova-compute started then is running
    and reporting)."""
    sess = identity.admin_session()
    pending = set(procs)

    def probe() -> bool:
        for c in state.computes:
            if c.host not in procs:
                continue
            P.check_alive(procs.get(c.host), c.host + ' nova-compute',
                          state.layout.log(c.host + '-nova-compute'))
        data = identity.compute_get(sess, '/os-services?binary=nova-compute')
        for s in data['services']:
            if (s['host'] in pending and s['state'] == 'up'
                    and _parse_time(s['updated_at']) >= math.ceil(since)):
                pending.discard(s['host'])
                P.progress('%s nova-compute up' % s['host'])
        return not pending

    P.wait_for('nova-compute on %s' % ', '.join(sorted(pending)), probe,
               timeout, interval=1.0)


def discover_and_wait(state: P.State, timeout: float = 120) -> None:
    """cell_v2 discover_hosts, then both hypervisors up in Nova and both
    resource providers in placement."""
    P.run([L.venv_bin('nova-manage'), '--config-file', state.layout.nova_conf,
           'cell_v2', 'discover_hosts', '--verbose'],
          state.layout.log('nova-manage'))
    sess = identity.admin_session()
    hosts = {c.host for c in state.computes}

    def probe() -> bool:
        hv = identity.hypervisors(sess)
        rps = identity.resource_providers(sess)
        return all(hv.get(h) == 'up' for h in hosts) and hosts <= rps

    P.wait_for('hypervisors and resource providers', probe, timeout,
               interval=1.0)
    P.progress('hosts discovered: %s up in Nova and placement'
               % ', '.join(sorted(hosts)))


def compute_entries(state: P.State, driver: str) -> list[dict[str, Any]]:
    lay = state.layout
    return [{
        'host': c.host,
        'ip': c.ip,
        'instances_path': L.INSTANCES_PATH,
        'host_instances_path': lay.host_instances(c.host),
        'nsenter': nsenter(state, c.host),
        'libvirt_uri': libvirt_uri(lay, c),
        'libvirt_tcp_uri': 'qemu+tcp://%s/system' % c.ip,
        'config': lay.compute_conf(c.host),
        'log': lay.log(c.host + '-nova-compute'),
        'driver': driver,
        'images_type': c.images_type if driver == L.PLUGIN_DRIVER
        else c.stock_images_type,
        'images_type_mapping': c.mapping if driver == L.PLUGIN_DRIVER
        else None,
        'use_storage_pools': c.pools if driver == L.PLUGIN_DRIVER else None,
    } for c in state.computes]


def restart_all(state: P.State, driver: str) -> None:
    """Both nova-computes restarted on ``driver`` (a compute_driver)."""
    restart(state, driver)


def restart(state: P.State, driver: str,
            hosts: Collection[str] | None = None) -> None:
    """The nova-computes of ``hosts`` (default: all) restarted on
    ``driver``. The processes recorded in ``state.json`` are the ones
    stopped: another process may have restarted one since ``state`` was
    read."""
    state.reload()
    stop_nova_computes(state, hosts)
    since = time.time()
    procs = {c.host: start_nova_compute(state, c, driver)
             for c in state.computes if hosts is None or c.host in hosts}
    P.progress('nova-compute of %s restarting on %s'
               % (', '.join(sorted(procs)), driver))
    wait_computes_reporting(state, since, procs)
