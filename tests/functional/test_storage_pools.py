"""[libvirt]use_storage_pools in stock Nova's harness.

Real: Nova's API, conductor, scheduler, placement, compute manager, our
driver, the storage pools and volumes (on a throwaway libvirtd started for
this module), qemu-img and every file. Fake: libvirt *domains*
(fakelibvirt, which has no storage pool API: the driver's storage
connection is pointed at the real daemon) and Glance (GlanceFixture with
real image bytes).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from typing import Any

import fixtures
import pytest
from lxml import etree
from nova import context as nova_context
from nova import objects
from nova.virt.libvirt import driver as stock_driver

from nova_imgtype.cmd import prepare_uninstall
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype_testing import functional as base
from nova_imgtype_testing import libvirtd as real_fixtures


@pytest.fixture(scope='module')
def libvirtd() -> Any:
    daemon = real_fixtures.start_libvirtd()
    yield daemon
    daemon.stop()


@pytest.fixture(autouse=True)
def _libvirt_uri(request: Any, libvirtd: Any) -> None:
    request.cls.libvirt_uri = libvirtd.uri


class StoragePoolsTest(base.ImgtypeServersTestBase):

    libvirt_uri: str

    def setUp(self) -> None:
        super().setUp()
        self.conn = self.use_real_pools(self.libvirt_uri)
        self.ctxt = nova_context.get_admin_context()
        # fakelibvirt re-renders disks from its own parse (it drops
        # pool/volume sources): keep the XML the driver generated.
        self.guest_xml: dict[str, str] = {}
        real = stock_driver.LibvirtDriver._get_guest_xml

        def spy(drv: Any, context: Any, instance: Any, *args: Any,
                **kwargs: Any) -> str:
            xml: str = real(drv, context, instance, *args, **kwargs)
            self.guest_xml[instance.uuid] = xml
            return xml

        self.useFixture(fixtures.MonkeyPatch(
            'nova.virt.libvirt.driver.LibvirtDriver._get_guest_xml', spy))

    def _disks_pool(self) -> Any:
        return self.conn.storagePoolLookupByName(pool_specs.DISKS_POOL)

    def _domain_disk(self, server: dict[str, Any]) -> Any:
        """The first disk of the guest XML the driver last generated."""
        xml = self.guest_xml[server['id']]
        return etree.fromstring(xml).find('devices/disk')

    def test_pools_next_to_legacy_compute(self) -> None:
        self.start_compute('compute1', images_type='qcow2',
                           flags={'libvirt': {'use_storage_pools': True}})
        self.start_compute('compute2', images_type='qcow2')
        # Pools were made at start, over the cache and under instances_path.
        self.assertTrue(self._disks_pool().isActive())
        base_pool = self.conn.storagePoolLookupByName(pool_specs.BASE_POOL)
        self.assertEqual(self.base_dir, pool_specs.pool_target(base_pool))

        image = self.create_image('qcow2', size_mb=4)
        on_pools = self.boot_server(image['id'], host='compute1')
        legacy = self.boot_server(image['id'], host='compute2')

        inst = objects.Instance.get_by_uuid(
            self.ctxt, on_pools['id'], expected_attrs=['system_metadata'])
        self.assertEqual('pools', inst.system_metadata['imgtype_storage'])
        vol_name = pool_specs.volume_name(on_pools['id'], 'disk')
        vol = self._disks_pool().storageVolLookupByName(vol_name)
        info = base.qemu_img_info(vol.path())
        self.assertEqual('qcow2', info['format'])
        self.assertEqual(self.cache_path(image['id']),
                         info['full-backing-filename'])
        self.assertFalse(os.path.exists(self.instance_path(on_pools,
                                                           'disk')))
        disk = self._domain_disk(on_pools)
        self.assertEqual('volume', disk.get('type'))
        self.assertEqual({'pool': pool_specs.DISKS_POOL, 'volume': vol_name},
                         dict(disk.find('source').attrib))
        # The legacy compute is stock: a file in the instance directory.
        self.assertEqual('file', self._domain_disk(legacy).get('type'))
        self.assertTrue(os.path.exists(self.instance_path(legacy, 'disk')))

        # Reboots keep the volume and the volume disk.
        with self.on_compute('compute1'):
            self._reboot_server(on_pools)
            self._reboot_server(on_pools, hard=True)
        self.assertEqual('volume', self._domain_disk(on_pools).get('type'))
        self.assertEqual(info, base.qemu_img_info(vol.path()))

        # Snapshot: the volume is copied through a temporary pool and
        # uploaded as qcow2 with the image's data.
        uploads = self.capture_uploads()
        with self.on_compute('compute1'):
            self.snapshot_and_wait(on_pools, 'snap')
        self.assertEqual(1, len(uploads))
        meta, path = uploads[0]
        self.assertEqual('qcow2', meta['disk_format'])
        self.assertEqual('qcow2', base.qemu_img_info(path)['format'])
        self.assertEqual(base.IMAGE_MARKER,
                         self.guest_head(path, meta['disk_format']))
        self.assertEqual([], [p.name() for p in
                              self.conn.listAllStoragePools(0)
                              if p.name().startswith('nova-snapshot-')])
        self.assertEqual(info, base.qemu_img_info(vol.path()))

        # Delete leaves no volume and no file behind.
        with self.on_compute('compute1'):
            self._delete_server(on_pools)
        self.assertEqual([], [v.name() for v in
                              self._disks_pool().listAllVolumes(0)])
        self.assertEqual([], os.listdir(os.path.join(self.instances_path,
                                                     'disks')))
        self.assertFalse(os.path.exists(self.instance_path(on_pools)))
        self._delete_server(legacy)

    def test_legacy_instance_moves_into_pool_on_hard_reboot(self) -> None:
        self.start_compute('compute1', images_type='qcow2')
        image = self.create_image('qcow2', size_mb=4)
        server = self.boot_server(image['id'], host='compute1')
        legacy_disk = self.instance_path(server, 'disk')
        before = base.qemu_img_info(legacy_disk)
        self.assertEqual('file', self._domain_disk(server).get('type'))

        # The operator enables pools and restarts nova-compute, which
        # counts the instances still on legacy files.
        self.compute_flags['compute1'][('libvirt', 'use_storage_pools')] = (
            True)
        self.restart_compute_service('compute1')
        self.assertIn('1 instance(s) on this host still use legacy image '
                      'files', self.stdlog.logger.output)
        self.assertIn(server['id'], self.stdlog.logger.output)

        # A soft reboot changes nothing; a hard reboot moves the disk.
        self._reboot_server(server)
        self.assertTrue(os.path.exists(legacy_disk))
        self._reboot_server(server, hard=True)

        vol = self._disks_pool().storageVolLookupByName(
            pool_specs.volume_name(server['id'], 'disk'))
        self.assertFalse(os.path.exists(legacy_disk))
        after = base.qemu_img_info(vol.path())
        # The same qcow2 overlay, on the same cached template, same data.
        for key in ('format', 'virtual-size', 'full-backing-filename',
                    'actual-size'):
            self.assertEqual(before[key], after[key], key)
        self.assertEqual(base.IMAGE_MARKER, self.guest_head(
            vol.path(), self._domain_format(server)))
        inst = objects.Instance.get_by_uuid(
            self.ctxt, server['id'], expected_attrs=['system_metadata'])
        self.assertEqual('pools', inst.system_metadata['imgtype_storage'])
        self.assertEqual('volume', self._domain_disk(server).get('type'))

        self._delete_server(server)
        self.assertEqual([], [v.name() for v in
                              self._disks_pool().listAllVolumes(0)])
        self.assertFalse(os.path.exists(self.instance_path(server)))

    def test_marked_instance_goes_back_to_files_at_hard_reboot(self) -> None:
        """Issue 31: ``prepare-uninstall --apply`` marks a running pool
        instance; nova-compute (still nova-imgtype's) moves it to stock's
        files at its next hard reboot, driven by stock's compute manager,
        and never back into the pool."""
        self.start_compute('compute1', images_type='qcow2',
                           flags={'libvirt': {'use_storage_pools': True}})
        image = self.create_image('qcow2', size_mb=4)
        server = self.boot_server(image['id'], host='compute1')
        vol = self._disks_pool().storageVolLookupByName(
            pool_specs.volume_name(server['id'], 'disk'))
        before = base.qemu_img_info(vol.path())
        driver = self.computes['compute1'].manager.driver
        inst = objects.Instance.get_by_uuid(
            self.ctxt, server['id'], expected_attrs=['system_metadata'])
        found = driver._way_back.review(inst, stopped=False, apply=True)
        self.assertEqual('at hard reboot', found.outcome)
        # nova-compute says so when it starts.
        self.restart_compute_service('compute1')
        self.assertIn('1 instance(s) on this host go back to stock\'s '
                      'layout at their next hard reboot',
                      self.stdlog.logger.output)
        # Marked only: a soft reboot changes nothing.
        self._reboot_server(server)
        self.assertEqual(['%s_disk' % server['id']],
                         self._instance_volumes(server))

        self._reboot_server(server, hard=True)
        disk = self.instance_path(server, 'disk')
        self.assertEqual([], self._instance_volumes(server))
        after = base.qemu_img_info(disk)
        # The same overlay on the same template, now stock's file.
        for key in ('format', 'virtual-size', 'full-backing-filename'):
            self.assertEqual(before[key], after[key], key)
        self.assertEqual('legacy', self._storage(server))
        self.assertEqual((disk, 'qcow2'), self._domain_source(server))
        self.assertEqual(base.IMAGE_MARKER, self.guest_head(disk, 'qcow2'))
        with open(self.instance_path(server, 'disk.info')) as f:
            self.assertIn('"%s": "qcow2"' % disk, f.read())
        # Never adopted into the pool again.
        self._reboot_server(server, hard=True)
        self.assertTrue(os.path.exists(disk))
        self.assertEqual([], self._instance_volumes(server))
        self._delete_server(server)
        self.assertFalse(os.path.exists(self.instance_path(server)))

    def _domain_format(self, server: dict[str, Any]) -> str:
        """The format the guest XML gives QEMU for the root disk."""
        fmt: str = self._domain_disk(server).find('driver').get('type')
        return fmt

    def _domain_source(self, server: dict[str, Any]) -> tuple[str, str]:
        """(file, format) of the guest's root disk, as the XML says."""
        disk = self._domain_disk(server)
        return (disk.find('source').get('file'),
                disk.find('driver').get('type'))

    def test_prepare_uninstall_then_stock_driver_starts_it(self) -> None:
        """Issue 31, the way back end to end: ``nova-imgtype
        prepare-uninstall --apply`` on a compute whose nova-compute is down
        takes its stopped pool instance to stock's files, undefines the
        pools and removes the plugin's traits from placement; then the
        compute runs stock's ``libvirt.LibvirtDriver``, which starts the
        instance on those files (stock's compute manager and driver) with
        the guest's data as they were."""
        self.start_compute('compute1', images_type='qcow2',
                           flags={'libvirt': {'use_storage_pools': True}})
        image = self.create_image('qcow2', size_mb=4)
        server = self.boot_server(image['id'], host='compute1')
        node = objects.ComputeNode.get_by_nodename(self.ctxt, 'compute1')
        self.assertTrue([t for t in self._get_provider_traits(node.uuid)
                         if t.startswith('CUSTOM_IMGTYPE_')])
        server = self._stop_server(server)
        service = objects.Service.get_by_compute_host(self.ctxt, 'compute1')
        self.computes['compute1'].stop()
        service.forced_down = True
        service.save()

        out = io.StringIO()
        with self.on_compute('compute1'), contextlib.redirect_stdout(out):
            code = prepare_uninstall.prepare(base.CONF, True, 'json',
                                             conn=self.conn)
        report = json.loads(out.getvalue())
        self.assertEqual(0, code, report)
        self.assertEqual(['moved'],
                         [i['outcome'] for i in report['instances']])
        # Out of the pool's directory (the pool itself is undefined).
        self.assertEqual([], [n for n in os.listdir(os.path.join(
            self.instances_path, 'disks')) if n.startswith(server['id'])])
        disk = self.instance_path(server, 'disk')
        self.assertTrue(os.path.exists(disk))
        self.assertEqual([], [p.name() for p in
                              self.conn.listAllStoragePools(0)
                              if p.name().startswith('nova-')])
        self.assertEqual([], [t for t in self._get_provider_traits(node.uuid)
                              if t.startswith('CUSTOM_IMGTYPE_')])

        # The compute back on stock's driver, which starts the instance.
        self.flags(compute_driver='libvirt.LibvirtDriver')
        self.driver_class = stock_driver.LibvirtDriver
        service.forced_down = False
        service.save()
        self.restart_compute_service('compute1')
        self.assertIs(stock_driver.LibvirtDriver,
                      type(self.computes['compute1'].manager.driver))
        server = self._start_server(server)
        path, fmt = self._domain_source(server)
        self.assertEqual((disk, 'qcow2'), (path, fmt))
        self.assertEqual(base.IMAGE_MARKER, self.guest_head(path, fmt))
        # Stock sets no trait of nova-imgtype's again.
        self.assertEqual([], [t for t in self._get_provider_traits(node.uuid)
                              if t.startswith('CUSTOM_IMGTYPE_')])
        self._delete_server(server)
        self.assertFalse(os.path.exists(self.instance_path(server)))

    # -- resize, cold migration, unshelve ------------------------------------

    def _volume_info(self, server: dict[str, Any],
                     name: str = 'disk') -> dict[str, Any]:
        vol = self._disks_pool().storageVolLookupByName(
            pool_specs.volume_name(server['id'], name))
        return base.qemu_img_info(vol.path())

    def _instance_volumes(self, server: dict[str, Any]) -> list[str]:
        pool = self._disks_pool()
        pool.refresh(0)
        return sorted(v.name() for v in pool.listAllVolumes(0)
                      if v.name().startswith(server['id']))

    def _storage(self, server: dict[str, Any]) -> str:
        inst = objects.Instance.get_by_uuid(
            self.ctxt, server['id'], expected_attrs=['system_metadata'])
        storage: str = inst.system_metadata['imgtype_storage']
        return storage

    def test_resize_revert_confirm_and_cold_migrate_on_pools(self) -> None:
        self.flags(allow_resize_to_same_host=True)
        pools_on = {'libvirt': {'use_storage_pools': True}}
        self.start_compute('compute1', images_type='qcow2', flags=pools_on)
        image = self.create_image('qcow2', size_mb=4)
        server = self.boot_server(image['id'], host='compute1')
        before = self._volume_info(server)
        self.assertEqual(1024 ** 3, before['virtual-size'])
        disk = pool_specs.volume_name(server['id'], 'disk')

        # Resize (same host) grows the volume; the original waits in
        # <instance>_resize for a revert.
        with self.on_compute('compute1'):
            server = self._resize_server(server, '2')
        grown = self._volume_info(server)
        self.assertEqual(20 * 1024 ** 3, grown['virtual-size'])
        self.assertEqual(before['full-backing-filename'],
                         grown['full-backing-filename'])
        self.assertEqual(base.IMAGE_MARKER, self.guest_head(
            self._disks_pool().storageVolLookupByName(disk).path(),
            self._domain_format(server)))
        backup = os.path.join(self.instance_path(server) + '_resize', disk)
        self.assertEqual(1024 ** 3,
                         base.qemu_img_info(backup)['virtual-size'])
        self.assertEqual('volume', self._domain_disk(server).get('type'))

        # Revert: the original volume is back, the grown copy is gone.
        with self.on_compute('compute1'):
            server = self._revert_resize(server)
        self.assertEqual(before, self._volume_info(server))
        self.assertFalse(os.path.exists(self.instance_path(server) +
                                        '_resize'))
        self.assertEqual([disk], self._instance_volumes(server))

        # Resize again and confirm: the grown volume stays, the backup goes.
        with self.on_compute('compute1'):
            server = self._resize_server(server, '2')
            server = self._confirm_resize(server)
        self.assertEqual(20 * 1024 ** 3,
                         self._volume_info(server)['virtual-size'])
        self.assertFalse(os.path.exists(self.instance_path(server) +
                                        '_resize'))
        self.assertEqual([disk], self._instance_volumes(server))

        # Cold migration to another pools compute (the harness's computes
        # share instances_path, as computes on shared storage do).
        self.start_compute('compute2', images_type='qcow2', flags=pools_on)
        with self.on_compute('compute2'):
            server = self._migrate_server(server, host='compute2',
                                          api=self.admin_api)
            server = self._confirm_resize(server)
        self.assertEqual('compute2', server['OS-EXT-SRV-ATTR:host'])
        after = self._volume_info(server)
        self.assertEqual(20 * 1024 ** 3, after['virtual-size'])
        self.assertEqual(before['full-backing-filename'],
                         after['full-backing-filename'])
        self.assertEqual('volume', self._domain_disk(server).get('type'))
        self.assertEqual('pools', self._storage(server))

        with self.on_compute('compute2'):
            self._delete_server(server)
        self.assertEqual([], self._instance_volumes(server))
        self.assertEqual([], os.listdir(os.path.join(self.instances_path,
                                                     'disks')))
        self.assertFalse(os.path.exists(self.instance_path(server)))

    def test_pool_instance_moves_to_a_host_without_pools(self) -> None:
        """A cold move to a host without storage pools that serves the
        instance's backend: the volumes become that backend's files there
        (a revert puts the volume back), and the backend stays."""
        self.start_compute('compute1', images_type='qcow2',
                           flags={'libvirt': {'use_storage_pools': True,
                                              'images_type_mapping':
                                              'qcow2:qcow2'}})
        self.start_compute('compute2', images_type='flat',
                           flags={'libvirt': {'images_type_mapping':
                                              'raw:flat'}})
        image = self.create_image('qcow2', size_mb=4)
        server = self.boot_server(image['id'], host='compute1')
        before = self._volume_info(server)
        disk = pool_specs.volume_name(server['id'], 'disk')

        with self.on_compute('compute2'):
            server = self._migrate_server(server, host='compute2',
                                          api=self.admin_api)
        self.assertEqual('compute2', server['OS-EXT-SRV-ATTR:host'])
        self.assertEqual('legacy', self._storage(server))
        info = base.qemu_img_info(self.instance_path(server, 'disk'))
        self.assertEqual('qcow2', info['format'])
        self.assertEqual(before['full-backing-filename'],
                         info['full-backing-filename'])
        self.assertEqual(base.IMAGE_MARKER, self.guest_head(
            self.instance_path(server, 'disk'), self._domain_format(server)))
        self.assertEqual('file', self._domain_disk(server).get('type'))

        # Revert: the pool volume is back on compute1, the record too.
        with self.on_compute('compute1'):
            server = self._revert_resize(server)
        self.assertEqual('compute1', server['OS-EXT-SRV-ATTR:host'])
        self.assertEqual('pools', self._storage(server))
        self.assertEqual(before, self._volume_info(server))
        self.assertEqual([disk], self._instance_volumes(server))
        self.assertEqual('volume', self._domain_disk(server).get('type'))

        # Again, confirmed: a qcow2 file on compute2, no volume left.
        with self.on_compute('compute2'):
            server = self._migrate_server(server, host='compute2',
                                          api=self.admin_api)
            server = self._confirm_resize(server)
        self.assertEqual([], self._instance_volumes(server))
        inst = objects.Instance.get_by_uuid(
            self.ctxt, server['id'], expected_attrs=['system_metadata'])
        self.assertEqual('qcow2', inst.system_metadata['imgtype_backend'])
        self.assertEqual(base.IMAGE_MARKER, self.guest_head(
            self.instance_path(server, 'disk'), self._domain_format(server)))
        with self.on_compute('compute2'):
            self._delete_server(server)
        self.assertFalse(os.path.exists(self.instance_path(server)))

    def test_legacy_instances_move_on_resize_and_unshelve(self) -> None:
        self.flags(allow_resize_to_same_host=True)
        self.flags(shelved_offload_time=0)
        self.start_compute('compute1', images_type='qcow2')
        image = self.create_image('qcow2', size_mb=4)
        resized = self.boot_server(image['id'], host='compute1')
        shelved = self.boot_server(image['id'], host='compute1')
        legacy_disk = self.instance_path(resized, 'disk')
        before = base.qemu_img_info(legacy_disk)
        uploads = self.capture_uploads()
        shelved = self._shelve_server(shelved)
        self.assertEqual(1, len(uploads))

        self.compute_flags['compute1'][('libvirt', 'use_storage_pools')] = (
            True)
        self.restart_compute_service('compute1')
        self.assertIn('1 instance(s) on this host still use legacy image '
                      'files', self.stdlog.logger.output)

        # Resize moves the legacy disk into the pool before the guest starts.
        resized = self._resize_server(resized, '2')
        self.assertEqual('pools', self._storage(resized))
        self.assertFalse(os.path.exists(legacy_disk))
        moved = self._volume_info(resized)
        self.assertEqual(20 * 1024 ** 3, moved['virtual-size'])
        self.assertEqual(before['full-backing-filename'],
                         moved['full-backing-filename'])
        self.assertEqual('volume', self._domain_disk(resized).get('type'))

        # Revert gives back the legacy file, untouched, and no volume.
        resized = self._revert_resize(resized)
        self.assertEqual('legacy', self._storage(resized))
        self.assertEqual([], self._instance_volumes(resized))
        self.assertEqual(before, base.qemu_img_info(legacy_disk))
        self.assertEqual('file', self._domain_disk(resized).get('type'))

        # Resize and confirm: on the pool for good, the file is gone.
        resized = self._resize_server(resized, '2')
        resized = self._confirm_resize(resized)
        self.assertEqual('pools', self._storage(resized))
        self.assertFalse(os.path.exists(legacy_disk))
        self.assertEqual(base.IMAGE_MARKER, self.guest_head(
            self._disks_pool().storageVolLookupByName(
                pool_specs.volume_name(resized['id'], 'disk')).path(),
            self._domain_format(resized)))

        # Unshelve makes the disk anew from the shelve snapshot: a volume.
        shelved = self._unshelve_server(shelved)
        self.assertEqual('pools', self._storage(shelved))
        self.assertEqual([pool_specs.volume_name(shelved['id'], 'disk')],
                         self._instance_volumes(shelved))
        self.assertEqual('volume', self._domain_disk(shelved).get('type'))
        self.assertEqual(base.IMAGE_MARKER, self.guest_head(
            self._disks_pool().storageVolLookupByName(
                pool_specs.volume_name(shelved['id'], 'disk')).path(),
            self._domain_format(shelved)))

        for server in (resized, shelved):
            self._delete_server(server)
            self.assertEqual([], self._instance_volumes(server))

    def test_ephemeral_and_swap_disks_are_volumes(self) -> None:
        # Made as stock makes them (mkfs'd ephemeral template, mkswap'd swap
        # template in the cache), then a volume on top of each.
        self.start_compute('compute1', images_type='qcow2',
                           flags={'libvirt': {'use_storage_pools': True}})
        flavor = self._create_flavor(memory_mb=512, vcpu=1, disk=1,
                                     ephemeral=1, swap=16)
        image = self.create_image('qcow2', size_mb=4)
        server = self.boot_server(image['id'], host='compute1',
                                  flavor_id=flavor)
        self.assertEqual(
            [pool_specs.volume_name(server['id'], n)
             for n in ('disk', 'disk.eph0', 'disk.swap')],
            self._instance_volumes(server))
        eph = self._volume_info(server, 'disk.eph0')
        self.assertEqual(1024 ** 3, eph['virtual-size'])
        eph_base = eph['full-backing-filename']
        self.assertEqual(self.base_dir, os.path.dirname(eph_base))
        with open(eph_base, 'rb') as f:
            f.seek(1024 + 56)  # ext2/3/4 superblock magic
            self.assertEqual(b'\x53\xef', f.read(2))
        swap = self._volume_info(server, 'disk.swap')
        self.assertEqual(os.path.join(self.base_dir, 'swap_16'),
                         swap['full-backing-filename'])
        xml = etree.fromstring(self.guest_xml[server['id']])
        self.assertEqual(
            ['volume'] * 3,
            [d.get('type') for d in xml.findall('devices/disk')
             if d.get('device') == 'disk'])
        self.assertFalse(os.path.exists(self.instance_path(server,
                                                           'disk.eph0')))

        self._delete_server(server)
        self.assertEqual([], self._instance_volumes(server))

    def test_raw_images_type_makes_copies_on_the_pool(self) -> None:
        self.start_compute('compute1', images_type='raw',
                           flags={'libvirt': {'use_storage_pools': True}})
        image = self.create_image('qcow2', size_mb=4)
        server = self.boot_server(image['id'], host='compute1')
        info = self._volume_info(server)
        # A standalone raw copy of the (converted) image, grown to the
        # flavor's root disk.
        self.assertEqual('raw', info['format'])
        self.assertNotIn('backing-filename', info)
        self.assertEqual(1024 ** 3, info['virtual-size'])
        vol = self._disks_pool().storageVolLookupByName(
            pool_specs.volume_name(server['id'], 'disk'))
        self.assertEqual(base.IMAGE_MARKER, self.guest_head(
            vol.path(), self._domain_format(server)))
        self.assertEqual('raw', self._storage_backend(server))
        self._delete_server(server)
        self.assertEqual([], self._instance_volumes(server))

    def _storage_backend(self, server: dict[str, Any]) -> str:
        inst = objects.Instance.get_by_uuid(
            self.ctxt, server['id'], expected_attrs=['system_metadata'])
        backend: str = inst.system_metadata['imgtype_backend']
        return backend

    def test_config_drive_kernel_and_ramdisk_are_volumes(self) -> None:
        self.start_compute('compute1', images_type='qcow2',
                           flags={'libvirt': {'use_storage_pools': True}})
        kernel = self.create_image('raw', container_format='aki')
        ramdisk = self.create_image('raw', container_format='ari')
        image = self.create_image('qcow2', size_mb=4, properties={
            'kernel_id': kernel['id'], 'ramdisk_id': ramdisk['id']})
        self.flags(force_config_drive=True)
        server = self.boot_server(image['id'], host='compute1')
        names = ('disk', 'disk.config', 'kernel', 'ramdisk')
        self.assertEqual(sorted(pool_specs.volume_name(server['id'], n)
                                for n in names),
                         self._instance_volumes(server))
        pool = self._disks_pool()
        # The config drive is the ISO stock built, imported into the pool;
        # no copy is left in the instance directory.
        config = pool.storageVolLookupByName(
            pool_specs.volume_name(server['id'], 'disk.config'))
        with open(config.path(), 'rb') as f:
            f.seek(0x8001)
            self.assertEqual(b'CD001', f.read(5))
        self.assertFalse(os.path.exists(self.instance_path(server,
                                                           'disk.config')))
        xml = etree.fromstring(self.guest_xml[server['id']])
        cdrom = [d for d in xml.findall('devices/disk')
                 if d.get('device') == 'cdrom'][0]
        self.assertEqual('volume', cdrom.get('type'))
        self.assertEqual(pool_specs.volume_name(server['id'], 'disk.config'),
                         cdrom.find('source').get('volume'))
        # <kernel> and <initrd> are the volumes' files, with the images'
        # bytes.
        for tag, name, img in (('kernel', 'kernel', kernel),
                               ('initrd', 'ramdisk', ramdisk)):
            vol = pool.storageVolLookupByName(
                pool_specs.volume_name(server['id'], name))
            self.assertEqual(vol.path(), xml.findtext('os/' + tag))
            with open(vol.path(), 'rb') as f, \
                    open(self.image_files[img['id']], 'rb') as g:
                self.assertEqual(g.read(), f.read())
        self.assertFalse(os.path.exists(self.instance_path(server,
                                                           'kernel')))

        self._delete_server(server)
        self.assertEqual([], self._instance_volumes(server))
