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

# As nova-compute starts in Nova 34 (native threading), before anything
# else is imported.
os.environ.setdefault('OS_NOVA_DISABLE_EVENTLET_PATCHING', '1')
from nova import monkey_patch  # noqa: E402

monkey_patch.patch(backend='threading')

import libvirt  # noqa: E402
import nova.conf  # noqa: E402
from nova import objects  # noqa: E402
from nova.tests import fixtures as nova_fixtures  # noqa: E402
from nova.virt import fake  # noqa: E402

import nova_imgtype.conf  # noqa: E402, F401  (registers our options)
from nova_imgtype.virt.libvirt import driver as imgtype_driver  # noqa: E402
from nova_imgtype.virt.libvirt import pools  # noqa: E402

uri, instances_path, uuid, die_at, record = sys.argv[1:]
objects.register_all()
CONF = nova.conf.CONF
CONF([], project='nova', default_config_files=[])
CONF.set_override('instances_path', instances_path)
CONF.set_override('host', 'host1')
CONF.set_override('use_storage_pools', True, group='libvirt')
CONF.set_override('images_type', 'qcow2', group='libvirt')
nova_fixtures.LibvirtFixture().setUp()
drv = imgtype_driver.LibvirtDriver(fake.FakeVirtAPI(), False)
conn = libvirt.open(uri)
drv._pools = drv.image_backend.pools = pools.StoragePools(lambda: conn)


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
drv._move_to_pools(inst)
print('not killed')
