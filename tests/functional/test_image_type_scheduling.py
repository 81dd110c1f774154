"""Scheduling by image format in stock Nova's harness, real placement.

The scheduler loads nova-imgtype the stock way
(``[filter_scheduler]available_filters`` gets
``nova_imgtype.scheduler.filters.all_filters`` next to Nova's default, and
the scheduler is restarted to read it). Computes run our driver with real
disks; their traits are what our driver and Nova's resource tracker put in
placement. Fake: libvirt domains (fakelibvirt), Glance (GlanceFixture with
real image bytes).

The three computes:

* ``native`` images_type=qcow2, force_raw_images=False: uses raw and qcow2
  as they are.
* ``convert`` images_type=flat, force_raw_images=True: converts qcow2,
  vmdk, vdi, vhd(x) to raw.
* ``narrow`` images_type=qcow2 with ``[compute]image_type_exclude_list =
  qcow2, iso``: raw only, as the operator says.

Nobody boots ploop (it needs ``virt_type = parallels``).
"""

from __future__ import annotations

import os_traits
from nova.scheduler import request_filter
from nova.tests.functional.api import client as api_client

from nova_imgtype.cmd import status
from nova_imgtype.scheduler import request_filters
from tests.functional import base

NATIVE = {'force_raw_images': False}
CONVERT = {'force_raw_images': True}


class ImageTypeSchedulingTest(base.ImgtypeServersTestBase):

    def setUp(self) -> None:
        super().setUp()
        saved = list(request_filter.ALL_REQUEST_FILTERS)
        self.addCleanup(request_filter.ALL_REQUEST_FILTERS.__setitem__,
                        slice(None), saved)
        self.flags(available_filters=[
            'nova.scheduler.filters.all_filters',
            'nova_imgtype.scheduler.filters.all_filters'],
            group='filter_scheduler')
        self.flags(filter_hosts_by_image_type_support=True,
                   group='scheduler')
        self.restart_scheduler()
        self.assertIn(request_filters.image_type_support,
                      request_filter.ALL_REQUEST_FILTERS)
        self.flags(allow_resize_to_same_host=False)

    def _start(self, *hosts: str) -> None:
        options = {
            'native': dict(images_type='qcow2', **NATIVE),
            'native2': dict(images_type='qcow2', **NATIVE),
            'convert': dict(images_type='flat', **CONVERT),
            'narrow': dict(images_type='qcow2', flags={
                'compute': {'image_type_exclude_list': ['qcow2', 'iso']}},
                **NATIVE),
        }
        # [compute]image_type_exclude_list is read whenever a compute
        # updates placement (every claim), from the one global CONF of the
        # harness: 'narrow' starts first, so that the options in CONF
        # afterwards are those of a compute excluding nothing, and
        # operations on 'narrow' run under on_compute('narrow').
        for host in sorted(hosts, key=lambda h: h != 'narrow'):
            self.start_compute(host, **options[host])

    def _traits(self, host: str) -> set[str]:
        return set(self._get_provider_traits(
            self._get_provider_uuid_by_host(host)))

    def _boot_many(self, image_id: str, count: int,
                   flavor_id: str = '1') -> set[str]:
        """Boot ``count`` servers in one request; the hosts they got."""
        self.api.post_server({'server': {
            'name': 'many', 'imageRef': image_id, 'flavorRef': flavor_id,
            'networks': 'none', 'min_count': count}})
        servers = [s for s in self.api.get_servers(detail=True)
                   if s['name'].startswith('many')]
        self.assertEqual(count, len(servers))
        servers = [self._wait_for_state_change(s, 'ACTIVE') for s in servers]
        return {s['OS-EXT-SRV-ATTR:host'] for s in servers}

    def _native_flavor(self) -> str:
        flavor_id: str = self._create_flavor(
            memory_mb=512, vcpu=1, disk=1, ephemeral=0,
            extra_spec={'imgtype:native': 'required'})
        return flavor_id

    def test_traits_in_placement(self) -> None:
        self._start('native', 'convert', 'narrow')
        native, convert, narrow = (self._traits(h) for h in
                                   ('native', 'convert', 'narrow'))
        for traits in (native, convert):
            self.assertIn(os_traits.COMPUTE_IMAGE_TYPE_ISO, traits)
        self.assertLessEqual({os_traits.COMPUTE_IMAGE_TYPE_QCOW2,
                              'CUSTOM_IMGTYPE_NATIVE_QCOW2',
                              'CUSTOM_IMGTYPE_NATIVE_RAW'}, native)
        self.assertNotIn(os_traits.COMPUTE_IMAGE_TYPE_VMDK, native)
        self.assertLessEqual({os_traits.COMPUTE_IMAGE_TYPE_QCOW2,
                              os_traits.COMPUTE_IMAGE_TYPE_VMDK,
                              'CUSTOM_IMGTYPE_NATIVE_RAW'}, convert)
        self.assertNotIn('CUSTOM_IMGTYPE_NATIVE_QCOW2', convert)
        self.assertNotIn('CUSTOM_IMGTYPE_NATIVE_VMDK', convert)
        self.assertIn(os_traits.COMPUTE_IMAGE_TYPE_RAW, narrow)
        for excluded in ('QCOW2', 'ISO'):
            self.assertNotIn('COMPUTE_IMAGE_TYPE_' + excluded, narrow)
            self.assertNotIn('CUSTOM_IMGTYPE_NATIVE_' + excluded, narrow)
        for traits in (native, convert, narrow):
            self.assertNotIn(os_traits.COMPUTE_IMAGE_TYPE_PLOOP, traits)

    def test_images_land_only_where_they_can_be_used(self) -> None:
        self._start('native', 'convert', 'narrow')
        for fmt, count, allowed in (('vmdk', 3, {'convert'}),
                                    ('qcow2', 4, {'native', 'convert'}),
                                    ('iso', 3, {'native', 'convert'})):
            image = self.create_image(fmt)
            hosts = self._boot_many(image['id'], count)
            self.assertLessEqual(hosts, allowed, fmt)
            for server in self.api.get_servers():
                self._delete_server(server)
        # Native only: qcow2 used as is.
        image = self.create_image('qcow2')
        hosts = self._boot_many(image['id'], 4, self._native_flavor())
        self.assertEqual({'native'}, hosts)
        for server in self.api.get_servers():
            self._delete_server(server)
        # Raw: anywhere, including the host that excludes qcow2.
        image = self.create_image('raw')
        server = self.boot_server(image['id'], host='narrow')
        self.assertEqual('narrow', server['OS-EXT-SRV-ATTR:host'])

    def test_unsupported_format_ends_in_no_valid_host(self) -> None:
        self._start('native', 'convert', 'narrow')
        image = self.create_image('ploop')
        server = self._create_server(image_uuid=image['id'], networks='none',
                                     expected_state='ERROR')
        self.assertIn('No valid host', server['fault']['message'])
        # The operator excluded qcow2 on 'narrow': asking for it there fails.
        image = self.create_image('qcow2')
        server = self._create_server(image_uuid=image['id'], networks='none',
                                     host='narrow', expected_state='ERROR')
        self.assertIn('No valid host', server['fault']['message'])

    def test_toggle_off_is_stock(self) -> None:
        self._start('native', 'convert', 'narrow')
        self.flags(filter_hosts_by_image_type_support=False,
                   group='scheduler')
        image = self.create_image('qcow2')
        server = self.boot_server(image['id'], host='narrow')
        self.assertEqual('narrow', server['OS-EXT-SRV-ATTR:host'])

    def test_boot_from_volume_is_unaffected(self) -> None:
        self._start('narrow')
        image = self.create_image('qcow2')
        server = self._build_server(image_uuid='', networks='none')
        server['block_device_mapping_v2'] = [{
            'boot_index': 0, 'uuid': base.nova_fixtures.CinderFixture.
            IMAGE_BACKED_VOL, 'source_type': 'volume',
            'destination_type': 'volume'}]
        self.useFixture(base.nova_fixtures.CinderFixture(self))
        server = self.api.post_server({'server': server})
        server = self._wait_for_state_change(server, 'ACTIVE')
        self.assertEqual('narrow', server['OS-EXT-SRV-ATTR:host'])
        del image

    def test_moves_keep_the_requirement(self) -> None:
        self.flags(shelved_offload_time=0)
        self._start('native', 'narrow')
        image = self.create_image('qcow2')
        flavor = self._native_flavor()
        server = self.boot_server(image['id'], flavor_id=flavor)
        self.assertEqual('native', server['OS-EXT-SRV-ATTR:host'])

        # The only other host cannot use qcow2: migrate and resize fail
        # before anything moves.
        for action in ({'migrate': None},
                       {'resize': {'flavorRef': self._create_flavor(
                           memory_mb=512, vcpu=1, disk=2, ephemeral=0,
                           extra_spec={'imgtype:native': 'required'})}}):
            ex = self.assertRaises(api_client.OpenStackApiException,
                                   self.admin_api.post_server_action,
                                   server['id'], action)
            self.assertRegex(str(ex), '(?i)no ?valid ?host')
            server = self._wait_for_state_change(server, 'ACTIVE')
            self.assertEqual('native', server['OS-EXT-SRV-ATTR:host'])

        # A second native host: moves go there, never to 'narrow'.
        self._start('native2')
        with self.on_compute('native2'):
            server = self._migrate_server(server, api=self.admin_api)
            self.assertEqual('native2', server['OS-EXT-SRV-ATTR:host'])
            server = self._confirm_resize(server)

        # Unshelve: the shelve snapshot is qcow2 too.
        uploads = self.capture_uploads()
        server = self._shelve_server(server)
        self.assertEqual('qcow2', uploads[0][0]['disk_format'])
        server = self._unshelve_server(server)
        self.assertIn(server['OS-EXT-SRV-ATTR:host'], ('native', 'native2'))


    def test_evacuate_keeps_the_requirement(self) -> None:
        self._start('native', 'narrow', 'native2')
        image = self.create_image('qcow2')
        server = self.boot_server(image['id'], host='native',
                                  flavor_id=self._native_flavor())
        self.computes['native'].stop()
        self.admin_api.put_service_force_down(
            self.admin_api.get_services(host='native',
                                        binary='nova-compute')[0]['id'],
            True)
        # 'narrow' cannot use qcow2: the only choice is 'native2'.
        with self.on_compute('native2'):
            self.admin_api.post_server_action(server['id'],
                                              {'evacuate': {}})
            # (Evacuated guests come back SHUTOFF in this harness, as
            # stock's own _evacuate_server helper expects.)
            server = self._wait_for_server_parameter(
                server, {'OS-EXT-SRV-ATTR:host': 'native2',
                         'OS-EXT-STS:task_state': None})

    def test_traits_follow_a_config_change_and_restart(self) -> None:
        self._start('native')
        self.assertIn('CUSTOM_IMGTYPE_NATIVE_QCOW2', self._traits('native'))
        self.assertNotIn(os_traits.COMPUTE_IMAGE_TYPE_VMDK,
                         self._traits('native'))
        self.compute_flags['native'][(None, 'force_raw_images')] = True
        self.restart_compute_service('native')
        traits = self._traits('native')
        self.assertNotIn('CUSTOM_IMGTYPE_NATIVE_QCOW2', traits)
        self.assertIn(os_traits.COMPUTE_IMAGE_TYPE_QCOW2, traits)
        self.assertIn(os_traits.COMPUTE_IMAGE_TYPE_VMDK, traits)

    def test_upgrade_check_names_nodes_without_traits(self) -> None:
        self._start('native', 'convert')
        checks = status.Checks()
        self.assertEqual(0, checks._check_image_type_traits().code)
        # 'convert' as an old compute would be: no image-type traits.
        rp = self._get_provider_uuid_by_host('convert')
        self._set_provider_traits(rp, [
            t for t in self._get_provider_traits(rp)
            if not t.startswith('COMPUTE_IMAGE_TYPE_')])
        result = checks._check_image_type_traits()
        self.assertEqual(2, result.code)        # failure: the toggle is on
        self.assertIn('convert', result.details)
        self.assertNotIn('native', result.details.split(':', 1)[1]
                         .split('.')[0])
        self.flags(filter_hosts_by_image_type_support=False,
                   group='scheduler')
        self.assertEqual(1, checks._check_image_type_traits().code)

    def test_rebuild_to_an_unusable_format_is_refused_by_the_driver(
            self) -> None:
        self._start('narrow')
        raw = self.create_image('raw')
        server = self.boot_server(raw['id'], host='narrow')
        disk = self.instance_path(server, 'disk')
        before = base.qemu_img_info(disk)
        with open(disk, 'rb') as f:
            head = f.read(4096)
        qcow2 = self.create_image('qcow2')
        with self.on_compute('narrow'):
            # The harness's RPC casts are calls: the compute's refusal comes
            # back to the API request (in a cloud it is the instance's
            # fault, and the instance is put back as it was).
            ex = self.assertRaises(
                api_client.OpenStackApiException,
                self.api.post_server_action, server['id'],
                {'rebuild': {'imageRef': qcow2['id']}})
            server = self._wait_for_server_parameter(
                server, {'status': 'ACTIVE', 'OS-EXT-STS:task_state': None})
        self.assertIn('host narrow cannot use disk_format qcow2', str(ex))
        # Refused before anything was touched: the same disk, running.
        self.assertEqual(before, base.qemu_img_info(disk))
        with open(disk, 'rb') as f:
            self.assertEqual(head, f.read(4096))
        # A rebuild to a format it can use goes ahead.
        raw2 = self.create_image('raw')
        with self.on_compute('narrow'):
            server = self._rebuild_server(server, raw2['id'])
        self.assertEqual(raw2['id'], server['image']['id'])
