"""``python -m benchmarks``: run every benchmark, write results/latest.*"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys

from nova import monkey_patch

monkey_patch.patch()

from benchmarks import disk_creation  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


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
        'qemu-img': out('qemu-img', '--version').splitlines()[0]
        if out('qemu-img', '--version') else '',
        'date': datetime.datetime.now(datetime.UTC).isoformat(
            timespec='seconds'),
    }


def to_markdown(info: dict[str, str], rows: list[dict]) -> str:
    lines = ['# nova-imgtype benchmarks', '',
             'Machine: ' + ', '.join('%s %s' % kv for kv in info.items()),
             '', 'Reproduce with `make bench`.', '',
             '| image | method | median s | vs stock Qcow2 | cache bytes |',
             '| --- | --- | ---: | ---: | ---: |']
    for r in rows:
        lines.append('| %(image)s | %(method)s | %(median_s).4f | '
                     '%(vs_stock_qcow2)s | %(cache_bytes)d |' % r)
    return '\n'.join(lines) + '\n'


def main() -> int:
    info = machine()
    rows = disk_creation.run()
    results = os.path.join(HERE, 'results')
    os.makedirs(results, exist_ok=True)
    with open(os.path.join(results, 'latest.json'), 'w') as f:
        json.dump({'machine': info, 'results': rows}, f, indent=2)
    md = to_markdown(info, rows)
    with open(os.path.join(results, 'latest.md'), 'w') as f:
        f.write(md)
    sys.stdout.write(md)
    return 0


if __name__ == '__main__':
    sys.exit(main())
