"""``python -m benchmarks [disk] [scheduling] [handlers] [concurrency]
[audit] [first-disk] [moves] [profile]``: run the benchmarks named (all by
default) and write results/latest.*; results of benchmarks not run this
time are kept from the previous files."""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
import time

from nova_imgtype import releases

# As the installed Nova's services run (native threads on Nova 34), decided
# before anything of Nova is imported, through Nova's own variable (which
# its test fixtures, imported by the benchmarks, obey too), as tests/ does.
os.environ.setdefault('OS_NOVA_DISABLE_EVENTLET_PATCHING',
                      '1' if releases.native_threading_default() else '0')

from nova import monkey_patch  # noqa: E402

monkey_patch.patch(backend='threading')

from benchmarks import cache_audit  # noqa: E402
from benchmarks import concurrent_spawns  # noqa: E402
from benchmarks import disk_creation  # noqa: E402
from benchmarks import first_disk  # noqa: E402
from benchmarks import moves  # noqa: E402
from benchmarks import profile  # noqa: E402
from benchmarks import scheduling  # noqa: E402
from benchmarks import template_handlers  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

#: Command-line name -> (module with run(), the rows' ``benchmark`` label).
BENCHMARKS = {
    'disk': (disk_creation, 'disk creation'),
    'scheduling': (scheduling, 'scheduling'),
    'handlers': (template_handlers, 'template handlers'),
    'concurrency': (concurrent_spawns, 'concurrent spawns'),
    'audit': (cache_audit, 'image cache audit'),
    'first-disk': (first_disk, 'time to first disk'),
    'moves': (moves, 'moves'),
    'profile': (profile, 'profile'),
}


def machine() -> dict[str, str]:
    def out(*cmd: str) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True,
                                  check=False).stdout.strip()
        except OSError:
            return ''
    return {
        'cpus': str(os.cpu_count()),
        'python': platform.python_version(),
        'kernel': platform.release(),
        'libvirt': out('libvirtd', '--version'),
        'qemu-img': (out('qemu-img', '--version').splitlines() or [''])[0],
        'date': datetime.datetime.now(datetime.UTC).isoformat(
            timespec='seconds'),
    }


def to_markdown(info: dict[str, str], rows: list[dict],
                measured: dict[str, str] | None = None,
                seconds: dict[str, float] | None = None) -> str:
    lines = ['# nova-imgtype benchmarks', '',
             'Machine: ' + ', '.join('%s %s' % kv for kv in info.items()),
             '', 'Reproduce with `make bench` (one benchmark: '
             '`.venv/bin/python -m benchmarks %s`).' % '|'.join(BENCHMARKS),
             '']
    if measured:
        lines += ['Measured: ' + ', '.join(
            '%s %s' % kv for kv in sorted(measured.items())), '']
    if seconds:
        lines += ['Seconds each took (module set-up included): ' + ', '.join(
            '%s %.0f' % kv for kv in sorted(seconds.items())) +
            '; %.0f in all.' % sum(seconds.values()), '']
    for module, label in BENCHMARKS.values():
        mine = [r for r in rows if r.get('benchmark') == label]
        if mine:
            lines += ['', module.to_markdown(mine)]
    return '\n'.join(lines).rstrip('\n') + '\n'


def main(argv: list[str]) -> int:
    names = argv or list(BENCHMARKS)
    unknown = sorted(set(names) - set(BENCHMARKS))
    if unknown:
        sys.stderr.write('unknown benchmark(s) %s; choose from %s\n'
                         % (', '.join(unknown), ', '.join(BENCHMARKS)))
        return 2
    info = machine()
    results = os.path.join(HERE, 'results')
    os.makedirs(results, exist_ok=True)
    try:
        with open(os.path.join(results, 'latest.json')) as f:
            previous = json.load(f)
    except (OSError, ValueError):
        previous = {}
    labels = {BENCHMARKS[name][1] for name in names}
    # Keep what was measured before for the benchmarks not run now.
    rows = [r for r in previous.get('results', [])
            if r.get('benchmark') not in labels]
    before = previous.get('machine', {}).get('date', '')
    measured = {r['benchmark']: before for r in rows}
    measured.update(previous.get('measured', {}))
    for label in labels:
        measured.pop(label, None)
    seconds = {label: s for label, s in previous.get('seconds', {}).items()
               if label in measured}
    for name in BENCHMARKS:
        if name in names:
            module, label = BENCHMARKS[name]
            # What the benchmark before left to write back is not this
            # one's to pay (untimed).
            os.sync()
            start = time.perf_counter()
            rows += module.run()
            seconds[label] = round(time.perf_counter() - start, 1)
            sys.stderr.write('bench: %s took %.0f s\n' % (
                name, seconds[label]))
            measured[label] = info['date']
    with open(os.path.join(results, 'latest.json'), 'w') as f:
        json.dump({'machine': info, 'measured': measured, 'seconds': seconds,
                   'results': rows}, f, indent=2)
    md = to_markdown(info, rows, measured, seconds)
    with open(os.path.join(results, 'latest.md'), 'w') as f:
        f.write(md)
    sys.stdout.write(md)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
