"""tempest.conf and the selection, from a synthetic cloud.json."""

from __future__ import annotations

import configparser
import io
import json
import pathlib
import re

from gate import tempest as gate_tempest
from gate import tempest_conf

CLOUD = {
    'base': '/tmp/gate-x',
    'auth_url': 'http://127.0.0.1:5000/v3',
    'region': 'RegionOne',
    'admin': {'username': 'admin', 'password': 'pw', 'project_name': 'admin',
              'user_domain_name': 'Default',
              'project_domain_name': 'Default'},
    'computes': [{'host': 'compute1', 'driver': 'imgtype.LibvirtDriver'},
                 {'host': 'compute2', 'driver': 'imgtype.LibvirtDriver'}],
}
RES = tempest_conf.Resources('img1', 'img2', 'f1', 'f2', '/i/boot.qcow2',
                             'ploop', '/i/unsupported.ploop')


def _conf(tmp_path: pathlib.Path, text: str) -> configparser.RawConfigParser:
    path = tmp_path / 'x.conf'
    path.write_text(text)
    return tempest_conf.read_oslo_conf(str(path))


def test_sections_render_and_parse_back() -> None:
    sections = tempest_conf.tempest_sections(
        CLOUD, RES, ['ComputeFilter', 'SameHostFilter'], True, ['compute1'])
    text = tempest_conf.render_conf(sections)
    parsed = configparser.RawConfigParser()
    parsed.read_string(text)
    assert parsed['auth']['admin_password'] == 'pw'
    assert parsed['auth']['use_dynamic_credentials'] == 'True'
    assert parsed['identity']['uri_v3'] == CLOUD['auth_url']
    assert parsed['identity-feature-enabled']['api_v2'] == 'False'
    assert parsed['compute']['image_ref'] == 'img1'
    assert parsed['compute']['image_ref_alt'] == 'img2'
    assert parsed['compute']['flavor_ref_alt'] == 'f2'
    assert parsed['compute']['min_compute_nodes'] == '2'
    assert parsed['compute']['max_microversion'] == 'latest'
    feats = parsed['compute-feature-enabled']
    for name in ('resize', 'cold_migration', 'live_migration',
                 'block_migration_for_live_migration', 'console_output',
                 'shelve', 'pause', 'suspend', 'snapshot'):
        assert feats[name] == 'True', name
    assert feats['scheduler_enabled_filters'] == (
        'ComputeFilter, SameHostFilter')
    for name in ('cinder', 'swift'):
        assert parsed['service_available'][name] == 'False'
    # The stub is an empty Neutron: available, no extensions, no networks.
    assert parsed['service_available']['neutron'] == 'True'
    assert parsed['network-feature-enabled']['api_extensions'] == ''
    assert parsed['auth']['create_isolated_networks'] == 'False'
    assert parsed['validation']['run_validation'] == 'False'
    assert parsed['placement']['max_microversion'] == 'latest'
    assert parsed['imgtype']['native_qcow2_hosts'] == 'compute1'
    assert parsed['imgtype']['unsupported_disk_format'] == 'ploop'
    assert parsed['imgtype-feature-enabled'][
        'image_type_scheduling'] == 'True'


def test_the_ceph_profile_live_migrates_without_block_migration() -> None:
    # Both computes' root disks are RBD images of one cluster there: a
    # block migration of a shared disk is refused by stock's checks.
    def feats(cloud: dict[str, object]) -> configparser.SectionProxy:
        parsed = configparser.RawConfigParser()
        parsed.read_string(tempest_conf.render_conf(
            tempest_conf.tempest_sections(cloud, RES, [], True, [])))
        return parsed['compute-feature-enabled']

    parsed = configparser.RawConfigParser()
    parsed.read_string(tempest_conf.render_conf(tempest_conf.tempest_sections(
        dict(CLOUD, profile='ceph'), RES, [], True, [])))
    # Glance on RBD keeps an image its instances' disks are clones of.
    assert parsed['volume-feature-enabled'][
        'enable_volume_image_dep_tests'] == 'False'
    ceph = feats(dict(CLOUD, profile='ceph'))
    assert ceph['block_migration_for_live_migration'] == 'False'
    assert ceph['live_migration'] == 'True'
    assert feats(dict(CLOUD, profile='default'))[
        'block_migration_for_live_migration'] == 'True'


def test_imgtype_options_exist_in_the_plugin() -> None:
    from nova_imgtype_tempest_plugin import config as imgtype_config
    sections = tempest_conf.tempest_sections(CLOUD, RES, [], False, [])
    for group, opts in imgtype_config.GROUPS:
        names = {o.name for o in opts}
        assert set(sections[group.name]) <= names, group.name


def test_filters_from_nova_conf(tmp_path: pathlib.Path) -> None:
    assert tempest_conf.enabled_filters(_conf(tmp_path, '[DEFAULT]\n')) == (
        list(tempest_conf.NOVA_DEFAULT_FILTERS))
    conf = _conf(tmp_path, '[filter_scheduler]\nenabled_filters = A, B,C\n')
    assert tempest_conf.enabled_filters(conf) == ['A', 'B', 'C']


def test_native_hosts_and_unsupported_format(tmp_path: pathlib.Path) -> None:
    c1 = _conf(tmp_path, '[DEFAULT]\nforce_raw_images = False\n'
               '[libvirt]\nimages_type_mapping = raw:flat, qcow2:qcow2\n')
    (tmp_path / 'y.conf').write_text(
        '[libvirt]\nimages_type_mapping = raw:flat\n')
    c2 = tempest_conf.read_oslo_conf(str(tmp_path / 'y.conf'))
    assert tempest_conf.native_qcow2_hosts(
        [('compute1', c1), ('compute2', c2)]) == ['compute1']
    # compute2 converts (force_raw_images defaults to True): ploop.
    assert tempest_conf.unsupported_format([c1, c2]) == 'ploop'
    assert tempest_conf.unsupported_format([c1]) == 'vhdx'


def test_plugin_driver() -> None:
    assert gate_tempest.plugin_driver(CLOUD)
    stock = dict(CLOUD, computes=[{'host': 'c', 'driver': 'stock'}])
    assert not gate_tempest.plugin_driver(stock)


def test_selection_file() -> None:
    text = pathlib.Path(gate_tempest.SELECTION).read_text()
    ids = tempest_conf.parse_selection(text)
    assert len(ids) == len(set(ids))
    assert not any(' ' in i or '#' in i for i in ids)
    regexes = tempest_conf.selection_regexes(ids)
    full = ('tempest.api.compute.admin.test_migrations.MigrationsAdminTest'
            '.test_cold_migration[id-4bf0be52-3b6f-4746-9a27-3143636fe30d]')
    assert any(re.search(r, full) for r in regexes)
    # A test id does not match a longer test name.
    rx = tempest_conf.selection_regexes(['a.B.test_x'])[0]
    assert re.search(rx, 'a.B.test_x[id-1]')
    assert not re.search(rx, 'a.B.test_x_with_more[id-1]')
    assert re.search(tempest_conf.selection_regexes(['a.B'])[0], 'a.B.t[x]')


def test_execute_without_a_cloud(tmp_path: pathlib.Path) -> None:
    """The whole tempest pipeline (init, list, run --subunit, parse) on a
    cloud that is not there: every selected test gets a row, class-level
    skips and failures are spread to the tests of their class."""
    selection = tmp_path / 'sel.txt'
    selection.write_text(
        '# two classes\n'
        'tempest.api.compute.servers.test_servers.ServerShowV247Test\n'
        'nova_imgtype_tempest_plugin.tests.scenario.test_image_type_scheduling'
        '.ImageTypeSchedulingTest  # the plugin\'s\n')
    workspace = str(tmp_path / 'ws')
    gate_tempest.init_workspace(workspace)
    cloud = dict(CLOUD, auth_url='http://127.0.0.1:9/v3')
    (tmp_path / 'ws' / 'etc' / 'tempest.conf').write_text(
        tempest_conf.render_conf(tempest_conf.tempest_sections(
            cloud, RES, [], False, [])))
    log = io.StringIO()
    data = gate_tempest.execute(workspace, 'offline', str(selection),
                                concurrency=1, timeout=300, out=log)
    tests = data['tests']
    assert set(tests) == {
        'tempest.api.compute.servers.test_servers.ServerShowV247Test.'
        'test_show_server',
        'tempest.api.compute.servers.test_servers.ServerShowV247Test.'
        'test_update_rebuild_list_server',
        'nova_imgtype_tempest_plugin.tests.scenario.test_image_type_scheduling.'
        'ImageTypeSchedulingTest.test_native_qcow2_flavor_lands_on_native_'
        'host',
        'nova_imgtype_tempest_plugin.tests.scenario.test_image_type_scheduling.'
        'ImageTypeSchedulingTest.test_unsupported_disk_format_no_valid_host',
    }
    assert data['counts'] == {'passed': 0, 'failed': 2, 'skipped': 2,
                              'missing': 0}
    for test_id, result in tests.items():
        assert result['class_level']
        if test_id.startswith('tempest.'):
            assert 'Connection refused' in result['reason']
        else:
            assert 'image_type_scheduling is False' in result['reason']
    assert '4 tests selected' in log.getvalue()
    assert (tmp_path / 'ws' / 'results.subunit').stat().st_size > 0


def test_the_tests_not_passed_make_stock_s_selection(
        tmp_path: pathlib.Path) -> None:
    """``--stock where-needed``: stock runs exactly the tests the plugin
    failed, skipped or left without a result, and none it passed."""
    from gate import __main__ as gate_main
    base = 'tempest.api.compute.admin.test_migrations.MigrationsAdminTest.'
    statuses = {'test_cold_migration': 'failed',
                'test_cold_migration_revert': 'passed',
                'test_resize_server_revert_deleted_flavor': 'skipped',
                'test_list_migrations': 'missing'}
    plugin = tmp_path / 'plugin' / 'results.json'
    plugin.parent.mkdir()
    plugin.write_text(json.dumps({'tests': {
        base + name: {'status': s} for name, s in statuses.items()}}))
    selection = gate_main._stock_selection(str(plugin), 'where-needed')
    assert selection == str(tmp_path / 'plugin' / 'not-passed.txt')
    regexes = tempest_conf.selection_regexes(tempest_conf.parse_selection(
        pathlib.Path(selection).read_text()))
    chosen = {name for name in statuses
              if any(re.search(r, base + name + '[id-1]') for r in regexes)}
    assert chosen == {n for n, s in statuses.items() if s != 'passed'}
    # All passed: stock need not run at all; 'all' is the whole selection.
    plugin.write_text(json.dumps({'tests': {
        base + name: {'status': 'passed'} for name in statuses}}))
    assert gate_main._stock_selection(str(plugin), 'where-needed') is None
    assert gate_main._stock_selection(str(plugin), 'all') == \
        gate_tempest.SELECTION


def test_durations_seed_stestrs_split_by_time(tmp_path: pathlib.Path) -> None:
    """Durations from a run before reach the workspace's stestr
    repository under the listed ids (attributes and all), and stestr's
    own scheduler then splits the classes by time: the two long ones on
    different workers, which dealing them out in turn does not."""
    from stestr import scheduler
    from stestr.repository import util as repo_util

    workspace = str(tmp_path / 'ws')
    gate_tempest.init_workspace(workspace)
    classes = {'A': 100.0, 'B': 1.0, 'C': 90.0, 'D': 1.0}
    listed = ['tempest.api.x.%s.test_%d[id-%s%d,smoke]' % (c, i, c, i)
              for c in sorted(classes) for i in range(2)]
    durations = {'tempest.api.x.%s.test_%d' % (c, i): seconds / 2
                 for c, seconds in classes.items() for i in range(2)}
    del durations['tempest.api.x.D.test_1']      # a test new since
    assert gate_tempest.seed_times(workspace, listed, durations) == 7
    repo = repo_util.get_repo_open(repo_url=workspace)
    times = repo.get_test_times(listed)
    assert times['known']['tempest.api.x.A.test_0[id-A0,smoke]'] == 50.0
    assert times['unknown'] == {'tempest.api.x.D.test_1[id-D1,smoke]'}

    def by_class(test_id: str) -> str:
        return test_id.split('[')[0].rsplit('.', 1)[0]

    def long_ones(parts: list[list[str]]) -> list[set[str]]:
        return [{by_class(t)[-1] for t in p} & {'A', 'C'} for p in parts]

    assert sorted(map(sorted, long_ones(scheduler.partition_tests(
        listed, 2, repo, by_class)))) == [['A'], ['C']]
    assert long_ones(scheduler.partition_tests(
        listed, 2, None, by_class)) == [{'A', 'C'}, set()]


def test_no_durations_leave_the_repository_alone(
        tmp_path: pathlib.Path) -> None:
    workspace = str(tmp_path / 'ws')
    gate_tempest.init_workspace(workspace)
    assert gate_tempest.seed_times(workspace, ['tempest.a.B.test_c'],
                                   {'tempest.other.B.test_c': 3.0}) == 0
    assert not (tmp_path / 'ws' / 'durations.subunit').exists()


def test_previous_durations_are_the_sides_own_or_the_plugins(
        tmp_path: pathlib.Path) -> None:
    path = tmp_path / 'latest.json'
    path.write_text(json.dumps({'tests': [
        {'id': 'a', 'plugin': {'status': 'passed', 'duration': 2.0},
         'stock': {'status': 'passed', 'duration': 3.0}},
        {'id': 'b', 'plugin': {'status': 'failed', 'duration': 5.0},
         'stock': {'status': 'not needed', 'duration': 0.0}},
        {'id': 'c', 'plugin': {'status': 'missing', 'duration': 0.0},
         'stock': {'status': 'missing', 'duration': 0.0}},
    ]}))
    assert gate_tempest.previous_durations(str(path), 'stock') == {
        'a': 3.0, 'b': 5.0}
    assert gate_tempest.previous_durations(str(path), 'plugin') == {
        'a': 2.0, 'b': 5.0}
    assert gate_tempest.previous_durations(
        str(tmp_path / 'none.json'), 'plugin') == {}
