"""nova-imgtype check."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from nova_imgtype.cmd import manage


def _conf(tmp_path, body):
    path = tmp_path / 'nova.conf'
    path.write_text(textwrap.dedent(body))
    return str(path)


def test_check_table_for_every_glance_format(tmp_path, capsys):
    path = _conf(tmp_path, '''
        [libvirt]
        images_type = rbd
        images_type_mapping = qcow2:qcow2
    ''')
    assert manage.main(['check', '--config-file', path]) == 0
    out = capsys.readouterr().out
    for fmt in ('ami', 'ari', 'aki', 'vhd', 'vhdx', 'vmdk', 'raw', 'qcow2',
                'vdi', 'ploop', 'iso'):
        assert '\n%s ' % fmt in out


def test_check_json(tmp_path, capsys):
    path = _conf(tmp_path, '''
        [DEFAULT]
        force_raw_images = True
        [libvirt]
        images_type = rbd
        images_type_mapping = qcow2:qcow2
        [compute]
        image_type_exclude_list = iso
    ''')
    assert manage.main(['check', '--format', 'json',
                        '--config-file=%s' % path]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {r['disk_format']: r for r in data['formats']}
    assert rows['qcow2'] == {'disk_format': 'qcow2', 'backend': 'qcow2',
                             'source': 'mapping', 'storage': 'pools',
                             'converted': 'no',
                             'trait': 'COMPUTE_IMAGE_TYPE_QCOW2'}
    assert rows['vmdk']['backend'] == 'rbd'
    assert rows['vmdk']['storage'] == 'pools'     # use_storage_pools: True
    assert rows['vmdk']['converted'] == 'yes'
    assert rows['raw']['converted'] == 'no'
    assert rows['iso']['trait'] == '-'          # excluded by the operator
    assert rows['ploop']['trait'] == '-'        # not parallels


@pytest.mark.parametrize('value,named', [
    ('raw:lvm:x', "'raw:lvm:x'"),
    ('qcow2:raw', "'qcow2:raw'"),
    ('raw:lvm', 'images_volume_group'),
])
def test_check_invalid_exits_nonzero_naming_entry(tmp_path, capsys, value,
                                                  named):
    path = _conf(tmp_path, '''
        [libvirt]
        images_type_mapping = %s
    ''' % value)
    assert manage.main(['check', '--config-file', path]) == 2
    err = capsys.readouterr().err
    assert err.startswith('ERROR: ') and named in err


def test_hoist_global_opts():
    assert manage.hoist_global_opts(
        ['check', '--config-file', 'a', '--format', 'json',
         '--config-dir=d']) == ['--config-file', 'a', '--config-dir=d',
                                'check', '--format', 'json']


def test_status_upgrade_check_cli(tmp_path):
    """``nova-imgtype-status upgrade check``, the installed console script:
    with no placement to ask, the traits check fails saying so, and a bad
    mapping is named by the options check (exit code 2: failure)."""
    path = _conf(tmp_path, '''
        [libvirt]
        images_type_mapping = qcow2:lvm
    ''')
    script = os.path.join(os.path.dirname(sys.executable),
                          'nova-imgtype-status')
    proc = subprocess.run([script, '--config-file', path, 'upgrade',
                           'check'], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    out = ' '.join(proc.stdout.replace('|', ' ').split())
    assert 'Check: Image type traits Result: Failure' in out
    assert 'Could not ask placement' in out
    assert 'Check: nova-imgtype options Result: Failure' in out
    assert "'qcow2:lvm'" in out
