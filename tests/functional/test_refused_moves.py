"""A cold move to a host that cannot serve the instance's backend is
refused before anything is touched.

The backend is a third-party one registered for real in the
``nova_imgtype.image_backends`` namespace (a distribution on sys.path):
stock Qcow2, servable only on compute1. Real as in the other functional
tests: API, conductor, scheduler, placement (whose traits the source asks),
disk files; fake: libvirt domains and Glance.
"""

from __future__ import annotations

import os
import textwrap

import fixtures
from nova.tests.functional.api import client

from nova_imgtype.virt.libvirt import backends
from nova_imgtype_testing import functional as base

BACKEND_MODULE = '''
from nova.virt.libvirt import imagebackend


class HostBoundQcow2(imagebackend.Qcow2):
    """qcow2 images natively, on compute1 only."""

    native_disk_formats = ('qcow2',)

    @classmethod
    def host_support_error(cls, conf):
        if conf.host != 'compute1':
            return 'the hostbound store is only attached to compute1'
        return None
'''


class RefusedMoveTest(base.ImgtypeServersTestBase):

    def setUp(self) -> None:
        super().setUp()
        pkg = self.useFixture(fixtures.TempDir()).path
        with open(os.path.join(pkg, 'hostbound_backend.py'), 'w') as f:
            f.write(textwrap.dedent(BACKEND_MODULE))
        dist = os.path.join(pkg, 'hostbound-1.0.dist-info')
        os.mkdir(dist)
        with open(os.path.join(dist, 'METADATA'), 'w') as f:
            f.write('Name: hostbound\nVersion: 1.0\n')
        with open(os.path.join(dist, 'entry_points.txt'), 'w') as f:
            f.write('[nova_imgtype.image_backends]\n'
                    'hostbound = hostbound_backend:HostBoundQcow2\n')
        self.useFixture(fixtures.PythonPathEntry(pkg))
        backends.reset()
        self.addCleanup(backends.reset)
        self.flags(allow_resize_to_same_host=False)
        self.useFixture(fixtures.MockPatch(
            'nova.virt.libvirt.driver.LibvirtDriver._is_path_shared_with',
            return_value=True))

    def _traits(self, hostname: str) -> set[str]:
        rp_uuid = self._get_provider_uuid_by_host(hostname)
        return set(self._get_provider_traits(rp_uuid))

    def _server_on_the_hostbound_backend(self) -> tuple[dict, str, str]:
        """compute1 serves the hostbound backend, compute2 does not; a
        server on it on compute1: (server, its disk, qemu-img info)."""
        self.start_compute('compute1', images_type='flat',
                           images_type_mapping='qcow2:hostbound')
        self.start_compute('compute2', images_type='flat')
        image = self.create_image('qcow2', size_mb=4)
        server = self.boot_server(image['id'], host='compute1')
        disk = self.instance_path(server, 'disk')
        return server, disk, base.qemu_img_info(disk)

    def test_migration_to_host_without_backend_is_refused(self) -> None:
        server, disk, before = self._server_on_the_hostbound_backend()
        self.assertIn('CUSTOM_IMGTYPE_BACKEND_HOSTBOUND',
                      self._traits('compute1'))
        self.assertNotIn('CUSTOM_IMGTYPE_BACKEND_HOSTBOUND',
                         self._traits('compute2'))
        self.assertIn('CUSTOM_IMGTYPE_BACKEND_QCOW2',
                      self._traits('compute2'))

        # The destination claims and reports its traits with its own options
        # (one CONF in this harness, one per nova-compute in real life).
        with self.on_compute('compute2'):
            # Casts are calls in this harness, so the compute's refusal
            # comes back through the API request; in a cloud the request is
            # accepted and the migration ends in error.
            self.assertRaises(client.OpenStackApiException,
                              self.admin_api.post_server_action,
                              server['id'], {'migrate': {'host': 'compute2'}})
        self._wait_for_migration_status(server, ['error'])
        server = self.admin_api.get_server(server['id'])

        # Refused before anything was touched: the guest was never powered
        # off, it is where it was, on its unchanged disk, and nothing was
        # made for the destination. (The harness re-raises the refusal
        # into the destination's prep_resize, whose reschedule handling
        # then sets vm_state to error; in a cloud the source's rollback
        # leaves it active.)
        self.assertEqual(1, server['OS-EXT-STS:power_state'])  # RUNNING
        self.assertEqual('compute1', server['OS-EXT-SRV-ATTR:host'])
        self.assertEqual(before, base.qemu_img_info(disk))
        self.assertFalse(os.path.exists(self.instance_path(server) +
                                        '_resize'))
        self.assertIn('destination host compute2 cannot serve image '
                      'backend hostbound', server['fault']['message'])

    def test_scheduler_never_chooses_a_host_without_the_backend(
            self) -> None:
        """Issue 12, defect 2: with nova-imgtype's request filters loaded,
        a move asks placement for the instance's recorded backend, so the
        host that cannot serve it (here: no such backend; in a mixed fleet:
        no nova-imgtype, no backend trait at all) is never chosen and
        nothing is touched."""
        self.enable_image_type_filter()
        server, disk, before = self._server_on_the_hostbound_backend()

        with self.on_compute('compute2'):
            # Not named: the scheduler chooses, and finds no host.
            self.assertRaises(client.OpenStackApiException,
                              self.admin_api.post_server_action,
                              server['id'], {'migrate': None})
        server = self.admin_api.get_server(server['id'])
        self.assertEqual('ACTIVE', server['status'])
        self.assertEqual('compute1', server['OS-EXT-SRV-ATTR:host'])
        self.assertEqual(before, base.qemu_img_info(disk))
        self.assertFalse(os.path.exists(self.instance_path(server) +
                                        '_resize'))
        # The prep_resize of compute2 never ran: no refusal of its own.
        self.assertNotIn('fault', server)

    def test_builds_are_not_asked_for_a_backend(self) -> None:
        """A new build has no recorded backend: the filter adds nothing."""
        self.enable_image_type_filter()
        self.start_compute('compute2', images_type='flat')
        image = self.create_image('qcow2', size_mb=4)
        server = self.boot_server(image['id'])
        self.assertEqual('compute2', server['OS-EXT-SRV-ATTR:host'])
