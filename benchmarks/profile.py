"""Where the milliseconds of one disk go.

For one warm native overlay (``images_type_mapping = qcow2:qcow2``, the
template cached), one warm pool copy-on-write volume, one first disk on a
linked template (``volume-based-linking``, the cache empty) and, for
reference, one warm disk of stock's Qcow2 backend: what the driver's
``_try_fetch_image_cache`` spends in each external process (by program,
``qemu-img`` by subcommand), each libvirt call, each ``fsync``, Nova's
and Nova's format inspector; the rest is Python. The same
driver and image service as :mod:`benchmarks.first_disk` (a 256 MiB
image, qcow2 compressed with zstd, served through Nova's download code with
glanceclient's hash check; a fake Cinder API and os-brick's local
connector for linking). Each step's time is summed per disk; the table
gives the median over RUNS disks (the total too, so the steps need not add
up to it exactly). Timing wrappers cost a few microseconds per call.
"""

from __future__ import annotations

import collections
import functools
import os
import statistics
import sys
import time
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

from nova.virt import images
from oslo_concurrency import processutils

from benchmarks import fakes
from benchmarks import first_disk as fd
from benchmarks import tables
from nova_imgtype.virt.libvirt import spawn

RUNS = 7
SIZE = 256 * fd.MiB
SCENARIOS = (
    ('stock Qcow2, warm', fd.STOCK_QCOW2, True),
    ('native overlay, warm', fd.NATIVE, True),
    ('pool COW volume, warm', fd.POOL_COW, True),
    ('linked template, first disk', fd.LINKING, False),
)
#: libvirt classes whose calls are timed.
_LIBVIRT_CLASSES = ('virConnect', 'virStoragePool', 'virStorageVol')


class _Steps:
    """Time spent per step while recording."""

    def __init__(self) -> None:
        self.ms: collections.defaultdict[str, float] = (
            collections.defaultdict(float))
        self.calls: collections.Counter[str] = collections.Counter()
        self.depth = 0

    def timed(self, label: Callable[..., str],
              fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if self.depth:      # inside another timed step: its own
                return fn(*args, **kwargs)
            self.depth += 1
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.depth -= 1
                name = label(*args, **kwargs)
                self.ms[name] += (time.perf_counter() - start) * 1000
                self.calls[name] += 1
        return wrapper


def _program(*cmd: Any, **_kwargs: Any) -> str:
    argv = [str(c) for c in cmd]
    while argv and (argv[0] == 'env' or '=' in argv[0]):
        argv.pop(0)
    if not argv:
        return 'process'
    name = os.path.basename(argv[0])
    if name == 'qemu-img' and len(argv) > 1:
        name += ' ' + argv[1]
    return 'process: ' + name


def _patched(steps: _Steps) -> Iterator[tuple[Any, str, Any]]:
    """(owner, attribute, timed replacement) for each timed call."""
    import libvirt
    for owner in (processutils, spawn):
        yield owner, 'execute', steps.timed(_program, owner.execute)
    for fn in ('fsync', 'fdatasync'):
        yield os, fn, steps.timed(lambda *a, _n=fn: _n, getattr(os, fn))
    yield images, 'get_image_format', steps.timed(
        lambda *a: 'format inspector (Nova)', images.get_image_format)
    for cls_name in _LIBVIRT_CLASSES:
        cls = getattr(libvirt, cls_name)
        for name, fn in vars(cls).items():
            if name.startswith('_') or not callable(fn):
                continue
            yield cls, name, steps.timed(
                lambda *a, _c=cls_name, _n=name, **k: 'libvirt: %s.%s' % (
                    _c, _n), fn)


def _one(bench: fd._Bench, svc: Any, method: str, warm: bool,
         steps: _Steps) -> float:
    """One disk recorded; its wall time in ms."""
    bench.configure(method)
    if warm:
        inst, _disk = bench.make_disk(method, svc, 2 * SIZE)
        bench.remove_disk(method, inst)
    else:
        bench.clear_cache()
    saved = []
    for owner, name, timed in _patched(steps):
        saved.append((owner, name, vars(owner)[name]))
        setattr(owner, name, timed)
    start = time.perf_counter()
    try:
        inst, _disk = bench.make_disk(method, svc, 2 * SIZE)
    finally:
        took = (time.perf_counter() - start) * 1000
        for owner, name, old in reversed(saved):
            setattr(owner, name, old)
    bench.remove_disk(method, inst)
    return took


def run() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with fd.running('bench-profile-') as bench:
        raw, _ = fd._make_image(bench.work, SIZE)
        qcow2 = raw[:-len('.raw')] + '.qcow2'
        fd.real.qemu_img('convert', '-c', '-o', 'compression_type=zstd',
                         '-f', 'raw', '-O', 'qcow2', raw, qcow2)
        os.unlink(raw)
        svc = fd._ImageService(qcow2, 'qcow2', fakes.sha512_of(qcow2))
        bench.cinder.device = qcow2
        undo = fd._patch_image_apis(svc)
        try:
            for scenario, method, warm in SCENARIOS:
                rows += _profile(bench, svc, scenario, method, warm)
        finally:
            undo()
            bench.clear_cache()
    return rows


def _profile(bench: fd._Bench, svc: Any, scenario: str, method: str,
             warm: bool) -> list[dict[str, Any]]:
    """The rows of one scenario: each step's median, then the total."""
    per_step: dict[str, list[float]] = collections.defaultdict(list)
    calls: dict[str, list[int]] = collections.defaultdict(list)
    totals = []
    for _ in range(RUNS):
        steps = _Steps()
        totals.append(_one(bench, svc, method, warm, steps))
        for name in set(steps.ms) | set(per_step):
            per_step[name].append(steps.ms.get(name, 0.0))
            calls[name].append(steps.calls.get(name, 0))
    bench.clear_cache()
    total = statistics.median(totals)
    rows: list[dict[str, Any]] = [
        {'benchmark': 'profile', 'scenario': scenario, 'step': name,
         'calls': statistics.median(calls[name]),
         'median_ms': statistics.median(ms), 'runs': RUNS}
        for name, ms in sorted(per_step.items(),
                               key=lambda kv: -statistics.median(kv[1]))]
    rows.append({'benchmark': 'profile', 'scenario': scenario,
                 'step': 'total (wall)', 'calls': 1, 'median_ms': total,
                 'all_ms': totals, 'runs': RUNS})
    sys.stderr.write('profile: %s %.1f ms\n' % (scenario, total))
    return rows


def to_markdown(rows: list[dict[str, Any]]) -> str:
    """The profile section of ``results/latest.md``."""
    lines = [
        '## Where the milliseconds of one disk go', '',
        "The driver's `_try_fetch_image_cache` for one disk of a 256 MiB "
        'zstd qcow2 image (see `benchmarks/profile.py`): time in each '
        'external process (by program), libvirt call, fsync and Nova\'s '
        'format inspector, summed per disk; median of '
        '%d disks. Steps below 0.05 ms are left out; the rest of the total '
        'is Python.' % (rows[0]['runs'] if rows else RUNS), '',
        tables.markdown(
            ['disk', 'step', 'calls', 'median ms'],
            ([r['scenario'], '**%s**' % r['step'] if r['step'].startswith(
                'total') else r['step'], '%g' % r['calls'],
              '%.1f' % r['median_ms']] for r in rows
             if r['step'] == 'total (wall)' or r['median_ms'] >= 0.05),
            left=['disk', 'step'])]
    return '\n'.join(lines) + '\n'
