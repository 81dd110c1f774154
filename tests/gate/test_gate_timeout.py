"""A gate past its time is stopped as Ctrl-C stops it: its cloud taken
down, not left running under the tests that follow."""

import sys

import pytest

from tests.gate import test_real_cloud


def test_a_gate_past_its_time_is_stopped_as_ctrl_c_stops_it(tmp_path):
    # The gate takes its cloud down on SIGTERM; a SIGKILL would leave it.
    stopped = tmp_path / 'taken-down'
    script = (
        'import signal, sys, time\n'
        'def down(*_):\n'
        '    open(%r, "w").write("down")\n'
        '    print("cloud down"); sys.exit(1)\n'
        'signal.signal(signal.SIGTERM, down)\n'
        'print("cloud up", flush=True)\n'
        'time.sleep(60)\n' % str(stopped))
    with pytest.raises(pytest.fail.Exception) as e:
        test_real_cloud.run_stopping([sys.executable, '-c', script], 2, 20)
    assert stopped.read_text() == 'down'
    assert 'more than 2 s' in str(e.value)
    assert 'cloud up' in str(e.value) and 'cloud down' in str(e.value)
