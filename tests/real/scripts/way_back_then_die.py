"""Run by tests/real/test_way_back_kills.py in a process of its own:
``prepare-uninstall --apply`` on a stopped instance, the process killed
(SIGKILL) at a chosen step.

argv: libvirt URI, instances_path, instance uuid, its record (JSON), the
step to die at (``save-N``, ``rename-N``, ``replace-N``: before the N-th
save of the record, file rename, ``disk.info`` write, from 0;
``convert-N``: half way through the N-th qcow2 copy), the file the record
is saved to (Nova's DB here).
"""

import json
import os
import signal
import sys

import compute_here  # noqa: I001  (first: Nova's threading patch)
import libvirt
import nova.conf
from nova import objects
from nova.virt import images

from nova_imgtype.cmd import prepare_uninstall

uri, instances_path, uuid, sysmeta, die_at, record = sys.argv[1:]
compute_here.driver(uri, instances_path)
conn = libvirt.open(uri)
back = prepare_uninstall.way_back(nova.conf.CONF, lambda: conn)
counts: dict[str, int] = {}


def step(kind: str) -> bool:
    """Whether this step is the one to die at (counted)."""
    n = counts.get(kind, 0)
    counts[kind] = n + 1
    return die_at == '%s-%d' % (kind, n)


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


inst = objects.Instance(uuid=uuid, host='host1', display_name='vm',
                        vm_state='stopped', task_state=None,
                        system_metadata=json.loads(sysmeta))


def save() -> None:
    if step('save'):
        die()
    with open(record, 'w') as f:
        json.dump(dict(inst.system_metadata), f)


def wrap(kind, real):
    def call(*args, **kwargs):
        if step(kind):
            die()
        return real(*args, **kwargs)
    return call


real_convert = images.convert_image


def convert(src, dest, *args, **kwargs):
    cut = step('convert')
    real_convert(src, dest, *args, **kwargs)
    if cut:
        with open(dest, 'r+b') as f:
            f.truncate(os.path.getsize(dest) // 2)
        die()


inst.save = save
os.rename = wrap('rename', os.rename)
os.replace = wrap('replace', os.replace)
images.convert_image = convert
print(back.review(inst, stopped=True, apply=True))
print('not killed')
