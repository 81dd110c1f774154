"""nova-imgtype check."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from nova_imgtype import cmd
from nova_imgtype.cmd import manage
from nova_imgtype.virt.libvirt import template_handlers

#: The source tree, first on the console scripts' path: they run this code,
#: not the copy installed in the virtualenv when it was last built.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def _run(args, timeout=120, **kwargs):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [ROOT, os.environ.get('PYTHONPATH')])))
    return subprocess.run(args, capture_output=True, text=True,
                          timeout=timeout, env=env, **kwargs)


def _script(name, *args, timeout=120):
    """The console script ``name`` run as the operator runs it."""
    return _run([os.path.join(os.path.dirname(sys.executable), name),
                 *args], timeout=timeout)


def _conf(tmp_path, body, driver='imgtype.LibvirtDriver'):
    """A nova.conf of ``body`` for a compute running ``driver`` (the
    plugin's, which ``check`` requires)."""
    path = tmp_path / 'nova.conf'
    path.write_text('[DEFAULT]\ncompute_driver = %s\n' % driver +
                    textwrap.dedent(body))
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
        assert '| %s ' % fmt in out


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
    assert '| qcow2 ' in proc.stdout


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
    # The installed Nova is one this nova-imgtype was made for.
    assert 'Check: Stock Nova hooks Result: Success' in out


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

#: Exit code of each command for a config file it cannot read: the status
#: command's is oslo.upgradecheck's for a check that could not run.
CONFIG_ERROR = {'check': 2, 'status': 255}


@pytest.mark.parametrize('command', COMMANDS)
@pytest.mark.parametrize('case', MALFORMED)
def test_malformed_config_file_is_one_error_line(tmp_path, command, case):
    """Both console scripts: a config file that cannot be read or parsed is
    one line naming the file and what is wrong, and exit code 2 (the
    status command: oslo.upgradecheck's 255, the checks did not run); no
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
    assert proc.returncode == CONFIG_ERROR[command], output
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


def _one_error_line(proc, code=2):
    """The single ``ERROR:`` line a console script printed, asserting it
    exited ``code`` with nothing else (no table, no traceback)."""
    output = proc.stdout + proc.stderr
    assert proc.returncode == code, output
    assert proc.stdout == '', output
    assert proc.stderr.startswith('ERROR: '), output
    assert proc.stderr.count('\n') == 1 and proc.stderr.endswith('\n'), output
    assert 'traceback' not in output.lower()
    return proc.stderr[len('ERROR: '):-1]


def _refusal(name):
    """What nova-compute gives as the reason it refuses to start with
    ``[image_cache]template_image_handler = name`` (the driver's loader)."""
    with pytest.raises(Exception) as e:
        template_handlers.load(name)
    return str(e.value)


def test_check_unknown_template_handler_refused_as_by_nova_compute(
        tmp_path, capsys):
    """A handler name nothing registers: nova-compute refuses to start, and
    so does the check, with nova-compute's reason."""
    path = _conf(tmp_path, '''
        [image_cache]
        template_image_handler = no-such-handler
    ''')
    assert manage.main(['check', '--config-file', path]) == 2
    err = capsys.readouterr().err
    reason = _refusal('no-such-handler')
    assert 'registered handlers: downloading, volume-based-linking' in reason
    assert err == 'ERROR: %s\n' % reason


def test_check_template_handler_that_cannot_load_refused(tmp_path, capsys,
                                                         monkeypatch):
    """A name registered but whose handler cannot be loaded: refused with
    the reason, as nova-compute does."""
    real = template_handlers.names
    monkeypatch.setattr(template_handlers, 'names',
                        lambda: [*real(), 'unloadable'])
    path = _conf(tmp_path, '''
        [image_cache]
        template_image_handler = unloadable
    ''')
    assert manage.main(['check', '--config-file', path]) == 2
    err = capsys.readouterr().err
    assert err == 'ERROR: %s\n' % _refusal('unloadable')
    assert 'is registered but could not be loaded' in err


@pytest.mark.parametrize('name', ['downloading', 'volume-based-linking'])
def test_check_registered_template_handler_passes(tmp_path, capsys, name):
    path = _conf(tmp_path, '''
        [image_cache]
        template_image_handler = %s
    ''' % name)
    assert manage.main(['check', '--config-file', path]) == 0, (
        capsys.readouterr().err)


def test_status_unknown_template_handler_fails_options_check(tmp_path):
    """``nova-imgtype-status upgrade check``: the options check fails with
    nova-compute's reason (exit code 2: failure)."""
    path = _conf(tmp_path, '''
        [image_cache]
        template_image_handler = no-such-handler
    ''')
    proc = _script('nova-imgtype-status', '--config-file', path, 'upgrade',
                   'check')
    assert proc.returncode == 2, proc.stdout + proc.stderr
    out = ' '.join(proc.stdout.replace('|', ' ').split())
    assert 'Check: nova-imgtype options Result: Failure' in out
    # The table wraps the details, at spaces and after hyphens.
    assert ''.join(_refusal('no-such-handler').split()) in ''.join(
        out.split())


#: Options whose values substitute each other for ever: (config, the
#: options the error names).
LOOPS = {
    'itself': ('[libvirt]\nimages_type = $images_type\n',
               ['[libvirt]images_type']),
    'two-options': ('[libvirt]\nimages_type = $images_volume_group\n'
                    'images_volume_group = ${images_type}\n',
                    ['[libvirt]images_type', '[libvirt]images_volume_group']),
}


@pytest.mark.parametrize('command', COMMANDS)
@pytest.mark.parametrize('case', LOOPS)
def test_substitution_loop_is_one_error_line(tmp_path, command, case):
    """An oslo.config ``$name`` substitution loop: nova-compute cannot read
    the option; both commands say which in one line, exit code 2."""
    body, named = LOOPS[case]
    path = _conf(tmp_path, body)
    script, *args = COMMANDS[command]
    error = _one_error_line(_script(script, *(a.format(path) for a in args)))
    assert 'substitution loop' in error
    for option in named:
        assert option in error


@pytest.mark.parametrize('command', COMMANDS)
@pytest.mark.parametrize('given', ['config-file', 'config-dir'])
def test_fifo_config_file_refused_at_once(tmp_path, command, given):
    """A FIFO (no writer) as a config file: oslo.config would wait for ever
    opening it; both commands refuse it at once, naming it."""
    fifo = tmp_path / 'nova.conf'
    os.mkfifo(fifo)
    script, *args = COMMANDS[command]
    if given == 'config-dir':
        args = [a.replace('--config-file', '--config-dir') for a in args]
        args = [str(tmp_path) if a == '{}' else a for a in args]
    try:
        proc = _script(script, *(a.format(fifo) for a in args), timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail('%s still waiting on the FIFO after 60s' % script)
    assert _one_error_line(proc, CONFIG_ERROR[command]) == (
        '%s: not a regular file (a FIFO)' % fifo)


def test_config_files_as_oslo_config_reads_them(tmp_path):
    """The files refused before oslo.config opens them are the ones it
    would open: each --config-file (else the defaults) and the *.conf files
    of each --config-dir."""
    (tmp_path / 'b.conf').write_text('')
    (tmp_path / 'a.conf').write_text('')
    (tmp_path / 'notes.txt').write_text('')
    assert cmd.config_files(
        ['--config-file', 'x.conf', 'check', '--config-dir=%s' % tmp_path],
        project='no-such-project') == [
            os.path.abspath('x.conf'), str(tmp_path / 'a.conf'),
            str(tmp_path / 'b.conf')]
    assert cmd.config_files([], project='no-such-project',
                            default_config_files=['y.conf']) == [
        os.path.abspath('y.conf')]


def test_status_fails_on_a_nova_whose_code_the_hooks_do_not_fit(
        monkeypatch):
    """After a Nova upgrade, before nova-compute restarts on it: a hook
    the new Nova's code no longer fits is a failure naming it."""
    from oslo_upgradecheck import upgradecheck

    from nova_imgtype import stock
    from nova_imgtype.cmd import status

    monkeypatch.setattr(stock, 'broken', lambda: [
        "after_power_off: Stock Nova's nova.virt.libvirt.driver:"
        "LibvirtDriver.migrate_disk_and_power_off no longer matches ..."])
    result = status.Checks()._check_stock_hooks()
    assert result.code == upgradecheck.Code.FAILURE
    assert 'after_power_off' in result.details
    assert 'upgrade nova-imgtype' in result.details
    monkeypatch.setattr(stock, 'broken', lambda: [])
    assert status.Checks()._check_stock_hooks().code == (
        upgradecheck.Code.SUCCESS)


# -- as an operator expects of an OpenStack command --------------------------

def test_check_reads_the_config_nova_manage_reads_by_default(tmp_path):
    """No --config-file: the files oslo.config finds for Nova, as
    nova-manage and nova-status read them (~/.nova/nova.conf comes before
    /etc/nova/nova.conf)."""
    home = tmp_path / 'home'
    (home / '.nova').mkdir(parents=True)
    (home / '.nova' / 'nova.conf').write_text(
        '[DEFAULT]\ncompute_driver = imgtype.LibvirtDriver\n'
        '[libvirt]\nimages_type = lvm\nimages_volume_group = vg0\n')
    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), 'nova-imgtype'),
         'check', '--format', 'json'], capture_output=True, text=True,
        timeout=120, cwd=str(tmp_path),
        env=dict(os.environ, HOME=str(home), PYTHONPATH=ROOT))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)['images_type'] == 'lvm'


@pytest.mark.parametrize('driver', ['libvirt.LibvirtDriver', None])
def test_check_fails_when_nova_compute_runs_another_driver(
        tmp_path, capsys, driver):
    """Valid options, but nova-compute does not run the plugin: nothing it
    says would hold, and the check says why instead."""
    path = tmp_path / 'nova.conf'
    path.write_text(('[DEFAULT]\ncompute_driver = %s\n' % driver
                     if driver else '') + '[libvirt]\nimages_type = qcow2\n')
    assert manage.main(['check', '--config-file', str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ''
    assert captured.err == (
        "ERROR: [DEFAULT]compute_driver is %s, not nova-imgtype's driver "
        "(imgtype.LibvirtDriver): nova-compute does not use these "
        "options\n" % (driver or 'not set'))


def test_check_warns_of_a_misspelt_option_in_its_groups(tmp_path, capsys):
    """An option nobody registers in [libvirt], [image_cache] or
    [scheduler] is a warning (nova-compute ignores it without a word);
    other groups, whose options other libraries register when they load,
    are not guessed at."""
    path = _conf(tmp_path, '''
        [libvirt]
        images_type = qcow2
        images_type_maping = raw:lvm
        [image_cache]
        template_image_handlr = downloading
        [keystone_authtoken]
        anything = 1
    ''')
    assert manage.main(['check', '--config-file', path]) == 0
    captured = capsys.readouterr()
    assert '| qcow2 ' in captured.out
    assert captured.err.splitlines() == [
        'WARNING: %s is not an option of Nova or nova-imgtype (misspelt?): '
        'nova-compute ignores it' % option
        for option in ('[image_cache]template_image_handlr',
                       '[libvirt]images_type_maping')]


#: Values oslo.config cannot take: (config, the error's one line).
BAD_VALUES = {
    'choice': ('[libvirt]\nimages_type = bogus\n',
               "[libvirt]images_type in {}: Valid values are [raw, flat, "
               "qcow2, lvm, rbd, ploop, default], but found 'bogus'"),
    'boolean': ('[libvirt]\nuse_storage_pools = maybe\n',
                "[libvirt]use_storage_pools in {}: Unexpected boolean "
                "value 'maybe'"),
    'mapping': ('[libvirt]\nimages_type_mapping = raw:nope\n',
                "[libvirt]images_type_mapping in {}: Invalid "
                "[libvirt]images_type_mapping entry 'raw:nope': unknown "
                "backend 'nope'"),
}


@pytest.mark.parametrize('case', BAD_VALUES)
def test_a_bad_value_is_named_by_group_and_file(tmp_path, case):
    """One line naming [group]option and the file, not oslo.config's
    ``LocationInfo(...)`` repr; in the status command's table too."""
    body, line = BAD_VALUES[case]
    path = _conf(tmp_path, body)
    error = _one_error_line(_script('nova-imgtype', 'check',
                                    '--config-file', path))
    assert error.startswith(line.format(path)), error
    assert 'LocationInfo' not in error
    proc = _script('nova-imgtype-status', '--config-file', path, 'upgrade',
                   'check')
    assert proc.returncode == 2, proc.stdout + proc.stderr
    out = ''.join(proc.stdout.replace('|', ' ').split())
    assert ''.join(line.format(path).split()) in out
    assert 'LocationInfo' not in proc.stdout


@pytest.mark.parametrize('script', ['nova-imgtype', 'nova-imgtype-status'])
def test_version(script):
    from importlib import metadata
    proc = _script(script, '--version')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == metadata.version('nova-imgtype')


@pytest.mark.parametrize('command', COMMANDS)
def test_a_closed_pipe_is_no_traceback(tmp_path, command):
    """``nova-imgtype check --format json | head``: the reader is gone
    before the command writes (a pipe with no reader, as deterministic as
    it gets); the command stops quietly with the shell's SIGPIPE status."""
    path = _conf(tmp_path, '[libvirt]\nimages_type = qcow2\n')
    script, *args = COMMANDS[command]
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [os.path.join(os.path.dirname(sys.executable), script),
             *(a.format(path) for a in args)],
            stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120,
            env=dict(os.environ, PYTHONPATH=ROOT))
    finally:
        os.close(write_end)
    assert proc.returncode == 141, proc.stderr
    assert 'Traceback' not in proc.stderr
    assert 'BrokenPipe' not in proc.stderr
