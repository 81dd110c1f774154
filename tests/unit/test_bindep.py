"""bindep.txt's profiles: what a node needs, what make demo installs (no
database, message queue or Ceph), what the tests need; Debian and RPM
names."""

import pathlib
import re
import subprocess

import pytest
from bindep import depends

ROOT = pathlib.Path(__file__).resolve().parents[2]

#: Nothing of Nova is checked here: once a CI run, on the default release.
pytestmark = pytest.mark.release_independent

SERVICES = re.compile(r'mariadb|mysql|postgres|rabbitmq|ceph|rados|rbd')


def _packages(platform, *profiles):
    rules = depends.Depends((ROOT / 'bindep.txt').read_text()).active_rules(
        ['platform:%s' % platform, *profiles])
    return {rule[0] for rule in rules}


def test_a_node_needs_qemu_img_on_both_families():
    assert _packages('dpkg') == {'qemu-utils'}
    assert _packages('rpm') == {'qemu-img'}
    # Ceph's client side only where rbd is used.
    assert {'ceph-common', 'python3-rbd', 'python3-rados'} <= _packages(
        'dpkg', 'rbd')
    assert {'ceph-common', 'python3-rbd', 'python3-rados'} <= _packages(
        'rpm', 'rbd')


def test_the_demo_installs_no_database_queue_nor_ceph():
    for platform in ('dpkg', 'rpm'):
        demo = _packages(platform, 'demo')
        assert {p for p in demo if SERVICES.search(p)} == set(), platform
    assert {'libvirt-daemon', 'libvirt-dev', 'qemu-utils',
            'dosfstools'} <= _packages('dpkg', 'demo')


def test_the_tests_need_what_the_demo_does_and_more():
    demo, test = _packages('dpkg', 'demo'), _packages('dpkg', 'test')
    assert demo < test
    assert {'mariadb-server', 'rabbitmq-server', 'ceph-mon',
            'python3-rbd'} <= test


def test_make_demo_installs_the_demo_profile_only(tmp_path):
    """What make would run for the demo on a machine with nothing set up
    (a dry run: make -n)."""
    out = subprocess.run(
        ['make', '-n', '-B', 'demo', 'VENV=%s' % (tmp_path / 'venv')],
        cwd=ROOT, capture_output=True, text=True, check=True).stdout
    installs = re.findall(r'install-system-packages\.sh \S+(.*)', out)
    assert [i.strip() for i in installs] == ['demo']
    assert 'link-ceph-bindings' not in out
