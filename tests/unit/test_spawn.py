"""``spawn.execute``: processutils' contract, without forking this process."""

import os
import subprocess

import pytest
from oslo_concurrency import processutils

from nova_imgtype.virt.libvirt import spawn


def test_returns_the_decoded_output():
    assert spawn.execute('sh', '-c', 'echo out; echo err >&2') == (
        'out\n', 'err\n')


def test_a_failure_is_processutils_error_naming_command_status_output():
    with pytest.raises(processutils.ProcessExecutionError) as e:
        spawn.execute('sh', '-c', 'echo half; echo broken >&2; exit 3')
    assert e.value.exit_code == 3
    assert e.value.stdout == 'half\n' and e.value.stderr == 'broken\n'
    assert e.value.cmd == 'sh -c echo half; echo broken >&2; exit 3'


def test_passwords_in_the_command_are_masked_in_the_error():
    with pytest.raises(processutils.ProcessExecutionError) as e:
        spawn.execute('sh', '-c', 'exit 1', 'password=s3cret')
    assert 's3cret' not in e.value.cmd


def test_the_environment_is_the_one_given():
    out, _ = spawn.execute('sh', '-c', 'echo "$LC_ALL:$SPAWN_TEST"',
                           env_variables=dict(os.environ, LC_ALL='C'))
    assert out == 'C:\n'


def test_a_missing_program_raises_oserror():
    with pytest.raises(OSError):
        spawn.execute('/nonexistent/qemu-img', 'create')


def test_the_child_gets_sigpipe_back_and_no_stdin():
    # What processutils' preexec_fn gives a child, given here without one:
    # SIGPIPE at its default (Python ignores it, and a child ignoring it
    # would see EPIPE and exit 1 instead of dying of it: 128 + 13), and
    # nothing to read on stdin (cat returns at once).
    _, err = spawn.execute(
        'sh', '-c', '(yes; echo "yes:$?" >&2) | head -c1 >/dev/null; cat')
    assert err.strip().splitlines()[-1] == 'yes:141', err


def test_no_python_code_runs_in_the_child(monkeypatch):
    # CPython vfork()s only when no preexec_fn is given: the 14-20 ms of a
    # fork() of nova-compute that processutils pays.
    seen = {}
    real_popen = subprocess.Popen.__init__

    def spying(self, *args, **kwargs):
        seen.update(kwargs)
        return real_popen(self, *args, **kwargs)

    monkeypatch.setattr(subprocess.Popen, '__init__', spying)
    spawn.execute('true')
    assert seen.get('preexec_fn') is None and seen['close_fds'] is True
    assert seen.get('restore_signals', True) is True
