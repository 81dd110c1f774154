"""Run by tests/real/test_crash_kills.py in a process of its own: the cold
move of a pool instance through libvirt, the process killed (SIGKILL) at a
chosen step.

argv: libvirt URI, instances_path, instance uuid, its system metadata
(JSON), the step to die at (``stage-N``: before the N-th volume is staged
out of the pool, from 0; ``stock``: once stock kept the directory as
``_resize``; ``copy``: in the middle of the stream).
"""

import json
import os
import signal
import sys
from unittest import mock

import compute_here  # noqa: I001  (first: Nova's threading patch)
from nova import objects
from nova.virt.libvirt import driver as stock_driver
from nova.virt.libvirt import utils as libvirt_utils

from nova_imgtype.virt.libvirt import remote_storage
from nova_imgtype_testing import drivers

uri, instances_path, uuid, sysmeta, die_at = sys.argv[1:]
drv = compute_here.driver(uri, instances_path)
inst = objects.Instance(uuid=uuid, host='host1',
                        system_metadata=json.loads(sysmeta))


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def stock(self, context, instance, dest, *args, **kwargs):
    # What stock does around the plugin's part: the guest stopped (after
    # its checks), the directory kept.
    self.power_off(instance, 0, 0)
    inst_base = libvirt_utils.get_instance_path(instance)
    os.rename(inst_base, inst_base + '_resize')
    if die_at == 'stock':
        die()
    self._remotefs.create_dir(dest, inst_base)
    return '[]'


renames = [0]
real_rename = os.rename


def rename(src: str, dst: str) -> None:
    if die_at == 'stage-%d' % renames[0]:
        die()
    renames[0] += 1
    real_rename(src, dst)


real_send = remote_storage._send_sparse


def send(stream, f, size, what):
    if die_at == 'copy':
        stream.send(f.read(64 * 1024))
        die()
    return real_send(stream, f, size, what)


os.rename = rename
remote_storage._send_sparse = send
with mock.patch.object(stock_driver.LibvirtDriver,
                       'migrate_disk_and_power_off', stock), \
        mock.patch.object(stock_driver.LibvirtDriver, 'power_off'), \
        mock.patch.object(drv, '_is_path_shared_with', return_value=False), \
        mock.patch.object(stock_driver.LibvirtDriver, '_live_migration_uri',
                          staticmethod(lambda dest: uri)):
    drivers.send_pool_disks(drv, inst, 'dest-host')
print('not killed')
