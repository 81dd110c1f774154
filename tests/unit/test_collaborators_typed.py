"""The driver's collaborators are typed: a misspelt attribute in one of
them fails ``make pep8`` (mypy), where the same typo in a subclass of
stock's driver (which mypy sees as Any) would pass."""

import pathlib
import shutil

import pytest
from mypy import api as mypy_api

ROOT = pathlib.Path(__file__).resolve().parents[2]

#: Nothing of Nova is checked here: once a CI run, on the default release.
pytestmark = pytest.mark.release_independent

#: Collaborator modules, and a line of each to misspell.
TYPOS = {
    'instance_disks.py': ('self._resolver.decision_for(instance).pool',
                          'self._resolvr.decison_for(instance).pool'),
    'instance_record.py': ('self._resolver.decide(disk_format)',
                           'self._resolver.decdie(disk_format)'),
    'host_traits.py': ('backends.host_support_error(name, self._conf)',
                       'backends.host_support_error(name, self._cnof)'),
    'template_cache.py': ('self._resolver.decision_for(instance)',
                          'self._resolver.decision_fro(instance)'),
    'live_moves.py': ('self._resolver.arrival(decision)',
                      'self._resolver.arival(decision)'),
    'pool_snapshots.py': ('stock.suspend_guest_for_snapshot(',
                          'stock.suspend_guest_for_snapshto('),
    'cold_move.py': ('self._stock.cleanup_remote_migration(',
                     'self._stock.cleanup_remote_migraton('),
    'cold_moves.py': ('self._disks.move_to_pools(instance)',
                      'self._disks.move_to_pool(instance)'),
}


@pytest.mark.parametrize('module', sorted(TYPOS))
def test_a_typo_in_a_collaborator_fails_mypy(tmp_path, module):
    shutil.copytree(ROOT / 'nova_imgtype', tmp_path / 'nova_imgtype',
                    ignore=shutil.ignore_patterns('__pycache__'))
    shutil.copy(ROOT / 'pyproject.toml', tmp_path / 'pyproject.toml')
    path = tmp_path / 'nova_imgtype' / 'virt' / 'libvirt' / module
    right, wrong = TYPOS[module]
    source = path.read_text()
    assert right in source, 'the line to misspell moved: %s' % right
    args = ['--config-file', str(tmp_path / 'pyproject.toml'),
            '--cache-dir', str(tmp_path / '.mypy_cache'), str(path)]
    out, _err, status = mypy_api.run(args)
    assert status == 0, out         # as it is: clean
    path.write_text(source.replace(right, wrong, 1))
    out, _err, status = mypy_api.run(args)
    assert status == 1
    assert module in out and 'has no attribute' in out, out
