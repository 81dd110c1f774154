"""[libvirt]images_type_mapping in stock Nova's harness.

Real: Nova's API, conductor, scheduler, placement, compute manager, our
driver, the image backends, qemu-img and every disk file (under a temporary
instances_path). Fake: libvirt domains (fakelibvirt) and Glance (Nova's
GlanceFixture, serving real image bytes). The two computes share one
instances_path on one machine, which is what stock's
``_is_path_shared_with`` would find over SSH: it is answered directly.
"""

from __future__ import annotations

import os
from typing import Any

import fixtures
from nova import context as nova_context
from nova import objects

from nova_imgtype.virt.libvirt import imagecache
from nova_imgtype_testing import functional as base

QCOW2_NATIVE = {'images_type': 'flat', 'images_type_mapping': 'qcow2:qcow2',
                'force_raw_images': True}
RAW_NATIVE = {'images_type': 'qcow2', 'images_type_mapping': 'raw:flat',
              'force_raw_images': True}


class ImagesTypeMappingTest(base.ImgtypeServersTestBase):

    def setUp(self) -> None:
        super().setUp()
        self.flags(allow_resize_to_same_host=True)
        # Cold snapshots: fakelibvirt has no block jobs for live ones.
        self.flags(disable_libvirt_livesnapshot=True, group='workarounds')
        self.useFixture(fixtures.MockPatch(
            'nova.virt.libvirt.driver.LibvirtDriver._is_path_shared_with',
            return_value=True))
        self.ctxt = nova_context.get_admin_context()

    def sysmeta(self, server: dict[str, Any]) -> dict[str, str]:
        inst = objects.Instance.get_by_uuid(
            self.ctxt, server['id'], expected_attrs=['system_metadata'])
        return {k: v for k, v in inst.system_metadata.items()
                if k in ('imgtype_backend', 'imgtype_native_formats')}

    def disk_info(self, server: dict[str, Any]) -> dict[str, Any]:
        return base.qemu_img_info(self.instance_path(server, 'disk'))

    def native_path(self, image_id: str, fmt: str) -> str:
        return os.path.join(self.base_dir,
                            imagecache.native_cache_fname(image_id, fmt))

    def assert_native_qcow2(self, server: dict[str, Any],
                            image_id: str) -> None:
        self.assertEqual({'imgtype_backend': 'qcow2',
                          'imgtype_native_formats': 'qcow2'},
                         self.sysmeta(server))
        info = self.disk_info(server)
        self.assertEqual('qcow2', info['format'])
        native = self.native_path(image_id, 'qcow2')
        self.assertEqual(native, info['full-backing-filename'])
        self.assertEqual('qcow2', base.qemu_img_info(native)['format'])
        # No converted copy of this image was made.
        self.assertFalse(os.path.exists(self.cache_path(image_id)))

    def test_two_computes_native_and_converted(self) -> None:
        self.start_compute('compute1', **QCOW2_NATIVE)
        self.start_compute('compute2', **RAW_NATIVE)
        qcow2 = self.create_image('qcow2', size_mb=4)
        raw = self.create_image('raw', size_mb=4)

        # compute1: qcow2 mapped (native overlay), raw unmapped (flat).
        s1 = self.boot_server(qcow2['id'], host='compute1')
        self.assert_native_qcow2(s1, qcow2['id'])
        s2 = self.boot_server(raw['id'], host='compute1')
        self.assertEqual({'imgtype_backend': 'flat',
                          'imgtype_native_formats': ''}, self.sysmeta(s2))
        self.assertEqual('raw', self.disk_info(s2)['format'])

        # compute2: qcow2 unmapped -> stock conversion to a raw base and a
        # qcow2 overlay; raw mapped to flat -> a raw copy.
        s3 = self.boot_server(qcow2['id'], host='compute2')
        self.assertEqual({'imgtype_backend': 'qcow2',
                          'imgtype_native_formats': ''}, self.sysmeta(s3))
        info = self.disk_info(s3)
        self.assertEqual(self.cache_path(qcow2['id']),
                         info['full-backing-filename'])
        self.assertEqual('raw', base.qemu_img_info(
            self.cache_path(qcow2['id']))['format'])
        s4 = self.boot_server(raw['id'], host='compute2')
        self.assertEqual({'imgtype_backend': 'flat',
                          'imgtype_native_formats': 'raw'}, self.sysmeta(s4))
        self.assertEqual('raw', self.disk_info(s4)['format'])

        # The same image, natively and converted, in two cache files.
        self.assertNotEqual(self.native_path(qcow2['id'], 'qcow2'),
                            self.cache_path(qcow2['id']))
        for server in (s1, s2, s3, s4):
            self._delete_server(server)
            self.assertFalse(os.path.exists(self.instance_path(server)))

    def test_backend_survives_config_change_and_restart(self) -> None:
        self.start_compute('compute1', **QCOW2_NATIVE)
        qcow2 = self.create_image('qcow2', size_mb=4)
        raw = self.create_image('raw', size_mb=4)
        native = self.boot_server(qcow2['id'], host='compute1')
        flat = self.boot_server(raw['id'], host='compute1')
        self.assert_native_qcow2(native, qcow2['id'])

        # The operator changes everything and restarts nova-compute.
        self.compute_flags['compute1'].update({
            ('libvirt', 'images_type'): 'qcow2',
            ('libvirt', 'images_type_mapping'): ''})
        self.restart_compute_service('compute1')

        # Existing instances keep their backend through every operation.
        for server in (native, flat):
            self._reboot_server(server)
            self._reboot_server(server, hard=True)
        self.assert_native_qcow2(native, qcow2['id'])
        self.assertEqual('raw', self.disk_info(flat)['format'])
        self.assertEqual('flat', self.sysmeta(flat)['imgtype_backend'])

        # Snapshot: extracted from the qcow2 overlay, uploaded as qcow2,
        # with the image's data (GlanceFixture keeps no uploaded bytes, so
        # the upload is captured on its way).
        uploads = self.capture_uploads()
        self.snapshot_and_wait(native, 'snap-native')
        self.assertEqual(1, len(uploads))
        meta, path = uploads[0]
        self.assertEqual('qcow2', meta['disk_format'])
        self.assertEqual('qcow2', base.qemu_img_info(path)['format'])
        self.assertEqual(
            self.guest_head(self.image_files[qcow2['id']], 'qcow2'),
            self.guest_head(path, meta['disk_format']))

        # Resize (same host): the disk grows, the backend stays.
        native = self._resize_server(native, '2')
        native = self._confirm_resize(native)
        self.assert_native_qcow2(native, qcow2['id'])
        self.assertEqual(20 * 1024 ** 3,
                         self.disk_info(native)['virtual-size'])
        flat = self._resize_server(flat, '2')
        flat = self._confirm_resize(flat)
        # Still flat: a standalone disk with the image's data. (Stock's
        # finish_migration rewrites raw disks as qcow2 when use_cow_images
        # is set; the flat backend reads the format from disk.info.)
        self.assertEqual('flat', self.sysmeta(flat)['imgtype_backend'])
        info = self.disk_info(flat)
        self.assertNotIn('backing-filename', info)
        self.assertEqual(20 * 1024 ** 3, info['virtual-size'])
        self.assertEqual(base.IMAGE_MARKER, self.guest_head(
            self.instance_path(flat, 'disk'),
            self.domain_format('compute1', flat)))

        # A new instance of the same qcow2 image follows the new config.
        new = self.boot_server(qcow2['id'], host='compute1')
        self.assertEqual({'imgtype_backend': 'qcow2',
                          'imgtype_native_formats': ''}, self.sysmeta(new))
        self.assertEqual(self.cache_path(qcow2['id']),
                         self.disk_info(new)['full-backing-filename'])

        for server in (native, flat, new):
            self._delete_server(server)
            self.assertFalse(os.path.exists(self.instance_path(server)))
        self.assertEqual([], [d for d in os.listdir(self.instances_path)
                              if d not in ('_base', 'locks', 'snapshots',
                                           'compute_id')])
