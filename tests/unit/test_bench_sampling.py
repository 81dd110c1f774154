"""benchmarks.sampling: a fast figure gets enough runs for its median to
be more than the machine's noise; a slow one keeps its module's runs."""

from benchmarks import sampling


def test_a_figure_gets_its_modules_runs_first():
    assert sampling.more([], 3)
    assert sampling.more([10.0, 10.0], 3)
    assert not sampling.more([10.0, 10.0, 10.0], 3)


def test_a_fast_figure_gets_fast_runs():
    fast = [0.01] * 3
    assert sampling.more(fast, 3)
    assert not sampling.more([0.01] * sampling.FAST_RUNS, 3)
    # A module that gives more runs than FAST_RUNS keeps them.
    assert sampling.more([0.01] * sampling.FAST_RUNS, 15)


def test_fast_is_the_median_run():
    # One slow run among fast ones does not make the figure slow.
    times = [0.01, 0.01, sampling.FAST_S * 4]
    assert sampling.more(times, 3)
    assert not sampling.more([sampling.FAST_S] * 3, 3)


def test_each_timed_disk_creation_follows_a_settled_machine(monkeypatch):
    # The writeback of one run (a stock Flat copy writes the image's data)
    # falls before the next, untimed, never inside it.
    from benchmarks import disk_creation

    calls = []
    monkeypatch.setattr(sampling, 'settle', lambda: calls.append('settle'))
    disk_creation._median(lambda run: calls.append('run'),
                          lambda run: calls.append('cleanup'))
    runs = calls.count('run')
    assert runs >= disk_creation.RUNS
    assert calls == ['settle', 'run', 'cleanup'] * runs
