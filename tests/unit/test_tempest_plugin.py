"""The tempest plugin as tempest sees it, and the Zuul job that runs it.

Needs the package installed (``make venv``): tempest finds plugins only
through the ``tempest.test_plugins`` entry point.
"""

import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import unittest

import yaml
from oslo_config import cfg
from tempest import config as tempest_config
from tempest.test_discover import plugins

from nova_imgtype import traits
from nova_imgtype.scheduler import request_filters
from nova_imgtype_tempest_plugin import plugin as imgtype_plugin
from nova_imgtype_tempest_plugin.tests.scenario import (
    test_image_type_scheduling,
)

ROOT = pathlib.Path(__file__).resolve().parents[2]
VENV_BIN = pathlib.Path(sys.executable).parent
JOB = 'nova-imgtype-tempest-multinode'

MODULE = ('nova_imgtype_tempest_plugin.tests.scenario.'
          'test_image_type_scheduling')
EXPECTED_TESTS = {
    MODULE + '.ImageTypeSchedulingTest.'
    'test_native_qcow2_flavor_lands_on_native_host':
        'c605d13c-eed8-4887-bb90-efb126fdaa5a',
    MODULE + '.ImageTypeSchedulingTest.'
    'test_unsupported_disk_format_no_valid_host':
        '279db73e-ab67-43d0-93c0-32038223a973',
    MODULE + '.ImageTypeResizeTest.test_resize_keeps_native_requirement':
        'b67ce5a3-3c6d-4e60-8e33-4a75b41afc1a',
}


def _plugin_extension():
    manager = plugins.TempestTestPluginManager()
    found = {ext.name: ext for ext in manager.ext_plugins}
    assert 'nova_imgtype' in found, (
        'tempest does not find the plugin: is the package installed? '
        '(found: %s)' % sorted(found))
    return manager, found['nova_imgtype']


def _tests(suite):
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from _tests(item)
        else:
            yield item


def _run_python(code, cwd):
    """Run ``code`` with the venv's Python in ``cwd``, where tempest finds
    its tempest.conf and writes its log. Tempest's CONF is oslo.config's
    global one, which Nova's options live in: never load it in-process."""
    env = dict(os.environ, TEMPEST_CONFIG_DIR=str(cwd),
               TEMPEST_CONFIG='tempest.conf')
    return subprocess.run(
        [sys.executable, '-c', textwrap.dedent(code)], cwd=cwd, env=env,
        capture_output=True, text=True, timeout=300)


# -- the plugin --------------------------------------------------------------

def test_tempest_finds_the_plugin_through_its_entry_point():
    _manager, ext = _plugin_extension()
    assert ext.entry_point_target == (
        'nova_imgtype_tempest_plugin.plugin:NovaImgtypeTempestPlugin')
    assert isinstance(ext.obj, imgtype_plugin.NovaImgtypeTempestPlugin)
    assert isinstance(ext.obj, plugins.TempestPlugin)


def test_options_register_on_a_fresh_config():
    _manager, ext = _plugin_extension()
    conf = cfg.ConfigOpts()
    ext.obj.register_opts(conf)
    conf([], project='tempest')

    assert conf['imgtype-feature-enabled'].image_type_scheduling is False
    assert conf.imgtype.unsupported_disk_format == 'vhdx'
    assert conf.imgtype.native_qcow2_hosts == []
    assert conf.imgtype.qcow2_image_file is None
    assert conf.imgtype.unsupported_image_file is None
    assert conf.imgtype.qemu_img == 'qemu-img'

    listed = {group: {opt.name for opt in opts}
              for group, opts in ext.obj.get_opt_lists()}
    assert listed == {
        'imgtype': {'native_qcow2_hosts', 'qcow2_image_file',
                    'unsupported_disk_format', 'unsupported_image_file',
                    'qemu_img'},
        'imgtype-feature-enabled': {'image_type_scheduling'},
    }
    # what tempest's sample config generator lists
    assert set(dict(ext.obj.get_opt_lists())) <= {
        group for group, _ in plugins.TempestTestPluginManager()
        .get_plugin_options_list()}


def test_tempest_config_reads_the_plugin_options(tmp_path):
    """Tempest's own configuration loading, with a tempest.conf setting
    our options: the groups are CONF.imgtype and
    CONF.imgtype_feature_enabled."""
    (tmp_path / 'tempest.conf').write_text(textwrap.dedent("""\
        [imgtype-feature-enabled]
        image_type_scheduling = True

        [imgtype]
        unsupported_disk_format = ploop
        native_qcow2_hosts = host-a, host-b
        """))
    result = _run_python("""
        import json
        from tempest import config
        conf = config.CONF
        print('RESULT', json.dumps([
            conf.imgtype_feature_enabled.image_type_scheduling,
            conf.imgtype.unsupported_disk_format,
            conf.imgtype.native_qcow2_hosts]))
        """, tmp_path)
    assert result.returncode == 0, result.stderr
    # tempest logs to stdout too
    [line] = [line for line in result.stdout.splitlines()
              if line.startswith('RESULT ')]
    assert json.loads(line[len('RESULT '):]) == [
        True, 'ploop', ['host-a', 'host-b']]


def test_plugin_tests_load_with_unittest_discovery():
    manager, ext = _plugin_extension()
    test_dir, top_level_dir = manager.get_plugin_load_tests_tuple()[
        'nova_imgtype']
    assert (test_dir, top_level_dir) == ext.obj.load_tests()
    assert os.path.isdir(test_dir)
    assert os.path.isdir(os.path.join(top_level_dir,
                                      'nova_imgtype_tempest_plugin'))

    loader = unittest.TestLoader()
    suite = loader.discover(test_dir, top_level_dir=top_level_dir)
    assert loader.errors == []
    tests = list(_tests(suite))
    # _FailedTest: a module that did not import
    failed = [t.id() for t in tests
              if type(t).__name__ in ('_FailedTest', 'ModuleImportFailure')]
    assert failed == []

    # tempest ids carry their attributes: name[id-<uuid>,...]
    found = {}
    for test in tests:
        name, attrs = re.fullmatch(r'([^\[]+)\[(.*)\]', test.id()).groups()
        found[name] = attrs.split(',')
    assert set(found) == set(EXPECTED_TESTS)
    for name, uuid in EXPECTED_TESTS.items():
        assert 'id-' + uuid in found[name]

    # Loading the tests did not load tempest's configuration (oslo.config's
    # global CONF, Nova's too): the scenarios read CONF only when they run.
    assert tempest_config.CONF._config is None


def test_idempotent_ids_are_unique():
    assert len(set(EXPECTED_TESTS.values())) == len(EXPECTED_TESTS)


def test_scenarios_ask_for_what_the_plugin_provides():
    """The scenario's literals are the plugin's own names."""
    scenario = test_image_type_scheduling
    assert scenario.NATIVE_EXTRA_SPEC == request_filters.NATIVE_EXTRA_SPEC
    assert scenario.NATIVE_QCOW2_TRAIT == traits.native_trait('qcow2')


def test_tempest_list_plugins_lists_it(tmp_path):
    result = subprocess.run(
        [str(VENV_BIN / 'tempest'), 'list-plugins'], cwd=tmp_path,
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert re.search(
        r'\|\s*nova_imgtype\s*\|\s*'
        r'nova_imgtype_tempest_plugin\.plugin:NovaImgtypeTempestPlugin\s*\|',
        result.stdout), result.stdout


# -- the Zuul job (the rest: tests/unit/test_zuul_job.py) --------------------

def _zuul():
    with open(ROOT / '.zuul.yaml') as f:
        return yaml.safe_load(f)


def _job():
    jobs = [item['job'] for item in _zuul() if 'job' in item]
    [job] = [j for j in jobs if j['name'] == JOB]
    return job


def test_zuul_yaml_parses_and_runs_the_job_in_check_and_gate():
    [project] = [item['project'] for item in _zuul() if 'project' in item]
    for pipeline in ('check', 'gate'):
        assert JOB in project[pipeline]['jobs']


def test_job_installs_and_runs_the_plugin():
    job = _job()
    assert job['parent'] in ('tempest-multinode-full-py3',
                             'devstack-multinode')
    required = job['required-projects']
    for project in ('openstack/nova', 'openstack/placement',
                    'openstack/tempest'):
        assert project in required
    assert any(p.endswith('/nova-imgtype') for p in required)
    variables = job['vars']
    # The plugin's own distribution, pip-installed into tempest's venv by
    # devstack from TEMPEST_PLUGINS (a directory of this repository).
    assert 'tempest_plugins' not in variables
    plugin_path = variables['devstack_localrc']['TEMPEST_PLUGINS']
    assert plugin_path.startswith('/opt/stack/nova-imgtype/')
    plugin_dir = ROOT / plugin_path[len('/opt/stack/nova-imgtype/'):]
    assert (plugin_dir / 'setup.cfg').is_file()
    assert 'tempest.test_plugins' in (plugin_dir / 'setup.cfg').read_text()
    assert 'nova-imgtype' in variables['devstack_plugins']
    regex = re.compile(variables['tempest_test_regex'])
    for test_id in EXPECTED_TESTS:
        assert regex.search(test_id)
    assert not regex.search('tempest.api.compute.servers.test_novnc')
    assert (ROOT / 'devstack' / 'plugin.sh').is_file()
    assert 'define_plugin nova-imgtype' in (
        ROOT / 'devstack' / 'settings').read_text()


def test_the_plugin_imports_neither_nova_nor_nova_imgtype():
    """It runs in tempest's venv, which has no Nova (its own distribution,
    tests/unit/test_wheel.py)."""
    import ast
    package = ROOT / 'nova-imgtype-tempest-plugin' / (
        'nova_imgtype_tempest_plugin')
    modules = sorted(package.rglob('*.py'))
    assert len(modules) >= 4
    imported = set()
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split('.')[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split('.')[0])
    assert 'tempest' in imported
    assert not imported & {'nova', 'nova_imgtype', 'nova_imgtype_testing'}
