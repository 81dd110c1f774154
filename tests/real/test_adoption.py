"""Real: a legacy instance moved into a dir pool takes every file of its
own with it (issue 29, 6).

At its first hard reboot on a host with storage pools, a legacy
instance's files become volumes of the dir pool: its disks, and also its
config drive, kernel and ramdisk, which a pool instance has as volumes
(the guest XML names them so). A config drive left behind made the XML
name a volume that did not exist: the instance could not start.

Real: the throwaway libvirtd, its dir pools, qemu-img, files. Fake: the
Nova DB (``Instance.save``).
"""

import json
import os
from unittest import mock

from lxml import etree
from nova import objects

from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype_testing import libvirtd as real
from tests.real.test_guest_written_headers import _legacy_flat
from tests.real.test_libvirt_storage import pool_driver  # noqa: F401
from tests.real.test_native_images import MiB
from tests.real.test_native_images import conf  # noqa: F401
from tests.real.test_native_images import driver  # noqa: F401


def _disk_xml(drv, inst, name, dev):
    disk = drv.image_backend.by_name(
        inst, name, disk_info_mapping={'bus': 'virtio', 'dev': dev,
                                       'type': 'disk'})
    return etree.fromstring(disk.libvirt_info('none', {}).to_xml())


def test_adoption_takes_the_config_drive_kernel_and_ramdisk(
        pool_driver):  # noqa: F811
    inst, inst_dir = _legacy_flat(pool_driver)
    files = {}
    for name, fmt in (('disk', 'qcow2'), ('disk.config', 'raw'),
                      ('kernel', 'raw'), ('ramdisk', 'raw')):
        files[name] = os.path.join(inst_dir, name)
        real.make_image(files[name], fmt, MiB)
    with open(files['disk.config'], 'r+b') as f:
        f.write(b'CONFIG DRIVE DATA')
    # Stock records its disks' formats; kernel and ramdisk are not disks.
    with open(os.path.join(inst_dir, 'disk.info'), 'w') as f:
        json.dump({files['disk']: 'qcow2', files['disk.config']: 'raw'}, f)

    with mock.patch.object(objects.Instance, 'save'):
        pool_driver._disks.move_to_pools(inst)

    decision = pool_driver._resolver.recorded(inst)
    assert decision.storage == 'pools'
    pool = pool_driver._pools.get(pool_specs.DISKS_POOL)
    listed = set(pool.listVolumes())
    for name in files:
        assert pool_specs.volume_name(inst.uuid, name) in listed, name
        assert not os.path.exists(files[name]), name
    # The guest XML names volumes that exist, each in its format.
    for name, dev, fmt in (('disk', 'vda', 'qcow2'),
                           ('disk.config', 'vdb', 'raw')):
        xml = _disk_xml(pool_driver, inst, name, dev)
        assert xml.find('driver').get('type') == fmt, name
        source = xml.find('source')
        assert source.get('volume', source.get('file', '')).endswith(
            pool_specs.volume_name(inst.uuid, name)), name
    config = pool_driver.image_backend.by_name(inst, 'disk.config')
    with open(config.path, 'rb') as f:
        assert f.read(17) == b'CONFIG DRIVE DATA'
    pool_driver._disks.delete_pool_volumes(inst)


def test_a_config_drive_without_a_disk_info_entry_is_raw(
        pool_driver):  # noqa: F811
    """Stock makes a config drive raw whatever the backend: its format is
    that rule's, never one probed from its bytes."""
    inst, inst_dir = _legacy_flat(pool_driver)
    root = os.path.join(inst_dir, 'disk')
    config = os.path.join(inst_dir, 'disk.config')
    real.make_image(root, 'raw', MiB)
    real.make_image(config, 'qcow2', MiB)   # the bytes say qcow2
    with open(os.path.join(inst_dir, 'disk.info'), 'w') as f:
        json.dump({root: 'raw'}, f)

    with mock.patch.object(objects.Instance, 'save'):
        pool_driver._disks.move_to_pools(inst)

    decision = pool_driver._resolver.recorded(inst)
    assert decision.storage == 'pools'
    assert decision.volume_format('disk.config') == 'raw'
    xml = _disk_xml(pool_driver, inst, 'disk.config', 'vdb')
    assert xml.find('driver').get('type') == 'raw'
    pool_driver._disks.delete_pool_volumes(inst)
