"""A failed gate keeps its cloud's logs: the cloud's directory is removed
with it (``gate.cloud.down``), and a failure is diagnosed from them."""

from gate import __main__ as gate_main


def test_a_failed_gates_logs_are_kept_next_to_its_cloud(tmp_path):
    base = tmp_path / 'gate-abc'
    (base / 'logs').mkdir(parents=True)
    (base / 'logs' / 'compute1-nova-compute.log').write_text('ERROR here\n')
    kept = gate_main.keep_logs(str(base))
    assert kept == str(tmp_path / 'gate-abc-logs')
    assert (tmp_path / 'gate-abc-logs' / 'compute1-nova-compute.log'
            ).read_text() == 'ERROR here\n'


def test_a_cloud_without_logs_keeps_nothing(tmp_path):
    assert gate_main.keep_logs(str(tmp_path / 'gate-none')) is None
    assert list(tmp_path.iterdir()) == []
