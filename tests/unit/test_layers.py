"""The house is walked one way: driver -> collaborators -> resolver ->
backend -> storage -> libvirt. A module of a lower layer imports none of
a higher one (the backend asks the record through a function the driver
hands it, not the resolver)."""

import ast
import pathlib

import pytest

import nova_imgtype

LIBVIRT = pathlib.Path(nova_imgtype.__file__).parent / 'virt' / 'libvirt'
PREFIX = 'nova_imgtype.virt.libvirt.'

#: Above the backend: what decides and what asks.
UPPER = {'driver', 'resolver', 'instance_record', 'instance_disks',
         'template_cache', 'host_traits', 'live_moves', 'pool_snapshots',
         'cold_moves', 'cold_move'}

#: The backend and below it.
LOWER = ['imagebackend', 'backends', 'storage', 'storage_rbd', 'pools',
         'pool_specs', 'pool_dir', 'flat', 'qcow2', 'sizes', 'sparse',
         'spawn', 'remote_storage', 'live_migration', 'config_drive',
         'imagecache', 'mapping', 'ceph_cluster']


def _imports(module):
    tree = ast.parse((LIBVIRT / (module + '.py')).read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == PREFIX.rstrip('.'):
                found.update(a.name for a in node.names)
            elif node.module.startswith(PREFIX):
                found.add(node.module[len(PREFIX):].split('.')[0])
        elif isinstance(node, ast.Import):
            found.update(a.name[len(PREFIX):].split('.')[0]
                         for a in node.names if a.name.startswith(PREFIX))
    return found


@pytest.mark.parametrize('module', LOWER)
def test_a_lower_layer_imports_nothing_above_it(module):
    assert _imports(module) & UPPER == set()


def test_the_check_reads_imports():
    assert 'resolver' in _imports('live_moves')

