"""How many runs a figure gets.

A step of a few milliseconds moves by 10-20% from one run to the next on
a two-core machine (a process started, a libvirt call, the page cache):
the median of three such runs is the machine's noise, and two commits
compared that way differ by more than the 10% a regression is flagged at
(``benchmarks.compare``) with nothing changed between them. A figure
whose runs take under :data:`FAST_S` is therefore sampled at least
:data:`FAST_RUNS` times, which costs its module a few seconds; a slower
one keeps the runs its module gives it.

A run that follows one which wrote data pays for the kernel writing that
data back, and the amount depends on what ran before (the other side of a
comparison, a stock method's full copies): :func:`settle` before each timed
run, untimed, leaves no dirty page to the next run.
"""

from __future__ import annotations

import os
import statistics

#: A figure whose median run is shorter than this (seconds) is fast.
FAST_S = 0.5
#: Runs a fast figure gets at least.
FAST_RUNS = 11


def more(times: list[float], runs: int) -> bool:
    """Whether a figure of ``times`` (seconds, one per run so far) needs
    another run: fewer than ``runs``, or a fast figure with fewer than
    :data:`FAST_RUNS`."""
    if len(times) < runs:
        return True
    return len(times) < FAST_RUNS and statistics.median(times) < FAST_S


def settle() -> None:
    """Write back what earlier runs left dirty (untimed, before a run)."""
    os.sync()
