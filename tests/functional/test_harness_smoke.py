"""The functional harness itself: our driver, real disks, real image bytes.

Stock behaviour only (no ``images_type_mapping``): these tests pin down
what the harness gives later tests to build on.
"""

from __future__ import annotations

import os

from oslo_utils import units

from nova_imgtype.virt.libvirt import driver as imgtype_driver
from nova_imgtype_testing import functional as base


class HarnessSmokeTest(base.ImgtypeServersTestBase):
    """Boot and delete servers on a compute running imgtype.LibvirtDriver."""

    def _read_head(self, path: str) -> bytes:
        with open(path, 'rb') as f:
            return f.read(len(base.IMAGE_MARKER))

    def test_qcow2_backend_force_raw(self) -> None:
        """qcow2 image, images_type=qcow2, force_raw_images: stock path.

        The image is converted to a raw base file in ``_base`` and the
        instance disk is a qcow2 overlay on it; deleting the server removes
        the instance directory and keeps the cached base.
        """
        self.start_compute('compute1', images_type='qcow2',
                           force_raw_images=True)
        compute = self.computes['compute1']
        self.assertEqual(base.COMPUTE_DRIVER, base.CONF.compute_driver)
        self.assertIs(imgtype_driver.LibvirtDriver,
                      type(compute.manager.driver))

        image = self.create_image('qcow2', size_mb=2)
        self.assertEqual(
            'qcow2', base.qemu_img_info(
                self.image_files[image['id']])['format'])

        server = self.boot_server(image['id'])
        self.assertEqual('ACTIVE', server['status'])
        self.assertEqual('compute1', server['OS-EXT-SRV-ATTR:host'])

        disk = self.instance_path(server, 'disk')
        self.assertTrue(os.path.isfile(disk), disk)
        info = base.qemu_img_info(disk)
        self.assertEqual('qcow2', info['format'])
        # m1.tiny: the overlay is grown to the flavor's 1 GiB root disk.
        self.assertEqual(units.Gi, info['virtual-size'])

        backing = info['full-backing-filename']
        self.assertEqual(self.cache_path(image['id']), backing)
        self.assertEqual(self.base_dir, os.path.dirname(backing))
        base_info = base.qemu_img_info(backing)
        self.assertEqual('raw', base_info['format'])
        self.assertEqual(2 * units.Mi, base_info['virtual-size'])
        # The raw base holds the image's bytes, not a qcow2 container.
        self.assertEqual(base.IMAGE_MARKER, self._read_head(backing))

        self._delete_server(server)
        self.assertFalse(os.path.exists(self.instance_path(server)))
        self.assertFalse(
            os.path.exists(self.instance_path(server['id'] + '_del')))
        # The image cache outlives the instance (until the cache manager).
        self.assertTrue(os.path.isfile(backing))

    def test_flat_backend_raw_disk(self) -> None:
        """images_type=raw (flat): the instance disk is a raw copy."""
        self.start_compute('compute1', images_type='raw')
        image = self.create_image('raw', size_mb=2)

        server = self.boot_server(image['id'])
        disk = self.instance_path(server, 'disk')
        info = base.qemu_img_info(disk)
        self.assertEqual('raw', info['format'])
        self.assertNotIn('backing-filename', info)
        self.assertEqual(units.Gi, info['virtual-size'])
        self.assertEqual(base.IMAGE_MARKER, self._read_head(disk))
        self.assertTrue(os.path.isfile(self.cache_path(image['id'])))

        self._delete_server(server)
        self.assertFalse(os.path.exists(self.instance_path(server)))

    def test_ephemeral_and_swap_are_real(self) -> None:
        """Ephemeral and swap disks are made for real too (mkfs, mkswap)."""
        self.start_compute('compute1', images_type='qcow2')
        flavor = self._create_flavor(memory_mb=512, vcpu=1, disk=1,
                                     ephemeral=1, swap=16)
        image = self.create_image('qcow2')

        server = self.boot_server(image['id'], flavor_id=flavor)

        eph = base.qemu_img_info(self.instance_path(server, 'disk.eph0'))
        self.assertEqual('qcow2', eph['format'])
        self.assertEqual(units.Gi, eph['virtual-size'])
        eph_base = eph['full-backing-filename']
        self.assertEqual(self.base_dir, os.path.dirname(eph_base))
        self.assertTrue(os.path.basename(eph_base).startswith('ephemeral_1_'))
        with open(eph_base, 'rb') as f:
            f.seek(1024 + 56)  # ext2/3/4 superblock magic
            self.assertEqual(b'\x53\xef', f.read(2))

        swap = base.qemu_img_info(self.instance_path(server, 'disk.swap'))
        self.assertEqual('qcow2', swap['format'])
        swap_base = swap['full-backing-filename']
        self.assertEqual(os.path.join(self.base_dir, 'swap_16'), swap_base)
        self.assertEqual(16 * units.Mi, os.path.getsize(swap_base))
        with open(swap_base, 'rb') as f:
            f.seek(os.sysconf('SC_PAGE_SIZE') - 10)
            self.assertEqual(b'SWAPSPACE2', f.read(10))

    def test_options_per_compute(self) -> None:
        """Each compute builds disks with its own images_type.

        compute2 is started last, so its options are in CONF; booting onto
        compute1 through ``boot_server(host=...)`` applies compute1's for
        the build, and compute2's are back afterwards.
        """
        self.start_compute('compute1', images_type='qcow2')
        self.start_compute('compute2', images_type='raw')
        self.assertEqual('compute2', self.active_compute)
        image = self.create_image('qcow2')

        on_1 = self.boot_server(image['id'], host='compute1')
        self.assertEqual('compute2', self.active_compute)
        self.assertEqual('compute2', base.CONF.host)
        self.assertEqual('raw', base.CONF.libvirt.images_type)
        on_2 = self.boot_server(image['id'], host='compute2')

        disk_1 = base.qemu_img_info(self.instance_path(on_1, 'disk'))
        self.assertEqual('qcow2', disk_1['format'])
        self.assertEqual(self.cache_path(image['id']),
                         disk_1['full-backing-filename'])
        disk_2 = base.qemu_img_info(self.instance_path(on_2, 'disk'))
        self.assertEqual('raw', disk_2['format'])
        self.assertNotIn('backing-filename', disk_2)
        for host in ('compute1', 'compute2'):
            self.assertIsInstance(self.computes[host].manager.driver,
                                  imgtype_driver.LibvirtDriver)
