"""Configuration files of the gate cloud, rendered as text (no I/O here)."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence

from gate.cloud import layout as L

Value = str | int | bool | Sequence[str]
Sections = Mapping[str, Mapping[str, Value]]


def ini(sections: Sections) -> str:
    """An oslo.config style ini file; a list value repeats the key."""
    out: list[str] = []
    for name, options in sections.items():
        out.append('[%s]' % name)
        for key, value in options.items():
            values = [value] if isinstance(value, (str, int, bool)) \
                else list(value)
            for v in values:
                out.append('%s = %s' % (key, _str(v)))
        out.append('')
    return '\n'.join(out)


def _str(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return 'True' if value else 'False'
    return str(value)


def auth(username: str) -> dict[str, Value]:
    """keystoneauth password options for a service user."""
    return {
        'auth_type': 'password',
        'auth_url': L.AUTH_URL,
        'username': username,
        'password': L.PASSWORD,
        'project_name': 'service',
        'user_domain_name': 'Default',
        'project_domain_name': 'Default',
        'region_name': L.REGION,
    }


def authtoken(username: str) -> dict[str, Value]:
    opts = auth(username)
    opts['www_authenticate_uri'] = L.AUTH_URL
    opts['service_token_roles_required'] = True
    return opts


def my_cnf(base: str) -> str:
    return '\n'.join([
        '[mysqld]',
        'datadir = %s/mysql/data' % base,
        'socket = %s/mysql/mysqld.sock' % base,
        'pid-file = %s/mysql/mysqld.pid' % base,
        'bind-address = %s' % L.HOST,
        'port = %d' % L.PORTS['mysql'],
        'user = root',
        'skip-name-resolve',
        'innodb_buffer_pool_size = 128M',
        'innodb_flush_log_at_trx_commit = 2',
        'innodb_log_file_size = 32M',
        'innodb_doublewrite = 0',
        'innodb_file_per_table = 0',
        'max_connections = 500',
        'character-set-server = utf8mb4',
        'collation-server = utf8mb4_general_ci',
        'log-error = %s/logs/mysqld.log' % base,
        '',
        '[client]',
        'socket = %s/mysql/mysqld.sock' % base,
        '',
    ])


def db_init_sql() -> str:
    """Databases and the one user every service connects as."""
    lines = ["CREATE USER IF NOT EXISTS '%s'@'%s' IDENTIFIED BY '%s';"
             % (L.DB_USER, L.HOST, L.PASSWORD)]
    for db in L.DATABASES:
        lines.append('CREATE DATABASE IF NOT EXISTS %s;' % db)
        lines.append("GRANT ALL PRIVILEGES ON %s.* TO '%s'@'%s';"
                     % (db, L.DB_USER, L.HOST))
    return '\n'.join(lines) + '\n'


def rabbitmq_conf() -> str:
    return '\n'.join([
        'listeners.tcp.1 = %s:%d' % (L.HOST, L.PORTS['rabbit']),
        'loopback_users = none',
        'distribution.listener.interface = %s' % L.HOST,
        'distribution.listener.port_range.min = %d' % L.PORTS['rabbit_dist'],
        'distribution.listener.port_range.max = %d' % L.PORTS['rabbit_dist'],
        'log.console = true',
        'log.file = false',
        '',
    ])


def keystone_conf(base: str) -> str:
    return ini({
        'DEFAULT': {'use_stderr': True},
        'database': {'connection': L.db_url('keystone')},
        'token': {'provider': 'fernet'},
        # Throwaway passwords: the cheapest bcrypt (each user create,
        # bootstrap and password authentication hashes).
        'identity': {'password_hash_rounds': 4},
        # Keystone's own cache, in its one process (as devstack caches it
        # in memcached): without it every token issued or validated reads
        # the role assignments and the catalog from the database again,
        # and tempest's six workers queue behind keystone (a median of 1 s
        # a request on a 2-core machine). One process, so the cache is
        # never stale: keystone invalidates it on each change.
        'cache': {'enabled': True, 'backend': 'oslo_cache.dict'},
        'fernet_tokens': {'key_repository': base + '/keystone/fernet-keys'},
        'credential': {'key_repository': base + '/keystone/credential-keys'},
    })


def placement_conf() -> str:
    return ini({
        'DEFAULT': {'use_stderr': True},
        'placement_database': {'connection': L.db_url('placement')},
        'api': {'auth_strategy': 'keystone'},
        'keystone_authtoken': authtoken('placement'),
    })


def glance_api_conf(base: str, profile: str = L.DEFAULT_PROFILE) -> str:
    """glance-api.conf: images in files, or in the ``ceph`` profile in the
    cluster's Glance pool (and their location shown, so that stock's rbd
    computes clone them there rather than download them)."""
    g = base + '/glance'
    stores: dict[str, dict[str, Value]] = {
        'glance_store': {'default_backend': 'fs'},
        'fs': {'filesystem_store_datadir': g + '/images'}}
    default: dict[str, Value] = {
        'use_stderr': True,
        'enabled_backends': 'fs:file',
        'bind_host': L.HOST,
        'bind_port': L.PORTS['glance'],
        'workers': 1,
        'image_size_cap': 4 * 1024 ** 3,
    }
    if profile == 'ceph':
        default.update({'enabled_backends': 'ceph:rbd',
                        'show_image_direct_url': True})
        stores = {'glance_store': {'default_backend': 'ceph'},
                  'ceph': {'rbd_store_pool': L.GLANCE_POOL,
                           'rbd_store_ceph_conf': L.Layout(base).ceph_conf,
                           # Read in 1 MiB chunks, not 8: Glance's format
                           # inspector (oslo.utils) misses a VHDX's
                           # metadata region when the chunk holding its
                           # region table holds the metadata too, and
                           # refuses the upload as incomplete.
                           'rbd_store_chunk_size': 1}}
    return ini({
        'DEFAULT': default,
        'database': {'connection': L.db_url('glance')},
        **stores,
        'os_glance_staging_store': {
            'filesystem_store_datadir': g + '/staging'},
        'os_glance_tasks_store': {'filesystem_store_datadir': g + '/tasks'},
        'paste_deploy': {'flavor': 'keystone'},
        'keystone_authtoken': authtoken('glance'),
        'oslo_concurrency': {'lock_path': g + '/locks'},
    })


def _nova_common(base: str, host: str, my_ip: str) -> dict[str, dict[str,
                                                                   Value]]:
    """Options every Nova service of the gate shares."""
    return {
        'DEFAULT': {
            'host': host,
            'my_ip': my_ip,
            'transport_url': L.transport_url(),
            'use_stderr': True,
            'shutdown_timeout': 0,
            'graceful_shutdown_timeout': 5,
            'report_interval': 5,
            'state_path': base + '/nova/state',
        },
        'keystone_authtoken': authtoken('nova'),
        'service_user': dict(auth('nova'), send_service_user_token=True),
        'placement': auth('placement'),
        'glance': {'region_name': L.REGION, 'valid_interfaces': 'public'},
        'neutron': dict(auth('neutron'),
                        endpoint_override=L.ENDPOINTS['network']),
        'cinder': {'os_region_name': L.REGION},
        'oslo_messaging_notifications': {'driver': 'noop'},
        'vnc': {'enabled': False},
        'scheduler': {'discover_hosts_in_cells_interval': -1},
    }


def nova_conf(base: str) -> str:
    """nova.conf of the controller: api, conductor, scheduler, nova-manage.

    The scheduler loads the plugin's request filter the stock way
    (README, "Enabling it in a stock Nova").
    """
    sections = _nova_common(base, 'controller', L.HOST)
    sections['DEFAULT'].update({
        'osapi_compute_workers': 1,
        'metadata_workers': 1,
        # The project's resize scenario stays on the one host that keeps
        # qcow2 natively (nova-api reads this option).
        'allow_resize_to_same_host': True,
    })
    sections.update({
        'api': {'auth_strategy': 'keystone'},
        'wsgi': {'api_paste_config': base + '/nova/api-paste.ini'},
        'api_database': {'connection': L.db_url('nova_api')},
        'database': {'connection': L.db_url('nova')},
        'conductor': {'workers': 1},
        'oslo_concurrency': {'lock_path': base + '/nova/locks'},
        'filter_scheduler': {
            'available_filters': ['nova.scheduler.filters.all_filters',
                                  'nova_imgtype.scheduler.filters.'
                                  'all_filters'],
        },
    })
    sections['scheduler'].update({
        'workers': 1,
        'filter_hosts_by_image_type_support': True,
    })
    return ini(sections)


def nova_compute_conf(base: str, c: L.Compute, driver: str,
                      kvm: bool, images_type: str = '') -> str:
    """nova-compute.conf of one compute, on the plugin's driver or stock's.

    No [database]: nova-compute refuses database access. Paths are those
    inside the compute's mount namespace, except the venv and the logs.
    ``images_type`` replaces the driver's own (a compute taken back to
    stock keeps the plugin's, as an operator's nova.conf does).
    """
    venv = L.venv()
    conf = base + '/' + c.host + '/nova-compute.conf'
    helper = '%s/bin/privsep-helper --config-file %s' % (venv, conf)
    sections = _nova_common(base, c.host, c.ip)
    sections['DEFAULT'].update({
        'compute_driver': driver,
        'instances_path': L.INSTANCES_PATH,
        'state_path': base + '/' + c.host + '/state',
        'allow_resize_to_same_host': False,
        'heal_instance_info_cache_interval': -1,
        'resume_guests_state_on_host_boot': False,
        # Two cores: at Nova's ratio (4.0) a compute has 8 VCPUs, and
        # tempest at concurrency 6 fills one now and then, when a test
        # needs room on both hosts at once (an anti-affinity group, a
        # resize to the other host: placement offers one host, "No valid
        # host"). Upstream CI's 8-core nodes have 32; so have these.
        'cpu_allocation_ratio': '16.0',
    })
    libvirt: dict[str, Value] = {
        'virt_type': 'kvm' if kvm else 'qemu',
        'connection_uri': 'qemu:///system',
        'live_migration_scheme': 'tcp',
        'live_migration_inbound_addr': c.ip,
        'live_migration_timeout_action': 'force_complete',
        'live_migration_permit_post_copy': False,
        'images_type': images_type or (
            c.images_type if driver == L.PLUGIN_DRIVER
            else c.stock_images_type),
        'remote_filesystem_transport': 'ssh',
    }
    if c.snapshot_image_format:
        libvirt['snapshot_image_format'] = c.snapshot_image_format
    if kvm:
        libvirt.update({'cpu_mode': 'host-passthrough',
                        'cpu_model_extra_flags': '-arch-capabilities'})
    else:
        libvirt['cpu_mode'] = 'none'
    if driver == L.PLUGIN_DRIVER:
        libvirt.update({'use_storage_pools': c.pools,
                        'images_type_mapping': c.mapping})
    workarounds: dict[str, Value] = {
        # Both computes share one CPU; libvirt's comparison of the host
        # model (nested KVM) refuses it (Nova: "CPU doesn't have
        # compatibility"), so live migration prechecks skip it.
        'skip_cpu_compare_on_dest': True}
    if libvirt['images_type'] == 'rbd':
        # The ceph profile's cluster: no cephx, so no rbd_user nor secret
        # (stock then gives libvirt no <auth>).
        libvirt.update({'images_rbd_pool': L.CEPH_POOL,
                        'images_rbd_ceph_conf': L.Layout(base).ceph_conf})
        # Stock's own remedy for the instance directory an rbd host keeps
        # of an instance evacuated or moved away (its disks are shared).
        workarounds['ensure_libvirt_rbd_instance_dir_cleanup'] = True
    sections.update({
        'libvirt': libvirt,
        'compute': {'max_concurrent_live_migrations': 1},
        'workarounds': workarounds,
        'oslo_concurrency': {
            'lock_path': base + '/' + c.host + '/locks'},
        'nova_sys_admin': {'helper_command': helper},
        'privsep_osbrick': {'helper_command': helper},
        'vif_plug_linux_bridge_privileged': {'helper_command': helper},
        'vif_plug_ovs_privileged': {'helper_command': helper},
        'os_vif_linux_bridge': {'use_ipv6': False},
    })
    return ini(sections)


def libvirtd_conf(c: L.Compute) -> str:
    """libvirtd.conf inside the namespace (read from /etc/libvirt)."""
    return '\n'.join([
        'listen_tls = 0',
        'listen_tcp = 1',
        'listen_addr = "%s"' % c.ip,
        'tcp_port = "%d"' % L.LIBVIRT_PORT,
        'auth_tcp = "none"',
        'auth_unix_rw = "none"',
        'auth_unix_ro = "none"',
        'host_uuid = "%s"' % c.host_uuid,
        'log_outputs = "3:file:/var/log/libvirt/libvirtd.log"',
        '',
    ])


def qemu_conf(c: L.Compute) -> str:
    """qemu.conf: QEMU as root, no cgroups, stays in the namespace."""
    return '\n'.join([
        'user = "root"',
        'group = "root"',
        'dynamic_ownership = 0',
        'security_driver = "none"',
        'cgroup_controllers = [ ]',
        'namespaces = [ ]',
        'remember_owner = 0',
        'migration_address = "%s"' % c.ip,
        'migration_host = "%s"' % c.ip,
        'vnc_listen = "%s"' % c.ip,
        'spice_listen = "%s"' % c.ip,
        '',
    ])


def sshd_config(base: str, c: L.Compute) -> str:
    """A key-only sshd for root on the compute's address."""
    ssh = base + '/ssh'
    return '\n'.join([
        'ListenAddress %s:%d' % (c.ip, L.SSH_PORT),
        'HostKey %s/host_ed25519_key' % ssh,
        'PidFile %s/%s/sshd.pid' % (base, c.host),
        'AuthorizedKeysFile %s/authorized_keys' % ssh,
        'PermitRootLogin prohibit-password',
        'PubkeyAuthentication yes',
        'PasswordAuthentication no',
        'KbdInteractiveAuthentication no',
        'UsePAM no',
        'StrictModes no',
        'UseDNS no',
        'PrintMotd no',
        'MaxStartups 50:30:100',
        'MaxSessions 50',
        'Subsystem sftp internal-sftp',
        '',
    ])


def ssh_config(base: str) -> str:
    """Root's ssh client to the computes' addresses (a namespace's
    /etc/ssh/ssh_config)."""
    hosts = ' '.join(c.ip for c in L.COMPUTES)
    return '\n'.join([
        'Host %s' % hosts,
        '    Port %d' % L.SSH_PORT,
        '    User root',
        '    IdentityFile %s/ssh/id_ed25519' % base,
        '    IdentitiesOnly yes',
        '    StrictHostKeyChecking no',
        '    UserKnownHostsFile /dev/null',
        '    BatchMode yes',
        '    LogLevel ERROR',
        '    ConnectTimeout 10',
        'Host *',
        '    SendEnv LANG LC_*',
        '',
    ])


def openrc() -> str:
    a = L.ADMIN
    return '\n'.join([
        'export OS_AUTH_URL=%s' % L.AUTH_URL,
        'export OS_AUTH_TYPE=password',
        'export OS_IDENTITY_API_VERSION=3',
        'export OS_REGION_NAME=%s' % L.REGION,
        'export OS_USERNAME=%s' % a['username'],
        'export OS_PASSWORD=%s' % a['password'],
        'export OS_PROJECT_NAME=%s' % a['project_name'],
        'export OS_USER_DOMAIN_NAME=%s' % a['user_domain_name'],
        'export OS_PROJECT_DOMAIN_NAME=%s' % a['project_domain_name'],
        'export OS_INTERFACE=public',
        '',
    ])
