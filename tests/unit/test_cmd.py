"""nova-imgtype check."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from nova_imgtype.cmd import manage

#: The source tree, first on the console scripts' path: they run this code,
#: not the copy installed in the virtualenv when it was last built.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def _run(args, **kwargs):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [ROOT, os.environ.get('PYTHONPATH')])))
    return subprocess.run(args, capture_output=True, text=True, timeout=120,
                          env=env, **kwargs)


def _script(name, *args):
    """The console script ``name`` run as the operator runs it."""
    return _run([os.path.join(os.path.dirname(sys.executable), name),
                 *args])


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


def test_check_cli_prints_only_the_result(tmp_path):
    """``nova-imgtype check``, the console script: the table and nothing on
    stderr (neither eventlet's deprecation nor Nova's about it)."""
    path = _conf(tmp_path, '''
        [libvirt]
        images_type = raw
    ''')
    proc = _script('nova-imgtype', 'check', '--config-file', path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr == ''
    assert '\nqcow2 ' in proc.stdout


def test_status_upgrade_check_cli(tmp_path):
    """``nova-imgtype-status upgrade check``, the console script:
    with no placement to ask, the traits check fails saying so, and a bad
    mapping is named by the options check (exit code 2: failure)."""
    path = _conf(tmp_path, '''
        [libvirt]
        images_type_mapping = qcow2:lvm
    ''')
    proc = _script('nova-imgtype-status', '--config-file', path, 'upgrade',
                   'check')
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert 'eventlet' not in proc.stderr.lower()
    out = ' '.join(proc.stdout.replace('|', ' ').split())
    assert 'Check: Image type traits Result: Failure' in out
    assert 'Could not ask placement' in out
    assert 'Check: nova-imgtype options Result: Failure' in out
    assert "'qcow2:lvm'" in out


#: Config files that cannot be read or parsed: (content, what the error
#: says); None: no such file.
MALFORMED = {
    'missing': (None, 'not found'),
    'directory': ('directory', 'Is a directory'),
    'utf8-bom': (b'\xef\xbb\xbf[libvirt]\nimages_type = raw\n',
                 'byte order mark'),
    'invalid-utf8': (b'[libvirt]\nimages_type = r\xc3\x28w\n',
                     'not utf-8 text'),
    'latin1': ('[DEFAULT]\n# caf\xe9\n[libvirt]\nimages_type = raw\n'
               .encode('latin-1'), 'not utf-8 text'),
    'nul-bytes': (b'\0' * 4096, 'line 1: '),
    'long-line': (b'[DEFAULT]\n' + b'x' * 100000 + b'\n', 'line 2: '),
    'section-header': (b'[libvirt \nimages_type = raw\n',
                       'line 1: Invalid section'),
    'no-section': (b'images_type = raw\n[libvirt]\n', 'Section must be'),
}

COMMANDS = {
    'check': ('nova-imgtype', 'check', '--config-file', '{}'),
    'status': ('nova-imgtype-status', '--config-file', '{}', 'upgrade',
               'check'),
}


@pytest.mark.parametrize('command', COMMANDS)
@pytest.mark.parametrize('case', MALFORMED)
def test_malformed_config_file_is_one_error_line(tmp_path, command, case):
    """Both console scripts: a config file that cannot be read or parsed is
    exit code 2 and one line naming the file and what is wrong; no
    traceback, nothing about eventlet."""
    content, what = MALFORMED[case]
    path = tmp_path / 'nova.conf'
    if content == 'directory':
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    script, *args = COMMANDS[command]
    proc = _script(script, *(a.format(path) for a in args))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output
    assert proc.stdout == ''
    assert proc.stderr.startswith('ERROR: %s: ' % path), output
    assert proc.stderr.count('\n') == 1 and proc.stderr.endswith('\n')
    assert what in proc.stderr
    for word in ('Traceback', 'eventlet', 'deprecat'):
        assert word.lower() not in output.lower()


def test_import_parses_no_config_file(tmp_path):
    """The commands parse the config in main(), not when imported; and the
    manage command imports nothing of Nova before it knows it runs the demo
    (which patches eventlet first)."""
    broken = tmp_path / 'nova.conf'
    broken.write_bytes(b'[libvirt\n')
    proc = _run([sys.executable, '-c', textwrap.dedent('''
        import sys
        sys.argv = ['nova-imgtype', 'check', '--config-file', %r]
        import nova_imgtype.cmd.manage
        print(sorted(m for m in sys.modules
                     if m.split('.')[0] in ('nova', 'eventlet')))
        import nova_imgtype.cmd.status
    ''' % str(broken))], cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == '[]\n'
    assert 'Traceback' not in proc.stderr
