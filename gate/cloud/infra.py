"""MariaDB, RabbitMQ (with epmd) and, in the ``ceph`` profile, a one-node
Ceph cluster: as root, state under the base."""

from __future__ import annotations

import os
import shutil
import subprocess

from gate import ceph
from gate.cloud import configs
from gate.cloud import layout as L
from gate.cloud import proc as P

RABBIT_SERVER = '/usr/lib/rabbitmq/bin/rabbitmq-server'
#: What the ceph profile's OSD reports as its capacity (and placement as
#: the computes' DISK_GB): its data is in memory, as written.
CEPH_BYTES = 64 * 1024 ** 3


def _write(path: str, text: str, mode: int = 0o644) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        f.write(text)
    os.chmod(path, mode)


def start_mariadb(state: P.State) -> None:
    lay = state.layout
    d = lay.path('mysql')
    os.makedirs(os.path.join(d, 'data'), exist_ok=True)
    cnf = os.path.join(d, 'my.cnf')
    _write(cnf, configs.my_cnf(lay.base))
    init = os.path.join(d, 'init.sql')
    _write(init, configs.db_init_sql())
    install_db = shutil.which('mariadb-install-db') or 'mysql_install_db'
    P.run([install_db, '--defaults-file=' + cnf, '--user=root',
           '--skip-test-db', '--auth-root-authentication-method=socket'],
          lay.log('mysql-install'))
    mariadbd = shutil.which('mariadbd') or '/usr/sbin/mariadbd'
    log = lay.log('mysqld')
    proc = P.spawn(state, 'mysqld', [mariadbd, '--defaults-file=' + cnf,
                                     '--init-file=' + init])
    P.wait_for('MariaDB', lambda: _db_ready(lay.base), 60, proc, log)
    P.progress('MariaDB ready (%s databases)' % len(L.DATABASES))


def _db_ready(base: str) -> bool:
    import pymysql

    conn = pymysql.connect(host=L.HOST, port=L.PORTS['mysql'],
                           user=L.DB_USER, password=L.PASSWORD,
                           database='nova_cell0', connect_timeout=2)
    conn.close()
    return True


def _rabbit_env(base: str) -> dict[str, str]:
    d = base + '/rabbit'
    return {
        'HOME': d + '/home',
        'RABBITMQ_NODENAME': L.RABBIT_NODE,
        'RABBITMQ_MNESIA_BASE': d + '/mnesia',
        'RABBITMQ_LOG_BASE': d + '/log',
        'RABBITMQ_CONFIG_FILE': d + '/rabbitmq.conf',
        'RABBITMQ_ENABLED_PLUGINS_FILE': d + '/enabled_plugins',
        'RABBITMQ_PID_FILE': d + '/rabbit.pid',
        'RABBITMQ_CONF_ENV_FILE': d + '/rabbitmq-env.conf',
        'RABBITMQ_ADVANCED_CONFIG_FILE': d + '/advanced.config',
        'RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS':
            '-kernel inet_dist_use_interface {127,0,0,1}',
        'ERL_EPMD_ADDRESS': L.HOST,
        'ERL_EPMD_PORT': str(L.PORTS['epmd']),
    }


def start_rabbitmq(state: P.State) -> None:
    lay = state.layout
    d = lay.path('rabbit')
    for sub in ('home', 'mnesia', 'log'):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    _write(d + '/rabbitmq.conf', configs.rabbitmq_conf())
    _write(d + '/enabled_plugins', '[].\n')
    _write(d + '/rabbitmq-env.conf', '')
    _write(d + '/advanced.config', '[].\n')
    _write(d + '/home/.erlang.cookie', 'GATECOOKIE%d\n' % os.getpid(), 0o400)
    env = _rabbit_env(lay.base)
    # epmd in the foreground, ours: else erl starts a daemonized one.
    epmd = shutil.which('epmd') or '/usr/bin/epmd'
    eproc = P.spawn(state, 'epmd', [epmd, '-address', L.HOST, '-port',
                                    str(L.PORTS['epmd'])], env)
    P.wait_for('epmd', lambda: P.port_open(L.HOST, L.PORTS['epmd']), 20,
               eproc, lay.log('epmd'), 0.05)
    proc = P.spawn(state, 'rabbitmq', [RABBIT_SERVER], env)
    P.wait_for('RabbitMQ', lambda: P.port_open(L.HOST, L.PORTS['rabbit']),
               90, proc, lay.log('rabbitmq'))
    P.progress('RabbitMQ ready')


def start_ceph(state: P.State) -> None:
    """The ``ceph`` profile's cluster (:mod:`gate.ceph`): a monitor on
    :data:`~.layout.CEPH_MON_PORT`, one OSD (memstore) and a manager
    (Nova's rbd computes report their disk from its statistics); the
    pools of Nova and Glance. Its daemons are the cloud's processes,
    stopped by ``down`` after the computes."""
    def spawn(name: str, argv: list[str],
              env: dict[str, str]) -> subprocess.Popen[bytes]:
        # The environment as ceph.py gives it: no venv's Python variables
        # for ceph-mgr's embedded Python.
        unset = [a for k in ceph.DROP_ENV if k in os.environ
                 for a in ('-u', k)]
        return P.spawn(state, name, ['env', *unset, *argv],
                       env={k: env[k] for k in ('LC_ALL', 'LANG')})

    cluster = ceph.start_ceph(
        L.CEPH_POOL, timeout=120, mgr=True, base=state.layout.ceph_dir,
        port=L.CEPH_MON_PORT, more_pools=(L.GLANCE_POOL,), spawn=spawn,
        memstore_bytes=CEPH_BYTES)
    P.progress('ceph up: monitor %s:%d, pools %s and %s' % (
        cluster.mon_host, cluster.mon_port, L.CEPH_POOL, L.GLANCE_POOL))
