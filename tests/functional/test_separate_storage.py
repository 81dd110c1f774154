"""Moves between computes with storage of their own (issue 12).

Stock Nova's harness, but each compute sees its own directory at
``instances_path`` (a mount namespace per compute) and has its own
throwaway libvirtd, as computes without shared storage have: stock's
check for shared storage answers False, disks are copied host to host
(through the destination's libvirtd), and ``destroy_disks=True`` runs on
the host an instance left: a revert on the destination, a confirm on the
source, the clean-up of an evacuated instance when its source comes back.
Each move carries guest data written into the instance's disk before it.

Real: Nova's API, conductor, scheduler, placement and compute manager, our
driver, every disk, the libvirt daemons, their pools, volumes and streams,
qemu-img and qemu-io. Fake: libvirt *domains* (fakelibvirt) and Glance
(GlanceFixture with real image bytes).
"""

from __future__ import annotations

import json
import os
from typing import Any
from xml.etree import ElementTree

from nova import context as nova_context
from nova import objects
from nova.virt.libvirt import imagecache as nova_imagecache

from nova_imgtype import record as record_mod
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype_testing import functional_hosts as base

MiB = 1024 * 1024
#: Guest data written into an instance's disk before a move:
#: (offset, length, byte pattern).
DATA = (3 * MiB, 64 * 1024, 0x5a)
POOLS_ON = {'libvirt': {'use_storage_pools': True}}


class _MovesBase(base.SeparateStorageTestBase):

    def setUp(self) -> None:
        super().setUp()
        self.ctxt = nova_context.get_admin_context()

    def _start(self, *, pools_on: bool) -> None:
        for host in ('compute1', 'compute2'):
            self.start_compute(host, images_type='qcow2',
                               flags=POOLS_ON if pools_on else None)

    def _boot(self) -> dict[str, Any]:
        image = self.create_image('qcow2', size_mb=4)
        server = self.boot_server(image['id'], host='compute1')
        self.write_guest('compute1', self.disk_of(server, 'compute1'),
                         self.domain_format('compute1', server), *DATA)
        return server

    def disk_of(self, server: dict[str, Any], host: str) -> str:
        """The root disk's path on ``host`` (where the instance runs)."""
        return self.instance_path(server, 'disk')

    def owned_by(self, server: dict[str, Any], host: str) -> list[str]:
        """What of ``server`` is on ``host``'s storage."""
        return [n for n in self.listing(host) if n.startswith(server['id'])]

    def whole(self, server: dict[str, Any]) -> list[str]:
        """What of ``server`` a compute it runs on has: its directory."""
        return [server['id']]

    def assert_runs_on(self, server: dict[str, Any], host: str) -> None:
        self.assertEqual(host, server['OS-EXT-SRV-ATTR:host'])
        self.assertTrue(self.guest_has(host, self.disk_of(server, host),
                                       self.domain_format(host, server),
                                       *DATA),
                        'guest data lost on %s' % host)

    def storage_record(self, server: dict[str, Any]) -> str:
        inst = objects.Instance.get_by_uuid(
            self.ctxt, server['id'], expected_attrs=['system_metadata'])
        record: str = inst.system_metadata['imgtype_storage']
        return record

    def _evacuate_from_compute1(self, server: dict[str, Any]) -> None:
        self.computes['compute1'].stop()
        self.admin_api.put_service_force_down(
            self._service_id('compute1'), True)
        self.admin_api.post_server_action(server['id'], {'evacuate': {}})
        self._wait_for_migration_status(server, ['done'])
        self._wait_for_server_parameter(
            server, {'OS-EXT-SRV-ATTR:host': 'compute2',
                     'OS-EXT-STS:task_state': None})

    def _bring_back(self, host: str) -> None:
        self.restart_compute_service(host)
        self.admin_api.put_service_force_down(self._service_id(host), False)

    def _service_id(self, host: str) -> str:
        service_id: str = self.admin_api.get_services(
            host=host, binary='nova-compute')[0]['id']
        return service_id

    def _boot_with_disks(self, disk_format: str,
                         swap: int = 16) -> dict[str, Any]:
        """A server on compute1 with a root, a 1 GiB ephemeral and (if
        ``swap``) a swap disk of ``swap`` MiB."""
        image = self.create_image(disk_format, size_mb=4)
        flavor = self._create_flavor(memory_mb=512, vcpu=1, disk=1,
                                     ephemeral=1, swap=swap)
        return self.boot_server(image['id'], host='compute1',
                                flavor_id=flavor)

    def assert_template_recorded(self, server: dict[str, Any]) -> None:
        """The root disk's template is recorded as the image's own cache
        name (qcow2 converted as stock converts it: stock's name)."""
        inst = objects.Instance.get_by_uuid(
            self.ctxt, server['id'], expected_attrs=['system_metadata'])
        image_id = server['image']['id']
        self.assertEqual(
            (image_id, nova_imagecache.get_cache_fname(image_id)),
            record_mod.template(inst.system_metadata))


class FileDisksTest(_MovesBase):
    """Instances with their disks as files (no storage pools)."""

    def test_cold_migration_revert_and_confirm(self) -> None:
        self._start(pools_on=False)
        server = self._boot()
        uuid = server['id']
        self.assertEqual([], self.owned_by(server, 'compute2'))
        self.assert_template_recorded(server)

        server = self._migrate_server(server, host='compute2',
                                      api=self.admin_api)
        self.assert_runs_on(server, 'compute2')
        self.assertEqual([uuid + '_resize'],
                         self.owned_by(server, 'compute1'))

        # Revert: back on compute1 with its data; what compute2 had of it
        # is gone (destroy_disks=True there).
        server = self._revert_resize(server)
        self.assert_runs_on(server, 'compute1')
        self.assertEqual([uuid], self.owned_by(server, 'compute1'))
        self.assertEqual([], self.owned_by(server, 'compute2'))

        # Again, confirmed: nothing of it is left on compute1.
        server = self._migrate_server(server, host='compute2',
                                      api=self.admin_api)
        server = self._confirm_resize(server)
        self.assert_runs_on(server, 'compute2')
        self.assertEqual([], self.owned_by(server, 'compute1'))
        self.assertEqual([uuid], self.owned_by(server, 'compute2'))

        self.assert_template_recorded(server)
        self._delete_server(server)
        self.assertEqual([], self.owned_by(server, 'compute2'))

    def test_evacuation_and_the_source_coming_back(self) -> None:
        self._start(pools_on=False)
        server = self._boot()
        self._evacuate_from_compute1(server)

        # Rebuilt on compute2 from the image (the disk did not follow:
        # storage is not shared); compute1's copy is still there while it
        # is down.
        whole = self.whole(server)
        self.assertEqual(whole, self.owned_by(server, 'compute2'))
        self.assertEqual(whole, self.owned_by(server, 'compute1'))
        self.assertFalse(self.guest_has(
            'compute2', self.disk_of(server, 'compute2'),
            self.domain_format('compute2', server), *DATA))
        self.assertTrue(self.guest_has(
            'compute1', self.disk_of(server, 'compute1'),
            self.domain_format('compute1', server), *DATA))

        # compute1 comes back: it destroys the evacuated instance there,
        # disks included (not shared), and nothing on compute2.
        self._bring_back('compute1')
        self.assertEqual([], self.owned_by(server, 'compute1'))
        self.assertEqual(whole, self.owned_by(server, 'compute2'))

class PoolDisksTest(FileDisksTest):
    """The same moves with the disks as volumes of each compute's pools."""

    def _start(self, *, pools_on: bool) -> None:
        super()._start(pools_on=True)

    def disk_of(self, server: dict[str, Any], host: str) -> str:
        vol = self.connections[host].storagePoolLookupByName(
            pool_specs.DISKS_POOL).storageVolLookupByName(
                pool_specs.volume_name(server['id'], 'disk'))
        path: str = vol.path()
        return path

    def whole(self, server: dict[str, Any]) -> list[str]:
        """Its directory and its root disk's volume."""
        return [server['id'], pool_specs.volume_name(server['id'], 'disk')]

    def owned_by(self, server: dict[str, Any], host: str) -> list[str]:
        """Files, and volumes of the disks pool, of ``server`` on
        ``host``."""
        volumes = [v for v in self.volumes(host, pool_specs.DISKS_POOL)
                   if v.startswith(server['id'])]
        return super().owned_by(server, host) + volumes

    def test_cold_migration_revert_and_confirm(self) -> None:
        """Resized to a bigger flavor on the other compute (a resize never
        stays on its host here), reverted, resized again and confirmed."""
        self._start(pools_on=True)
        server = self._boot()
        uuid, disk = server['id'], pool_specs.volume_name(server['id'], 'disk')
        self.assertEqual([uuid, disk], self.owned_by(server, 'compute1'))
        self.assert_template_recorded(server)

        # The volume is staged out into <instance>_resize on compute1 and
        # sent into compute2's pool, grown there.
        server = self._resize_server(server, '2')
        self.assert_runs_on(server, 'compute2')
        self.assertEqual('pools', self.storage_record(server))
        self.assertEqual([uuid + '_resize'],
                         self.owned_by(server, 'compute1'))
        self.assertEqual([uuid, disk], self.owned_by(server, 'compute2'))
        self.assertEqual(20 * 1024 ** 3, self.disk_info(
            'compute2', self.disk_of(server, 'compute2'))['virtual-size'])

        # Revert: the volume is back in compute1's pool, with its data and
        # size; compute2's volume and directory are gone.
        server = self._revert_resize(server)
        self.assert_runs_on(server, 'compute1')
        self.assertEqual([uuid, disk], self.owned_by(server, 'compute1'))
        self.assertEqual([], self.owned_by(server, 'compute2'))
        self.assertEqual(1024 ** 3, self.disk_info(
            'compute1', self.disk_of(server, 'compute1'))['virtual-size'])

        server = self._resize_server(server, '2')
        server = self._confirm_resize(server)
        self.assert_runs_on(server, 'compute2')
        self.assertEqual([], self.owned_by(server, 'compute1'))
        self.assertEqual([uuid, disk], self.owned_by(server, 'compute2'))
        self.assert_template_recorded(server)

        self._delete_server(server)
        self.assertEqual([], self.owned_by(server, 'compute2'))


    def volume_path(self, server: dict[str, Any], host: str,
                    name: str) -> str:
        vol = self.connections[host].storagePoolLookupByName(
            pool_specs.DISKS_POOL).storageVolLookupByName(
                pool_specs.volume_name(server['id'], name))
        path: str = vol.path()
        return path

    def volume_formats(self, host: str,
                       server: dict[str, Any]) -> dict[str, str]:
        """``{name: format}`` of the root, ephemeral and swap disks, in
        the domain's order (fakelibvirt keeps no volume name in the
        domain's XML), each the format the domain gives QEMU."""
        conn = self.computes[host].driver._host.get_connection()
        xml = ElementTree.fromstring(
            conn.lookupByUUIDString(server['id']).XMLDesc(0))
        fmts = [d.find('driver').get('type') for d in  # type: ignore
                xml.findall("./devices/disk[@device='disk']")]
        return dict(zip(('disk', 'disk.eph0', 'disk.swap'), fmts,
                        strict=True))

    def test_a_cold_move_makes_the_swap_disk_anew_as_stock_does(
            self) -> None:
        """Stock copies no swap disk at a cold move (the guest is off;
        the destination makes it anew, cheaper than a copy): neither does
        a move of volumes. Found by the gate's move matrix: the swap volume
        went along, data and all, to a host without pools."""
        self._start(pools_on=True)
        server = self._boot_with_disks('qcow2')
        formats = self.volume_formats('compute1', server)
        for name, fmt in formats.items():
            self.write_guest('compute1',
                             self.volume_path(server, 'compute1', name),
                             fmt, *DATA)

        server = self._migrate_server(server, host='compute2',
                                      api=self.admin_api)
        server = self._confirm_resize(server)
        self.assertEqual('compute2', server['OS-EXT-SRV-ATTR:host'])
        self.assertEqual(formats, self.volume_formats('compute2', server))
        for name, fmt in formats.items():
            path = self.volume_path(server, 'compute2', name)
            self.assertEqual(name != 'disk.swap',
                             self.guest_has('compute2', path, fmt, *DATA),
                             name)
        self.assertEqual([], self.owned_by(server, 'compute1'))


class MixedStorageEvacuationTest(_MovesBase):
    """An evacuation from a host with pools (compute1) to one without."""

    def disk_of(self, server: dict[str, Any], host: str) -> str:
        if host == 'compute1':
            return PoolDisksTest.disk_of(self, server, host)  # type: ignore
        return super().disk_of(server, host)

    def test_a_pool_instance_evacuated_to_a_host_without_pools(
            self) -> None:
        """Its disks are made anew (storage is not shared), as files: the
        destination serves its backend, as it does for a cold move, and
        records the new storage before it makes them; the source, back,
        removes its volume. Found by the gate's move matrix: the
        destination refused it ("use_storage_pools is off"), the server
        ended in ERROR."""
        self.start_compute('compute1', images_type='qcow2', flags=POOLS_ON)
        self.start_compute('compute2', images_type='qcow2', flags={
            'libvirt': {'use_storage_pools': False}})
        server = self._boot()
        uuid, disk = server['id'], pool_specs.volume_name(server['id'], 'disk')
        self.assertEqual('pools', self.storage_record(server))
        self.assertEqual([disk], self.volumes('compute1',
                                              pool_specs.DISKS_POOL))

        self._evacuate_from_compute1(server)
        server = self.api.get_server(uuid)
        # (fakelibvirt's evacuated domain reads as shut off; the gate's
        # move matrix sees it ACTIVE on a real libvirtd.)
        self.assertNotIn(server['status'], ('ERROR',))
        self.assertNotIn('fault', server)
        self.assertEqual('legacy', self.storage_record(server))
        self.assertEqual([uuid], self.owned_by(server, 'compute2'))
        path = self.instance_path(server, 'disk')
        self.assertEqual('qcow2', self.domain_format('compute2', server))
        self.assertFalse(self.guest_has('compute2', path, 'qcow2', *DATA))
        self.assertEqual([disk], self.volumes('compute1',
                                              pool_specs.DISKS_POOL))

        self._bring_back('compute1')
        self.assertEqual([], self.owned_by(server, 'compute1'))
        self.assertEqual([], self.volumes('compute1', pool_specs.DISKS_POOL))


class LegacyColdMoveTest(_MovesBase):
    """A cold move of an instance whose disks are files, between hosts
    whose defaults differ (issue 33, 1)."""

    def test_a_flat_instance_moved_to_a_qcow2_host_keeps_its_raw_disks(
            self) -> None:
        """Stock converts raw disks to qcow2 at the end of a cold move
        when the destination has ``use_cow_images`` (it cannot tell one
        instance's layout from the host's default). The instance is
        recorded ``flat``: its disks stay raw, as its record, its
        ``disk.info`` and its domain say, and every disk reads back as its
        guest wrote it, in the format the domain gives QEMU."""
        self.start_compute('compute1', images_type='flat')
        self.start_compute('compute2', images_type='qcow2')
        server = self._boot_with_disks('raw')
        before = self.domain_disks('compute1', server)
        self.assertEqual({'disk': 'raw', 'disk.eph0': 'raw',
                          'disk.swap': 'raw'}, before)
        # Stock makes the swap disk anew at a cold move (it is not copied:
        # the guest is off); the other disks carry what the guest wrote.
        carried = [name for name in before if name != 'disk.swap']
        for name in carried:
            self.write_guest('compute1', self.instance_path(server, name),
                             before[name], *DATA)

        server = self._migrate_server(server, host='compute2',
                                      api=self.admin_api)
        server = self._confirm_resize(server)
        self.assertEqual('compute2', server['OS-EXT-SRV-ATTR:host'])

        after = self.domain_disks('compute2', server)
        self.assertEqual(before, after)
        inst = objects.Instance.get_by_uuid(
            self.ctxt, server['id'], expected_attrs=['system_metadata'])
        self.assertEqual('flat', inst.system_metadata['imgtype_backend'])
        with self.hosts.running_as('compute2'):
            with open(self.instance_path(server, 'disk.info')) as f:
                recorded = {os.path.basename(path): fmt for path, fmt
                            in json.load(f).items()}
        for name, fmt in after.items():
            path = self.instance_path(server, name)
            # The file is in the format its domain says (qemu-img's own
            # reading, to check the file, not to decide anything), and
            # disk.info says it too.
            self.assertEqual(fmt, self.disk_info('compute2', path)['format'],
                             name)
            self.assertEqual(fmt, recorded[name], name)
            if name in carried:
                self.assertTrue(self.guest_has('compute2', path, fmt, *DATA),
                                'the data of %s lost' % name)

    def test_a_flat_instance_moved_to_a_host_with_a_dir_pool_is_adopted(
            self) -> None:
        """A host makes disks of every backend its pools' types implement
        in its pools (a flat disk is a raw volume of its dir pool, as an
        unshelve or an evacuation there makes it); a cold move there adopts
        the files of such an instance into the pool too, as a live
        migration and a hard reboot there do: one rule. Found by the gate's
        move matrix: a flat instance resized onto the pools host
        (``images_type = qcow2``) stayed files, while one evacuated there
        got volumes."""
        self.start_compute('compute1', images_type='flat', flags={
            'libvirt': {'use_storage_pools': False}})
        self.start_compute('compute2', images_type='qcow2', flags=POOLS_ON)
        server = self._boot_with_disks('raw', swap=0)
        self.assertEqual('legacy', self.storage_record(server))
        before = self.domain_disks('compute1', server)
        self.assertEqual({'disk': 'raw', 'disk.eph0': 'raw'}, before)
        for name, fmt in before.items():
            self.write_guest('compute1', self.instance_path(server, name),
                             fmt, *DATA)

        server = self._migrate_server(server, host='compute2',
                                      api=self.admin_api)
        server = self._confirm_resize(server)
        self.assertEqual('pools', self.storage_record(server))
        volumes = [pool_specs.volume_name(server['id'], name)
                   for name in before]
        self.assertEqual(sorted(volumes),
                         self.volumes('compute2', pool_specs.DISKS_POOL))
        pool = self.connections['compute2'].storagePoolLookupByName(
            pool_specs.DISKS_POOL)
        for name, fmt in before.items():
            path = pool.storageVolLookupByName(
                pool_specs.volume_name(server['id'], name)).path()
            self.assertTrue(self.guest_has('compute2', path, fmt, *DATA),
                            name)
            self.assertEqual(fmt, self.disk_info('compute2', path)['format'])
