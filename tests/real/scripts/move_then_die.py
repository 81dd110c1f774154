"""Run by tests/real/test_crash_kills.py in a process of its own: the
driver's move of a legacy instance into the disks pool, the process killed
(SIGKILL) at a chosen step.

argv: libvirt URI, instances_path, instance uuid, the step to die at
(``save``: while the new record is saved; ``rename-N``: before the N-th
file rename, from 0), the file the record is saved to (Nova's DB here).
"""

import json
import os
import signal
import sys

import compute_here  # noqa: I001  (first: Nova's threading patch)
from nova import objects

uri, instances_path, uuid, die_at, record = sys.argv[1:]
drv = compute_here.driver(uri, instances_path)


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


inst = objects.Instance(uuid=uuid, host='host1', system_metadata={
    'imgtype_backend': 'qcow2', 'imgtype_storage': 'legacy',
    'imgtype_native_formats': 'qcow2'})


def save() -> None:
    if die_at == 'save':
        die()
    with open(record, 'w') as f:
        json.dump(dict(inst.system_metadata), f)


inst.save = save
renames = [0]
real_rename = os.rename


def rename(src: str, dst: str) -> None:
    if die_at == 'rename-%d' % renames[0]:
        die()
    renames[0] += 1
    real_rename(src, dst)


os.rename = rename
drv._disks.move_to_pools(inst)
print('not killed')
