"""The OpenStack services of the controller: keystone, placement, glance,
nova-api (all four under uwsgi), nova-conductor and nova-scheduler."""

from __future__ import annotations

import concurrent.futures as cf
import os
import shutil
import subprocess
import time
from collections.abc import Sequence

from gate.cloud import configs
from gate.cloud import layout as L
from gate.cloud import proc as P
from gate.cloud.infra import _write

UWSGI_COMMON = (
    '--master', '--processes', '1', '--threads', '4', '--enable-threads',
    '--die-on-term', '--lazy-apps', '--buffer-size', '65535', '--need-app',
    '--thunder-lock', '--no-orphans', '--http-keepalive',
    '--add-header', 'Connection: close',
)


def uwsgi(state: P.State, name: str, port: int, module: str,
          env: dict[str, str], extra: Sequence[str] = (),
          ready_path: str = '/') -> subprocess.Popen[bytes]:
    """Serve ``module`` with uwsgi on 127.0.0.1:``port``; wait for HTTP."""
    argv = [L.venv_bin('uwsgi'), '--http-socket', '%s:%d' % (L.HOST, port),
            *UWSGI_COMMON, '--virtualenv', L.venv(), '--procname-prefix',
            'gate-%s-' % name, '--module', module, *extra]
    proc = P.spawn(state, name, argv, env)
    url = 'http://%s:%d%s' % (L.HOST, port, ready_path)
    P.wait_for(name, lambda: P.http_answers(url), 120, proc,
               state.layout.log(name))
    return proc


def manage(state: P.State, name: str, *argv: str) -> None:
    """A ``*-manage`` command, output in ``<name>-manage.log``."""
    P.run([L.venv_bin(argv[0]), *argv[1:]], state.layout.log(name +
                                                             '-manage'))


def keystone(state: P.State) -> None:
    lay = state.layout
    d = lay.path('keystone')
    for sub in ('fernet-keys', 'credential-keys'):
        os.makedirs(os.path.join(d, sub), mode=0o700, exist_ok=True)
    conf = os.path.join(d, 'keystone.conf')
    _write(conf, configs.keystone_conf(lay.base))
    c = '--config-file=' + conf
    # Key repositories (no database) while the database is synced.
    with cf.ThreadPoolExecutor(3) as pool:
        jobs = [pool.submit(manage, state, 'keystone-' + what,
                            'keystone-manage', c, what,
                            '--keystone-user', 'root',
                            '--keystone-group', 'root')
                for what in ('fernet_setup', 'credential_setup')]
        jobs.append(pool.submit(manage, state, 'keystone',
                                'keystone-manage', c, 'db_sync'))
        for job in jobs:
            job.result()
    url = L.AUTH_URL
    manage(state, 'keystone', 'keystone-manage', c, 'bootstrap',
           '--bootstrap-password', L.PASSWORD,
           '--bootstrap-username', L.ADMIN['username'],
           '--bootstrap-project-name', L.ADMIN['project_name'],
           '--bootstrap-admin-url', url, '--bootstrap-internal-url', url,
           '--bootstrap-public-url', url,
           '--bootstrap-region-id', L.REGION)
    uwsgi(state, 'keystone', L.PORTS['keystone'],
          'keystone.wsgi.api:application', {'OS_KEYSTONE_CONFIG_DIR': d},
          ready_path='/v3')
    P.progress('keystone ready')


def placement(state: P.State) -> None:
    lay = state.layout
    d = lay.path('placement')
    conf = os.path.join(d, 'placement.conf')
    _write(conf, configs.placement_conf())
    manage(state, 'placement', 'placement-manage', '--config-file', conf,
           'db', 'sync')
    P.progress('placement database synced')
    uwsgi(state, 'placement', L.PORTS['placement'],
          'placement.wsgi.api:application', {'OS_PLACEMENT_CONFIG_DIR': d})
    P.progress('placement ready')


def glance(state: P.State) -> None:
    lay = state.layout
    d = lay.path('glance')
    for sub in ('images', 'staging', 'tasks', 'locks'):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    conf = os.path.join(d, 'glance-api.conf')
    _write(conf, configs.glance_api_conf(lay.base, state.profile))
    shutil.copy(os.path.join(L.venv(), 'etc', 'glance',
                             'glance-api-paste.ini'),
                os.path.join(d, 'glance-api-paste.ini'))
    manage(state, 'glance', 'glance-manage', '--config-file', conf,
           'db_sync')
    # The metadata definitions Glance ships (devstack loads them too): the
    # image API's metadefs tests read its resource types.
    manage(state, 'glance', 'glance-manage', '--config-file', conf,
           'db', 'load_metadefs', '--path',
           os.path.join(L.venv(), 'etc', 'glance', 'metadefs'))
    P.progress('glance database synced, metadata definitions loaded')
    uwsgi(state, 'glance', L.PORTS['glance'], 'glance.wsgi.api:application',
          {'OS_GLANCE_CONFIG_DIR': d},
          extra=('--chunked-input-limit', '4096000', '--http-auto-chunked',
                 '--http-raw-body', '--wsgi-disable-file-wrapper'))
    P.progress('glance ready')


def nova_config(state: P.State) -> str:
    lay = state.layout
    d = lay.path('nova')
    for sub in ('state', 'locks'):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    _write(lay.nova_conf, configs.nova_conf(lay.base))
    shutil.copy(os.path.join(L.venv(), 'etc', 'nova', 'api-paste.ini'),
                os.path.join(d, 'api-paste.ini'))
    return lay.nova_conf


def nova_databases(state: P.State) -> None:
    """API database, cell0 and cell1 mapped and synced."""
    conf = nova_config(state)
    c = ('--config-file', conf)
    manage(state, 'nova', 'nova-manage', *c, 'api_db', 'sync')
    P.progress('nova API database synced')
    manage(state, 'nova', 'nova-manage', *c, 'cell_v2', 'map_cell0',
           '--database_connection', L.db_url('nova_cell0'))
    manage(state, 'nova', 'nova-manage', *c, 'cell_v2', 'create_cell',
           '--name', 'cell1', '--verbose')
    manage(state, 'nova', 'nova-manage', *c, 'db', 'sync')
    P.progress('nova cell databases synced')


def nova_rpc_services(state: P.State) -> None:
    """nova-conductor and nova-scheduler."""
    lay = state.layout
    c = ['--config-file', lay.nova_conf]
    procs = {name: P.spawn(state, name, [L.venv_bin(name), *c])
             for name in ('nova-conductor', 'nova-scheduler')}
    # nova-compute pings the conductor at start and, unanswered, waits 10 s
    # before it tries again: go on once the conductor's record is there
    # (Service.start writes it just before its RPC server starts).
    P.wait_for('nova-conductor', lambda: _service_row('nova-conductor'),
               120, procs['nova-conductor'], lay.log('nova-conductor'))
    time.sleep(1)
    P.progress('nova-conductor ready')


def _service_row(binary: str) -> bool:
    import pymysql

    conn = pymysql.connect(host=L.HOST, port=L.PORTS['mysql'],
                           user=L.DB_USER, password=L.PASSWORD,
                           database='nova', connect_timeout=2)
    try:
        with conn.cursor() as cur:
            cur.execute('SELECT COUNT(*) FROM services WHERE `binary` = %s '
                        'AND deleted = 0', (binary,))
            row = cur.fetchone()
    finally:
        conn.close()
    return bool(row and row[0])


def nova_api(state: P.State) -> None:
    """nova-api (uwsgi); the RPC services are still running."""
    lay = state.layout
    uwsgi(state, 'nova-api', L.PORTS['nova'],
          'nova.wsgi.osapi_compute:application',
          {'OS_NOVA_CONFIG_DIR': lay.path('nova')})
    P.progress('nova-api ready')
    for name in ('nova-conductor', 'nova-scheduler'):
        pid = state.pid(name)
        if pid is None or not P.alive(pid):
            raise P.GateError('%s exited\n%s' % (name, P.tail(lay.log(name))))


def neutron_stub(state: P.State) -> None:
    proc = P.spawn(state, 'neutron-stub', [
        os.path.join(L.venv(), 'bin', 'python'), '-m', 'gate.neutron_stub',
        '--host', L.HOST, '--port', str(L.PORTS['neutron'])],
        {'PYTHONPATH': _repo_root()})
    P.wait_for('network endpoint stub',
               lambda: P.http_answers(L.ENDPOINTS['network'] + '/'), 30,
               proc, state.layout.log('neutron-stub'), 0.05)
    P.progress('network endpoint stub ready')


def _repo_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
