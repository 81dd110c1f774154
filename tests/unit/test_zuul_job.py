"""The Zuul job sets what its roles read, and runs what ``make gate`` runs.

The roles' documented variables come from copies of their READMEs in
``tests/unit/fixtures`` (tempest's ``roles/run-tempest`` and devstack's
``roles/write-devstack-local-conf``; the first line of each says from
which commit). The selection is ``gate/tempest-selection.txt``, which
``tools/zuul-selection`` turns into the job's ``tempest_test_regex``.
"""

import importlib.util
import pathlib
import re
import unittest
from importlib.machinery import SourceFileLoader

import nova.conf
import pytest
import yaml

from gate import tempest_conf
from gate.cloud import layout
from nova_imgtype.virt.libvirt import resolver as resolver_mod

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = pathlib.Path(__file__).resolve().parent / 'fixtures'
JOB = 'nova-imgtype-tempest-multinode'
SELECTION = ROOT / 'gate' / 'tempest-selection.txt'
PLUGIN_TESTS = 'nova_imgtype_tempest_plugin.tests'
#: The local.conf meta-sections stack.sh merges (merge_config_group).
LOCAL_CONF_PHASES = {'post-config', 'extra', 'post-extra', 'test-config'}
#: Linux's limit on one argument (MAX_ARG_STRLEN): the regex is one.
MAX_ARG_STRLEN = 131072


def _tool():
    loader = SourceFileLoader('zuul_selection',
                              str(ROOT / 'tools' / 'zuul-selection'))
    spec = importlib.util.spec_from_loader('zuul_selection', loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


zuul_selection = _tool()


def _job():
    with open(ROOT / '.zuul.yaml') as f:
        items = yaml.safe_load(f)
    [job] = [item['job'] for item in items
             if 'job' in item and item['job']['name'] == JOB]
    return job


def _rolevars(readme):
    """The top-level ``zuul:rolevar`` names of a role's README."""
    text = (FIXTURES / readme).read_text()
    assert text.startswith('.. Vendored from https://opendev.org/')
    return set(re.findall(r'^\.\. zuul:rolevar:: ([A-Za-z_]\w*)\s*$',
                          text, re.MULTILINE))


RUN_TEMPEST = _rolevars('run-tempest-README.rst')
WRITE_LOCAL_CONF = _rolevars('write-devstack-local-conf-README.rst')


def _job_variables(job):
    """Every variable the job sets, and where."""
    found = {name: 'vars' for name in job['vars']}
    for group, variables in job.get('group-vars', {}).items():
        for name in variables:
            found.setdefault(name, 'group-vars %s' % group)
    return found


def _regex():
    return _job()['vars']['tempest_test_regex']


def _selection_ids():
    return tempest_conf.parse_selection(SELECTION.read_text())


def _settings_variables():
    text = (ROOT / 'devstack' / 'settings').read_text()
    return set(re.findall(r'^(NOVA_IMGTYPE_\w+)=', text, re.MULTILINE))


# -- the roles read every variable the job sets -----------------------------

def test_fixtures_are_the_roles_readmes():
    assert {'tempest_test_regex', 'tempest_exclude_regex',
            'tempest_test_exclude_list', 'tempest_concurrency',
            'tox_envlist'} <= RUN_TEMPEST
    assert {'devstack_localrc', 'devstack_local_conf', 'devstack_plugins',
            'tempest_plugins'} <= WRITE_LOCAL_CONF


def test_every_tempest_variable_is_one_run_tempest_reads():
    """run-tempest reads no include list (tempest_test_include_list was
    ignored without a word): every tempest_* variable is one of its
    documented ones, except tempest_plugins, which is devstack's
    write-devstack-local-conf role's (TEMPEST_PLUGINS)."""
    for name, where in _job_variables(_job()).items():
        if not name.startswith('tempest_'):
            continue
        if name == 'tempest_plugins':
            assert name in WRITE_LOCAL_CONF
        else:
            assert name in RUN_TEMPEST, (name, where)
    assert 'tempest_test_include_list' not in RUN_TEMPEST


def test_every_variable_is_documented_by_a_role_of_the_job():
    for name, where in _job_variables(_job()).items():
        assert name in RUN_TEMPEST | WRITE_LOCAL_CONF, (name, where)


def test_tox_env_is_one_the_regex_works_with():
    """The README: tempest_test_regex "works only when used with some
    specific tox environments ('all', 'all-site-packages')"."""
    text = (FIXTURES / 'run-tempest-README.rst').read_text()
    match = re.search(r'tempest_test_regex\n.*?It works only when used with '
                      r'some specific tox environments\s*\(([^)]*)\)',
                      text, re.DOTALL)
    envs = set(re.findall(r"'([^']+)'", match.group(1)))
    assert envs == {'all', 'all-site-packages'}
    assert _job()['vars']['tox_envlist'] in envs


def test_local_conf_phases_and_localrc_variables_are_devstacks():
    job = _job()
    for variables in [job['vars']] + list(job['group-vars'].values()):
        assert set(variables.get('devstack_local_conf', {})) <= (
            LOCAL_CONF_PHASES)
        for name in variables.get('devstack_localrc', {}):
            if name.startswith('NOVA_IMGTYPE_'):
                assert name in _settings_variables(), name


# -- the selection: make gate's ---------------------------------------------

def test_regex_is_built_from_the_selection_file():
    assert _regex() == zuul_selection.build_regex(
        zuul_selection.selection_ids(str(SELECTION)))
    assert zuul_selection.main(['--check']) == 0


def test_regex_passes_through_the_role_as_one_argument():
    regex = _regex()
    re.compile(regex)
    # Ansible would template it; tox and tempest get one argv element.
    assert not re.search(r'\{\{|\{%|\{#', regex)
    assert len(regex.encode()) < MAX_ARG_STRLEN
    assert '\n' not in regex and "'" not in regex


def _selected(name, ids):
    """What make gate's include list selects (gate.tempest_conf's
    anchored regexes, ``^<id>(\\.|\\[|$)``)."""
    return any(name == i or name.startswith(i + '.')
               or name.startswith(i + '[') for i in ids)


def _names(ids):
    """Selected ids, the tests under them, and their near misses."""
    text = SELECTION.read_text()
    names = set(re.findall(r'[A-Za-z_]\w*(?:\.\w+)+', text))
    for test_id in ids:
        parent = test_id.rpartition('.')[0]
        names |= {
            test_id,
            test_id + '[id-0e4f2a4c-0000-4000-8000-000000000000,smoke]',
            test_id + '.test_under_it',
            test_id + '_longer',
            test_id + '_longer[id-0e4f2a4c,negative]',
            test_id + 'X.test_a',
            'x' + test_id,
            'prefix.' + test_id,
            parent,
            parent + '.test_not_listed',
            parent + '.test_not_listed[id-1]',
            test_id.replace('.', '_', 1),
        }
    return names


def test_regex_selects_exactly_the_selection_and_the_plugins_tests():
    ids = _selection_ids() + [PLUGIN_TESTS]
    regex = re.compile(_regex())
    names = _names(ids)
    assert len(names) > 8 * len(ids)
    wrong = sorted(n for n in names
                   if bool(regex.search(n)) != _selected(n, ids))
    assert not wrong
    for test_id in _selection_ids():
        assert regex.search(test_id + '[id-1]')


def test_regex_selects_the_plugins_scenarios():
    # Where tempest finds them: the plugin as installed (make venv).
    from nova_imgtype_tempest_plugin import plugin
    test_dir, top_level_dir = plugin.NovaImgtypeTempestPlugin().load_tests()
    suite = unittest.defaultTestLoader.discover(
        test_dir, top_level_dir=top_level_dir)
    tests = []

    def walk(s):
        for t in s:
            if isinstance(t, unittest.TestSuite):
                walk(t)
            else:
                tests.append(t.id())
    walk(suite)
    assert tests
    regex = re.compile(_regex())
    for test_id in tests:
        assert regex.search(test_id), test_id
    assert not regex.search('nova_imgtype.tests.unit.test_x')
    assert not regex.search('tempest.api.compute.servers.test_novnc')
    assert not regex.search('tempest.api.compute.volumes.test_volumes_list')


def test_tool_builds_a_tree_of_the_ids():
    regex = zuul_selection.build_regex([
        'a.b.C.test_one', 'a.b.C.test_one_more', 'a.b.D', 'a.b.D.test_x',
        'a.e'])
    assert regex == (r'^(?:a\.(?:b\.(?:C\.(?:test_one|test_one_more)|D)|e))'
                     r'(?:\.|\[|$)')
    compiled = re.compile(regex)
    assert compiled.search('a.b.C.test_one[id-1]')
    assert not compiled.search('a.b.C.test_one_other')
    assert compiled.search('a.b.D.test_y')
    assert compiled.search('a.e.F.test_z')
    with pytest.raises(ValueError):
        zuul_selection.build_regex(['a.b(c)'])


def test_tool_writes_and_checks_the_job(tmp_path):
    zuul = tmp_path / 'zuul.yaml'
    zuul.write_text("- job:\n    vars:\n      tempest_test_regex: old\n")
    selection = tmp_path / 'selection.txt'
    selection.write_text('# comment\ntempest.api.a.B.test_c  # why\n')
    args = ['--zuul', str(zuul), '--selection', str(selection)]
    assert zuul_selection.main(args + ['--check']) == 1
    assert zuul_selection.main(args + ['--write']) == 0
    assert zuul_selection.main(args + ['--check']) == 0
    written = yaml.safe_load(zuul.read_text())[0]['job']['vars']
    assert written['tempest_test_regex'] == (
        r'^(?:nova_imgtype_tempest_plugin\.tests|tempest\.api\.a\.B\.test_c)'
        r'(?:\.|\[|$)')


def test_tool_include_list_is_make_gates(capsys):
    assert zuul_selection.main(['--include-list']) == 0
    lines = capsys.readouterr().out.split()
    assert lines == tempest_conf.selection_regexes(
        _selection_ids() + [PLUGIN_TESTS])


# -- the computes: make gate's, through the plugin's variables --------------

def _node(job, node):
    """localrc and the libvirt options of nova-cpu.conf of a node."""
    variables = job['vars'] if node == 'controller' else (
        job['group-vars']['subnode'])
    localrc = variables['devstack_localrc']
    libvirt = variables['devstack_local_conf']['post-config'][
        '$NOVA_CPU_CONF']['libvirt']
    return localrc, libvirt


@pytest.mark.parametrize('node,index', [('controller', 0), ('subnode', 1)])
def test_job_computes_are_the_gates(node, index):
    """The controller's compute is make gate's compute1 and the subnode's
    compute2: backends, mapping and storage pools. The compute driver
    (imgtype.LibvirtDriver) is the plugin's doing on each node."""
    gate_compute = layout.COMPUTES[index]
    localrc, libvirt = _node(_job(), node)
    assert libvirt == {'images_type': gate_compute.images_type}
    assert localrc['NOVA_IMGTYPE_IMAGES_TYPE_MAPPING'] == gate_compute.mapping
    assert localrc['NOVA_IMGTYPE_USE_STORAGE_POOLS'] is gate_compute.pools
    plugin = (ROOT / 'devstack' / 'plugin.sh').read_text()
    assert ('iniset $NOVA_CONF DEFAULT compute_driver %s'
            % layout.PLUGIN_DRIVER) in plugin


@pytest.mark.parametrize('node', ['controller', 'subnode'])
def test_job_computes_report_what_the_scenarios_expect(conf, node):
    """Each compute's options, as the job sets them, through the driver's
    own resolver: only the controller uses qcow2 natively (so that landing
    there is the filter's doing), the subnode can still boot qcow2
    (converted), and neither supports the NoValidHost scenario's format."""
    job = _job()
    localrc, libvirt = _node(job, node)
    conf.config(group='libvirt', images_type=libvirt['images_type'],
                images_type_mapping=localrc[
                    'NOVA_IMGTYPE_IMAGES_TYPE_MAPPING'],
                use_storage_pools=localrc['NOVA_IMGTYPE_USE_STORAGE_POOLS'])
    resolver = resolver_mod.BackendResolver(nova.conf.CONF)
    resolver.check_host()
    assert 'qcow2' in resolver.supported_formats()
    assert ('qcow2' in resolver.native_formats()) is (node == 'controller')
    unsupported = job['vars']['devstack_localrc'][
        'NOVA_IMGTYPE_TEMPEST_UNSUPPORTED_DISK_FORMAT']
    assert unsupported == 'ploop'
    assert unsupported not in resolver.supported_formats()


def test_job_scheduler_and_tempest():
    """The scheduler filters by image type (and so the plugin's
    test-config enables the scenarios); tempest expects both computes."""
    variables = _job()['vars']
    assert variables['devstack_localrc'][
        'NOVA_IMGTYPE_FILTER_BY_IMAGE_TYPE'] is True
    tempest = variables['devstack_local_conf']['test-config'][
        '$TEMPEST_CONFIG']
    assert tempest['compute']['min_compute_nodes'] == 2
