"""What the crash scripts share: nova-compute's driver as Nova 34 starts
it (native threading), its pools on a given libvirtd.

Imported first by each script: the threading patch must come before
anything else of Nova is imported.
"""

import os
import sys

# The source tree first, as for the tests that start the script: its
# nova_imgtype_testing (never installed) and its nova_imgtype.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))))

from nova_imgtype import releases  # noqa: E402

os.environ.setdefault('OS_NOVA_DISABLE_EVENTLET_PATCHING',
                      '1' if releases.native_threading_default() else '0')
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
from nova_imgtype_testing import drivers  # noqa: E402


def driver(uri: str, instances_path: str) -> imgtype_driver.LibvirtDriver:
    """The plugin's driver of host1 (qcow2 on storage pools), its pools on
    the libvirtd at ``uri`` (its own libvirt connection is Nova's fake)."""
    objects.register_all()
    conf = nova.conf.CONF
    conf([], project='nova', default_config_files=[])
    conf.set_override('instances_path', instances_path)
    conf.set_override('host', 'host1')
    conf.set_override('use_storage_pools', True, group='libvirt')
    conf.set_override('images_type', 'qcow2', group='libvirt')
    nova_fixtures.LibvirtFixture().setUp()
    drv = imgtype_driver.LibvirtDriver(fake.FakeVirtAPI(), False)
    conn = libvirt.open(uri)
    drivers.use_pools(drv, pools.StoragePools(lambda: conn))
    return drv
