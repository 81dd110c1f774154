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

import urllib.parse
from typing import Any

import fixtures
import nova.conf
import os_traits
from nova import context as nova_context
from nova import objects
from nova.scheduler import request_filter
from nova.scheduler.client import report
from nova.tests.functional.api import client as api_client

from nova_imgtype import traits as imgtype_traits
from nova_imgtype.cmd import status
from nova_imgtype.scheduler import request_filters
from nova_imgtype_testing import functional as base

CONF = nova.conf.CONF
NATIVE = {'force_raw_images': False}
CONVERT = {'force_raw_images': True}


class ImageTypeSchedulingTest(base.ImgtypeServersTestBase):

    def setUp(self) -> None:
        super().setUp()
        self.enable_image_type_filter()
        self.assertIn(request_filters.image_type_support,
                      request_filter.ALL_REQUEST_FILTERS)
        self.flags(allow_resize_to_same_host=False)
        #: Hosts live migrations went to (see _migrate_stub).
        self.migrated: list[str] = []

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

    def _node(self, host: str) -> objects.ComputeNode:
        return objects.ComputeNode.get_by_host_and_nodename(
            nova_context.get_admin_context(), host, host)

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
        # What each compute node's stats tell ImageTypeSupportFilter is
        # what placement holds.
        for host, traits in (('native', native), ('convert', convert),
                             ('narrow', narrow)):
            self.assertEqual(
                {t for t in traits if imgtype_traits.is_image_type(t)},
                imgtype_traits.from_stats(self._node(host).stats), host)

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

    def test_host_filter_does_the_request_filters_job(self) -> None:
        """The request filter off, ``ImageTypeSupportFilter`` enabled
        instead: the same hosts, from each compute node's stats without a
        placement request; for computes whose stats list no image-type
        traits (without nova-imgtype, or from before it listed them), one
        placement request per filtering pass, whatever the number of hosts
        (stock's scheduler filters once per instance of a multi-create, and
        once more for the alternates)."""
        self.flags(filter_hosts_by_image_type_support=False,
                   group='scheduler')
        self.flags(enabled_filters=(
            CONF.filter_scheduler.enabled_filters +
            ['ImageTypeSupportFilter']), group='filter_scheduler')
        self.restart_scheduler()
        self._start('native', 'convert', 'narrow')
        asked: list[str] = []
        real_get = report.SchedulerReportClient.get

        def get(client: Any, url: str, *args: Any, **kwargs: Any) -> Any:
            if url.startswith('/resource_providers?required='):
                asked.append(urllib.parse.unquote(url.split('=', 1)[1]))
            return real_get(client, url, *args, **kwargs)

        self.useFixture(fixtures.MonkeyPatch(
            'nova.scheduler.client.report.SchedulerReportClient.get', get))
        cases = (
            ('vmdk', 3, '1', {'convert'}, os_traits.COMPUTE_IMAGE_TYPE_VMDK),
            ('qcow2', 3, self._native_flavor(), {'native'},
             ','.join(sorted((os_traits.COMPUTE_IMAGE_TYPE_QCOW2,
                              'CUSTOM_IMGTYPE_NATIVE_QCOW2')))))
        for stats_listed in (True, False):
            for fmt, count, flavor, allowed, traits in cases:
                if not stats_listed:
                    for host in ('native', 'convert', 'narrow'):
                        node = self._node(host)
                        node.stats = {
                            k: v for k, v in node.stats.items()
                            if k != imgtype_traits.STATS_KEY}
                        node.save()
                asked.clear()
                image = self.create_image(fmt)
                self.assertEqual(allowed, self._boot_many(
                    image['id'], count, flavor), fmt)
                self.assertEqual(
                    [] if stats_listed else [traits] * (count + 1), asked,
                    fmt)
                for server in self.api.get_servers():
                    self._delete_server(server)
        # Raw: anywhere, including the host that excludes qcow2.
        image = self.create_image('raw')
        server = self.boot_server(image['id'], host='narrow')
        self.assertEqual('narrow', server['OS-EXT-SRV-ATTR:host'])

    def test_boot_from_volume_is_unaffected(self) -> None:
        """Only 'narrow' (no qcow2) is up: booting a qcow2 image fails, but
        booting from a volume made from that qcow2 image goes ahead (the
        image is Cinder's business, not the host's).

        The volume is created from the image by the boot (BDM ``source_type
        image``, ``destination_type volume``): the request spec then carries
        the image's metadata from Glance, disk_format qcow2 included, and
        ``is_bfv``, so it is the filter that must leave it alone. (A boot
        from an existing volume carries no disk_format at all: stock Nova's
        ``get_image_metadata_from_volume`` drops it.)
        """
        self._start('narrow')
        image = self.create_image('qcow2')
        # Control: the same image, image-backed, has nowhere to go.
        server = self._create_server(image_uuid=image['id'], networks='none',
                                     expected_state='ERROR')
        self.assertIn('No valid host', server['fault']['message'])
        self._delete_server(server)

        self.useFixture(base.nova_fixtures.CinderFixture(self))
        server = self._build_server(networks='none')
        server.pop('imageRef')
        server['block_device_mapping_v2'] = [{
            'boot_index': 0, 'source_type': 'image', 'uuid': image['id'],
            'destination_type': 'volume', 'volume_size': 1,
            'delete_on_termination': True}]
        with self.on_compute('narrow'):
            server = self.api.post_server({'server': server})
            server = self._wait_for_state_change(server, 'ACTIVE')
        self.assertEqual('narrow', server['OS-EXT-SRV-ATTR:host'])
        self.assertEqual('', server['image'])

    def test_moves_keep_the_requirement(self) -> None:
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

    def _lure_to_narrow(self) -> None:
        """Put a raw server on 'native2', so that of 'narrow' and 'native2'
        the scheduler's weighers (free RAM, CPU, disk, I/O ops) prefer
        'narrow': without the filter a move would go there, with it it
        must go to 'native2'."""
        raw = self.create_image('raw')
        self.boot_server(raw['id'], host='native2', name='lure')

    def _disable(self, host: str) -> None:
        service = self.admin_api.get_services(host=host,
                                              binary='nova-compute')[0]
        self.admin_api.put_service(service['id'], {'status': 'disabled'})

    def test_evacuate_keeps_the_requirement(self) -> None:
        self._start('native', 'narrow')
        image = self.create_image('qcow2')
        server = self.boot_server(image['id'])
        self.assertEqual('native', server['OS-EXT-SRV-ATTR:host'])
        self.computes['native'].stop()
        self.admin_api.put_service_force_down(
            self.admin_api.get_services(host='native',
                                        binary='nova-compute')[0]['id'],
            True)

        # The only other host, 'narrow', cannot use qcow2: NoValidHost, as
        # stock reports it (server in ERROR with the fault, migration in
        # error). The harness's RPC casts are calls: the conductor's
        # NoValidHost also comes back to the API request.
        with self.on_compute('narrow'):
            ex = self.assertRaises(api_client.OpenStackApiException,
                                   self.admin_api.post_server_action,
                                   server['id'], {'evacuate': {}})
        self.assertIn('NoValidHost', str(ex))
        self._wait_for_migration_status(server, ['error'])
        server = self._wait_for_server_parameter(
            server, {'status': 'ERROR', 'OS-EXT-SRV-ATTR:host': 'native',
                     'OS-EXT-STS:task_state': None})
        self.assertIn('No valid host', server['fault']['message'])

        # 'native2' can (and 'narrow' is the weighers' choice): it goes to
        # 'native2'. (Evacuated guests come back SHUTOFF in this harness,
        # as stock's own _evacuate_server helper expects; one evacuated
        # from ERROR comes back ACTIVE.)
        self._start('native2')
        self._lure_to_narrow()
        with self.on_compute('native2'):
            self.admin_api.post_server_action(server['id'],
                                              {'evacuate': {}})
            self._wait_for_migration_status(server, ['done'])
            server = self._wait_for_server_parameter(
                server, {'OS-EXT-SRV-ATTR:host': 'native2',
                         'OS-EXT-STS:task_state': None})

    def test_unshelve_keeps_the_requirement(self) -> None:
        self.flags(shelved_offload_time=0)
        self._start('native', 'narrow')
        image = self.create_image('qcow2')
        server = self.boot_server(image['id'])
        self.assertEqual('native', server['OS-EXT-SRV-ATTR:host'])
        uploads = self.capture_uploads()
        server = self._shelve_server(server)
        # The shelve snapshot is qcow2 too.
        self.assertEqual('qcow2', uploads[0][0]['disk_format'])
        self._disable('native')

        # Only 'narrow' is left, and it cannot use qcow2: NoValidHost. Stock
        # conductor leaves the server SHELVED_OFFLOADED, without a host or a
        # task, and says so in its log (it records no fault).
        self.api.post_server_action(server['id'], {'unshelve': None})
        server = self._wait_for_server_parameter(
            server, {'status': 'SHELVED_OFFLOADED',
                     'OS-EXT-STS:task_state': None,
                     'OS-EXT-SRV-ATTR:host': None})
        self.assertIn('No valid host found for unshelve instance',
                      self.stdlog.logger.output)
        self.assertNotIn('fault', server)

        # 'native2' can (and 'narrow' is the weighers' choice).
        self._start('native2')
        self._lure_to_narrow()
        with self.on_compute('native2'):
            server = self._unshelve_server(server)
        self.assertEqual('native2', server['OS-EXT-SRV-ATTR:host'])

    def test_scheduled_live_migration_keeps_the_requirement(self) -> None:
        """Live migration without a target host: conductor's
        LiveMigrationTask asks the scheduler (select_destinations, where
        process_reqspec runs the request filters) for a destination."""
        self.useFixture(fixtures.MonkeyPatch(
            'nova.tests.fixtures.libvirt.Domain.migrateToURI3',
            self._migrate_stub))
        self._start('native', 'narrow')
        image = self.create_image('qcow2')
        server = self.boot_server(image['id'])
        self.assertEqual('native', server['OS-EXT-SRV-ATTR:host'])

        # Only 'narrow' could take it, and it cannot use qcow2: the
        # migration fails to find a host (migration in error), the server
        # stays where it was, ACTIVE. (The harness's RPC casts are calls:
        # the conductor's NoValidHost also comes back to the API request.)
        with self.on_compute('narrow'):
            ex = self.assertRaises(
                api_client.OpenStackApiException,
                self.admin_api.post_server_action, server['id'],
                {'os-migrateLive': {'host': None,
                                    'block_migration': 'auto'}})
        self.assertIn('NoValidHost', str(ex))
        self._wait_for_migration_status(server, ['error'])
        server = self._wait_for_server_parameter(
            server, {'status': 'ACTIVE', 'OS-EXT-SRV-ATTR:host': 'native',
                     'OS-EXT-STS:task_state': None})
        event = self._wait_for_action_fail_completion(
            server, 'live-migration', 'conductor_live_migrate_instance')
        self.assertIn('NoValidHost', event.get('traceback') or
                      event['details'])
        self.assertEqual([], self.migrated)

        # 'native2' can (and 'narrow' is the weighers' choice).
        self._start('native2')
        self._lure_to_narrow()
        with self.on_compute('native2'):
            server = self._live_migrate(server, api=self.admin_api)
        self.assertEqual('native2', server['OS-EXT-SRV-ATTR:host'])
        self.assertEqual(['native2'], self.migrated)

    def _migrate_stub(self, domain: Any, destination: str,
                      params: dict[str, Any], flags: int) -> None:
        """fakelibvirt's migrateToURI3 always fails: the guest appears on
        the destination host (``qemu+tcp://<host>/system``) and the job
        completes, like stock's LibvirtMigrationMixin."""
        host = urllib.parse.urlparse(destination).hostname
        assert host is not None
        self.computes[host].driver._host.get_connection().createXML(
            params['destination_xml'],
            'fake-createXML-doesnt-care-about-flags')
        domain.complete_job()
        self.migrated.append(host)

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
        # And the instance still names the image it runs (the API saved the
        # refused one): later moves are scheduled for raw, not qcow2.
        self.assertEqual(raw['id'], server['image']['id'])
        inst = objects.Instance.get_by_uuid(
            nova_context.get_admin_context(), server['id'])
        self.assertEqual(raw['id'], inst.image_ref)
        self.assertEqual('raw', inst.system_metadata['image_disk_format'])
        self.assertEqual(raw['id'],
                         inst.system_metadata['image_base_image_ref'])
        # A rebuild to a format it can use goes ahead.
        raw2 = self.create_image('raw')
        with self.on_compute('narrow'):
            server = self._rebuild_server(server, raw2['id'])
        self.assertEqual(raw2['id'], server['image']['id'])
