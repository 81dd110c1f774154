"""The wheel holds what a compute, scheduler or API node runs: not the
test harness nor the demo (they are the source tree's,
``nova_imgtype_testing``), nor the tempest plugin (a distribution of its
own, ``nova-imgtype-tempest-plugin/``, whose wheel pulls in no Nova)."""

import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

#: Nothing of Nova is checked here: once a CI run, on the default release.
pytestmark = pytest.mark.release_independent


TEMPEST_PLUGIN = 'nova-imgtype-tempest-plugin'


def _wheel(tmp_path, subdir=''):
    """The wheel of the distribution in ``ROOT/subdir``, built from a copy
    (a build leaves build/ and *.egg-info behind): (file names, METADATA).
    """
    src = tmp_path / 'src'
    # With .git: pbr takes the version from it.
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        '.venv*', 'build', '*.egg-info', '__pycache__', 'results'))
    out = tmp_path / 'wheel'
    subprocess.run(
        [sys.executable, '-m', 'pip', 'wheel', '--no-deps', '--no-cache-dir',
         '--no-build-isolation', '--quiet', '--wheel-dir', str(out),
         str(src / subdir)], check=True, capture_output=True, cwd=tmp_path)
    [wheel] = out.glob('*.whl')
    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()
    [metadata] = [n for n in names if n.endswith('.dist-info/METADATA')]
    [entry_points] = [n for n in names
                      if n.endswith('.dist-info/entry_points.txt')]
    return (names, archive.read(metadata).decode(),
            archive.read(entry_points).decode())


def _requires(metadata):
    return {line.split(':', 1)[1].strip().split(' ')[0].split('>')[0]
            .split('<')[0].split('=')[0].lower()
            for line in metadata.splitlines()
            if line.startswith('Requires-Dist:')}


def test_the_wheel_holds_no_test_harness_demo_nor_tempest_plugin(tmp_path):
    names, _metadata, entry_points = _wheel(tmp_path)
    packages = {n.split('/')[0] for n in names}
    # What a node runs is there...
    assert 'nova_imgtype/virt/libvirt/driver.py' in names
    assert 'nova/virt/imgtype/__init__.py' in names
    # ...and nothing only the tests and the demo use.
    assert not [n for n in names if n.startswith(
        ('nova_imgtype/testing/', 'nova_imgtype/demo'))]
    assert 'nova_imgtype_testing' not in packages
    assert 'tests' not in packages and 'benchmarks' not in packages
    assert not [n for n in names if 'tempest' in n]
    assert 'tempest.test_plugins' not in entry_points


def test_the_tempest_plugin_wheel_holds_the_plugin_and_needs_no_nova(
        tmp_path):
    names, metadata, entry_points = _wheel(tmp_path, TEMPEST_PLUGIN)
    assert 'Name: nova-imgtype-tempest-plugin' in metadata.splitlines()
    packages = {n.split('/')[0] for n in names
                if not n.split('/')[0].endswith('.dist-info')}
    assert packages == {'nova_imgtype_tempest_plugin'}
    assert ('nova_imgtype_tempest_plugin/tests/scenario/'
            'test_image_type_scheduling.py') in names
    assert ('nova_imgtype = nova_imgtype_tempest_plugin.plugin:'
            'NovaImgtypeTempestPlugin') in entry_points
    requires = _requires(metadata)
    assert 'tempest' in requires
    assert not {r for r in requires if r.startswith('nova')}, requires


def test_the_sdist_holds_what_operators_and_packagers_need(tmp_path):
    """The license, the sample and demo configs, the devstack plugin, the
    release notes, the manual and bindep's list travel with the source
    (built as ``python -m build --sdist`` builds it: the PEP 517 backend,
    from a copy of the tree)."""
    import tarfile
    src = tmp_path / 'src'
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        '.venv*', 'build', '*.egg-info', '__pycache__', '.tox'))
    out = tmp_path / 'sdist'
    subprocess.run(
        [sys.executable, '-c', 'import sys; from pbr import '
         'build; build.build_sdist(sys.argv[1])', str(out)],
        check=True, capture_output=True, cwd=src)
    [sdist] = out.glob('nova_imgtype-*.tar.gz')
    with tarfile.open(sdist) as tar:
        names = {n.split('/', 1)[1] for n in tar.getnames() if '/' in n}
    for needed in ('LICENSE', 'bindep.txt', 'etc/nova-imgtype.conf.sample',
                   'etc/demo/nova-compute.conf', 'devstack/plugin.sh',
                   'devstack/settings', 'doc/source/index.rst',
                   'releasenotes/source/conf.py'):
        assert needed in names, needed
    assert [n for n in names if n.startswith('releasenotes/notes/')
            and n.endswith('.yaml')]


def test_the_license_is_declared_as_spdx_and_shipped(tmp_path):
    names, metadata, _entry_points = _wheel(tmp_path)
    lines = metadata.splitlines()
    assert ('License-Expression: Apache-2.0' in lines or
            'License: Apache-2.0' in lines), metadata[:2000]
    assert not [line for line in lines
                if line.startswith('Classifier: License ::')]
    assert [n for n in names if n.endswith('.dist-info/licenses/LICENSE')]


def _git(src, *args):
    subprocess.run(['git', '-C', str(src), '-c', 'user.name=t',
                    '-c', 'user.email=t@example.org', *args], check=True,
                   capture_output=True)


def test_the_version_comes_from_git_tags(tmp_path):
    """pbr, as OpenStack projects: a tagged commit is that version, the
    commits after it a development version of the next one."""
    src = tmp_path / 'src'
    subprocess.run(['git', 'clone', '-q', str(ROOT), str(src)], check=True)
    # The tree as it is (the clone has the last commit's).
    shutil.copytree(ROOT, src, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns(
                        '.git', '.venv*', 'build', '*.egg-info',
                        '__pycache__', 'results'))
    _git(src, 'add', '-A')
    _git(src, 'commit', '-q', '--allow-empty', '-m', 'the tree as it is')
    _git(src, 'tag', '-a', '-m', 'release', '7.3.0')

    def version():
        out = tmp_path / ('wheel%d' % len(list(tmp_path.iterdir())))
        subprocess.run(
            [sys.executable, '-m', 'pip', 'wheel', '--no-deps',
             '--no-cache-dir', '--no-build-isolation', '--quiet',
             '--wheel-dir', str(out), str(src)], check=True,
            capture_output=True, cwd=tmp_path)
        [wheel] = out.glob('*.whl')
        return wheel.name.split('-')[1]

    assert version() == '7.3.0'
    _git(src, 'commit', '-q', '--allow-empty', '-m', 'after the release')
    assert version() == '7.3.1.dev1'
