"""The gate cloud's configuration files, rendered without starting anything."""

from __future__ import annotations

import configparser
from importlib.metadata import entry_points

import pytest

from gate.cloud import configs
from gate.cloud import down
from gate.cloud import layout as L
from gate.cloud import proc as P
from gate.cloud import services

BASE = '/tmp/gate-abcdefgh'


def parse(text: str) -> configparser.ConfigParser:
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.read_string(text)
    return cp


def lines(text: str, section: str) -> list[str]:
    """The raw lines of one section (repeated keys kept)."""
    out: list[str] = []
    current = None
    for line in text.splitlines():
        if line.startswith('['):
            current = line.strip('[]')
        elif current == section and line:
            out.append(line)
    return out


def test_ini_repeats_list_values_and_spells_booleans():
    text = configs.ini({'s': {'a': ['x', 'y'], 'b': True, 'c': 0}})
    assert lines(text, 's') == ['a = x', 'a = y', 'b = True', 'c = 0']


def test_controller_loads_the_request_filter_the_stock_way():
    text = configs.nova_conf(BASE)
    assert lines(text, 'filter_scheduler') == [
        'available_filters = nova.scheduler.filters.all_filters',
        'available_filters = nova_imgtype.scheduler.filters.all_filters']
    cp = parse(text)
    assert cp['scheduler']['filter_hosts_by_image_type_support'] == 'True'
    assert cp['scheduler']['workers'] == '1'
    assert cp['conductor']['workers'] == '1'
    assert cp['database']['connection'] == L.db_url('nova')
    assert cp['api_database']['connection'] == L.db_url('nova_api')
    assert cp['neutron']['endpoint_override'] == L.ENDPOINTS['network']
    assert cp['DEFAULT']['shutdown_timeout'] == '0'


@pytest.mark.parametrize('kvm', [True, False])
def test_plugin_computes_differ_as_the_gate_says(kvm):
    c1, c2 = L.COMPUTES
    one = parse(configs.nova_compute_conf(BASE, c1, L.PLUGIN_DRIVER, kvm))
    two = parse(configs.nova_compute_conf(BASE, c2, L.PLUGIN_DRIVER, kvm))
    for cp, c in ((one, c1), (two, c2)):
        assert 'database' not in cp and 'api_database' not in cp
        assert cp['DEFAULT']['compute_driver'] == 'imgtype.LibvirtDriver'
        assert cp['DEFAULT']['host'] == c.host
        assert cp['DEFAULT']['my_ip'] == c.ip
        assert cp['DEFAULT']['instances_path'] == L.INSTANCES_PATH
        assert cp['DEFAULT']['shutdown_timeout'] == '0'
        assert cp['libvirt']['live_migration_inbound_addr'] == c.ip
        assert cp['libvirt']['virt_type'] == ('kvm' if kvm else 'qemu')
        helper = cp['nova_sys_admin']['helper_command']
        assert helper.endswith('--config-file %s/%s/nova-compute.conf'
                               % (BASE, c.host))
        assert cp['privsep_osbrick']['helper_command'] == helper
    assert (one['libvirt']['use_storage_pools'],
            one['libvirt']['images_type'],
            one['libvirt']['images_type_mapping']) == ('True', 'qcow2',
                                                       'qcow2:qcow2')
    assert (two['libvirt']['use_storage_pools'],
            two['libvirt']['images_type'],
            two['libvirt']['images_type_mapping']) == ('False', 'flat',
                                                       'raw:flat')
    if kvm:
        assert one['libvirt']['cpu_mode'] == 'host-passthrough'
        assert one['libvirt']['cpu_model_extra_flags'] == \
            '-arch-capabilities'
    else:
        assert 'cpu_model_extra_flags' not in one['libvirt']


def test_stock_computes_carry_no_plugin_option():
    # One images_type on every stock compute (issue 28): stock converts
    # nothing on a move between them.
    for c in L.COMPUTES:
        cp = parse(configs.nova_compute_conf(BASE, c, L.STOCK_DRIVER, True))
        assert cp['DEFAULT']['compute_driver'] == 'libvirt.LibvirtDriver'
        assert cp['libvirt']['images_type'] == 'qcow2'
        assert 'images_type_mapping' not in cp['libvirt']
        assert 'use_storage_pools' not in cp['libvirt']


def test_raw_disks_snapshot_to_qcow2_on_both_drivers():
    """Raw disks upload qcow2 snapshots (their data, not 1 GiB each, and
    never a raw image whose guest wrote a qcow2 header, which Glance
    refuses), on either driver and both computes; the ceph profile keeps
    stock's default (the disk's own format)."""
    for driver in (L.PLUGIN_DRIVER, L.STOCK_DRIVER):
        formats = {
            c.host: parse(configs.nova_compute_conf(BASE, c, driver, True))[
                'libvirt'].get('snapshot_image_format') for c in L.COMPUTES}
        assert formats == {'compute1': 'qcow2', 'compute2': 'qcow2'}
    for c in L.CEPH_COMPUTES:
        cp = parse(configs.nova_compute_conf(BASE, c, L.PLUGIN_DRIVER, True))
        assert 'snapshot_image_format' not in cp['libvirt']


def test_both_drivers_computes_have_room_for_two_host_tests():
    """The same VCPU room on stock's computes and the plugin's: 32 on two
    cores, so that placement offers both hosts to a test that needs two
    while tempest runs six at once."""
    for driver in (L.PLUGIN_DRIVER, L.STOCK_DRIVER):
        for c in L.COMPUTES:
            cp = parse(configs.nova_compute_conf(BASE, c, driver, True))
            assert float(cp['DEFAULT']['cpu_allocation_ratio']) == 16.0


def test_each_libvirtd_listens_on_its_own_address_with_its_own_uuid():
    confs = [configs.libvirtd_conf(c) for c in L.COMPUTES]
    for c, text in zip(L.COMPUTES, confs, strict=True):
        assert 'listen_addr = "%s"' % c.ip in text
        assert 'host_uuid = "%s"' % c.host_uuid in text
        assert 'auth_tcp = "none"' in text
    assert len({c.host_uuid for c in L.COMPUTES}) == len(L.COMPUTES)


def test_sshd_is_key_only_on_the_compute_address():
    c = L.COMPUTES[1]
    text = configs.sshd_config(BASE, c)
    assert 'ListenAddress %s:%d' % (c.ip, L.SSH_PORT) in text
    assert 'PasswordAuthentication no' in text
    assert 'PermitRootLogin prohibit-password' in text
    client = configs.ssh_config(BASE)
    assert 'IdentityFile %s/ssh/id_ed25519' % BASE in client
    assert 'StrictHostKeyChecking no' in client
    assert all(c.ip in client for c in L.COMPUTES)


def test_every_database_is_created_and_granted():
    sql = configs.db_init_sql()
    for db in L.DATABASES:
        assert 'CREATE DATABASE IF NOT EXISTS %s;' % db in sql
        assert "GRANT ALL PRIVILEGES ON %s.* TO '%s'@'%s';" % (
            db, L.DB_USER, L.HOST) in sql


def test_openrc_names_the_admin_of_cloud_json():
    text = configs.openrc()
    assert 'export OS_AUTH_URL=%s' % L.AUTH_URL in text
    assert 'export OS_PASSWORD=%s' % L.ADMIN['password'] in text


def test_unix_sockets_fit_under_a_mkdtemp_base():
    lay = L.Layout(BASE)
    for c in L.COMPUTES:
        assert len(lay.libvirt_sock(c.host)) < 108
        assert len(lay.path(c.host, 'libvirt', 'run', 'virtlogd-sock')) < 108
    assert len(lay.path('mysql', 'mysqld.sock')) < 108


def test_down_refuses_a_directory_that_is_no_gate_cloud(tmp_path):
    with pytest.raises(P.GateError):
        down.down(str(tmp_path))


def test_every_profile_has_the_same_compute_hosts_and_addresses():
    # The hosts file, ssh's client config and the port check name the
    # computes by the default profile's list.
    for profile in L.PROFILES:
        assert [(c.host, c.ip, c.host_uuid) for c in L.computes(profile)] \
            == [(c.host, c.ip, c.host_uuid) for c in L.COMPUTES]
    with pytest.raises(ValueError, match="'cephfs'.*default, ceph"):
        L.computes('cephfs')


def test_the_ceph_profiles_computes_are_on_the_cluster():
    conf = BASE + '/ceph/ceph.conf'
    c1, c2 = L.computes('ceph')
    one = parse(configs.nova_compute_conf(BASE, c1, L.PLUGIN_DRIVER, True))
    two = parse(configs.nova_compute_conf(BASE, c2, L.PLUGIN_DRIVER, True))
    assert (one['libvirt']['images_type'], one['libvirt']['use_storage_pools'],
            one['libvirt']['images_type_mapping']) == ('rbd', 'False',
                                                       'qcow2:qcow2')
    assert (two['libvirt']['images_type'],
            two['libvirt']['use_storage_pools']) == ('rbd', 'True')
    for c in (c1, c2):
        for driver in (L.PLUGIN_DRIVER, L.STOCK_DRIVER):
            cp = parse(configs.nova_compute_conf(BASE, c, driver, True))
            assert cp['libvirt']['images_type'] == 'rbd'
            assert cp['libvirt']['images_rbd_pool'] == L.CEPH_POOL
            assert cp['libvirt']['images_rbd_ceph_conf'] == conf
            # No cephx: no user, no secret (stock gives libvirt no <auth>).
            assert 'rbd_user' not in cp['libvirt']
            assert 'rbd_secret_uuid' not in cp['libvirt']
    # The default profile has nothing of Ceph.
    for c in L.COMPUTES:
        cp = parse(configs.nova_compute_conf(BASE, c, L.PLUGIN_DRIVER, True))
        assert 'images_rbd_pool' not in cp['libvirt']


def test_glance_keeps_images_in_files_or_in_the_ceph_profiles_pool():
    fs = parse(configs.glance_api_conf(BASE))
    assert fs['DEFAULT']['enabled_backends'] == 'fs:file'
    assert 'show_image_direct_url' not in fs['DEFAULT']
    assert fs['fs']['filesystem_store_datadir'] == BASE + '/glance/images'
    rbd = parse(configs.glance_api_conf(BASE, 'ceph'))
    assert rbd['DEFAULT']['enabled_backends'] == 'ceph:rbd'
    # Stock's rbd computes clone an image they can locate in Ceph.
    assert rbd['DEFAULT']['show_image_direct_url'] == 'True'
    assert rbd['glance_store']['default_backend'] == 'ceph'
    assert rbd['ceph']['rbd_store_pool'] == L.GLANCE_POOL
    assert rbd['ceph']['rbd_store_ceph_conf'] == BASE + '/ceph/ceph.conf'
    assert rbd['ceph']['rbd_store_chunk_size'] == '1'
    assert 'fs' not in rbd


def test_cephs_daemons_stop_after_the_compute_hosts():
    assert down._group('ceph-osd.0') > down._group('compute1-host')
    assert down._group('ceph-mon.a') == down._group('mysqld')


def test_the_ceph_profiles_cluster_is_on_loopback_without_cephx():
    from gate import ceph
    cluster = ceph.CephCluster(
        base=BASE + '/ceph', conf=BASE + '/ceph/ceph.conf',
        mon_host=ceph.MON_HOST, mon_port=L.CEPH_MON_PORT, fsid='f',
        pool=L.CEPH_POOL)
    cp = parse(ceph.ceph_conf(cluster, 64 << 30))
    assert cp['global']['mon host'] == '[v2:127.0.0.1:%d]' % L.CEPH_MON_PORT
    for key in ('auth cluster required', 'auth service required',
                'auth client required'):
        assert cp['global'][key] == 'none'
    assert cp['global']['memstore device bytes'] == str(64 << 30)
    assert cp['global']['mon data'] == BASE + '/ceph/mon'


def test_rbd_computes_remove_the_instance_directory_of_what_left():
    for c in L.computes('ceph'):
        cp = parse(configs.nova_compute_conf(BASE, c, L.STOCK_DRIVER, True))
        assert cp['workarounds']['ensure_libvirt_rbd_instance_dir_cleanup'] \
            == 'True'
        assert cp['workarounds']['skip_cpu_compare_on_dest'] == 'True'
    cp = parse(configs.nova_compute_conf(BASE, L.COMPUTES[0], L.STOCK_DRIVER,
                                         True))
    assert 'ensure_libvirt_rbd_instance_dir_cleanup' not in cp['workarounds']


def test_keystone_caches_in_its_one_process():
    # An in-process cache is only right in a single process: another
    # process would keep what this one invalidated.
    conf = parse(configs.keystone_conf(BASE))
    assert conf.getboolean('cache', 'enabled')
    backend = conf.get('cache', 'backend')
    assert backend in {e.name for e in entry_points(group='dogpile.cache')}
    common = list(services.UWSGI_COMMON)
    assert common[common.index('--processes') + 1] == '1'
