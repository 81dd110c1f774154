"""Scheduling by image type, end to end on a deployed cloud.

Needs ``[imgtype-feature-enabled]image_type_scheduling = True``: computes
running ``compute_driver = imgtype.LibvirtDriver`` and a nova-scheduler with
``[scheduler]filter_hosts_by_image_type_support = True`` and
``nova_imgtype.scheduler.filters.all_filters`` in
``[filter_scheduler]available_filters``. The scenarios are meaningful when
some computes use qcow2 natively (``images_type_mapping`` ``qcow2:qcow2``)
and others do not, as in the ``nova-imgtype-tempest-multinode`` job.

Nothing here reads tempest's CONF at import time (no ``utils.services``
decorators, no ``skipUnless(CONF...)``): the checks are in ``skip_checks``,
so listing the tests does not need a tempest configuration.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from typing import Any

from tempest import config
from tempest.common import waiters
from tempest.lib import decorators
from tempest.lib import exceptions as lib_exc
from tempest.lib.common.utils import data_utils
from tempest.lib.common.utils import test_utils
from tempest.scenario import manager

CONF = config.CONF

#: Flavor extra spec asking for hosts that use the image natively.
NATIVE_EXTRA_SPEC = 'imgtype:native'
#: Trait of a compute node that uses qcow2 images without conversion.
NATIVE_QCOW2_TRAIT = 'CUSTOM_IMGTYPE_NATIVE_QCOW2'
QCOW2_MAGIC = b'QFI\xfb'
#: Glance disk_format -> qemu-img output format, for the formats qemu-img
#: can write.
QEMU_IMG_FORMATS = {
    'raw': 'raw',
    'vhd': 'vpc',
    'vhdx': 'vhdx',
    'vmdk': 'vmdk',
    'vdi': 'vdi',
}


class ImageTypeSchedulingBase(manager.ScenarioTest):
    """Images, flavors and placement checks shared by the scenarios."""

    credentials = ['primary', 'admin']
    # GET /resource_providers/{uuid}/traits
    placement_min_microversion = '1.6'

    @classmethod
    def skip_checks(cls) -> None:
        super().skip_checks()
        if not CONF.imgtype_feature_enabled.image_type_scheduling:
            raise cls.skipException(
                '[imgtype-feature-enabled]image_type_scheduling is False')
        if not (CONF.service_available.nova and
                CONF.service_available.glance):
            raise cls.skipException('needs the compute and image services')

    @classmethod
    def setup_clients(cls) -> None:
        super().setup_clients()
        cls.admin_servers_client = cls.os_admin.servers_client
        cls.admin_flavors_client = cls.os_admin.flavors_client
        cls.resource_providers_client = (
            cls.os_admin.resource_providers_client)

    # -- images -------------------------------------------------------------

    def qcow2_image_file(self) -> str:
        path: str = (CONF.imgtype.qcow2_image_file or
                     CONF.scenario.img_file)
        try:
            with open(path, 'rb') as image:
                magic = image.read(len(QCOW2_MAGIC))
        except OSError as e:
            raise lib_exc.InvalidConfiguration(
                'cannot read the qcow2 image %s ([imgtype]qcow2_image_file '
                'or [scenario]img_file): %s' % (path, e)) from e
        if magic != QCOW2_MAGIC:
            raise lib_exc.InvalidConfiguration(
                '%s is not a qcow2 image: set [imgtype]qcow2_image_file'
                % path)
        return path

    def unsupported_image_file(self, disk_format: str) -> str:
        """An image file in ``disk_format``: the configured one, or the
        qcow2 image converted by qemu-img."""
        configured: str | None = CONF.imgtype.unsupported_image_file
        if configured:
            return configured
        qemu_format = QEMU_IMG_FORMATS.get(disk_format)
        if qemu_format is None:
            raise lib_exc.InvalidConfiguration(
                'qemu-img cannot make a %s image: set '
                '[imgtype]unsupported_image_file' % disk_format)
        tmp_dir = tempfile.mkdtemp(prefix='imgtype-')
        self.addCleanup(shutil.rmtree, tmp_dir, ignore_errors=True)
        path = os.path.join(tmp_dir, 'image.%s' % disk_format)
        cmd = [CONF.imgtype.qemu_img, 'convert', '-f', 'qcow2',
               '-O', qemu_format, self.qcow2_image_file(), path]
        try:
            subprocess.run(cmd, check=True, capture_output=True)
        except (OSError, subprocess.CalledProcessError) as e:
            stderr = getattr(e, 'stderr', None) or b''
            raise lib_exc.InvalidConfiguration(
                '%s failed (%s %s): set [imgtype]unsupported_image_file or '
                '[imgtype]qemu_img' % (' '.join(cmd), e,
                                       stderr.decode(errors='replace'))
            ) from e
        return path

    def upload_image(self, path: str, disk_format: str) -> str:
        """Upload ``path`` as a private image of ``disk_format``; its id."""
        name = data_utils.rand_name(
            prefix=CONF.resource_name_prefix,
            name='imgtype-%s' % disk_format)
        body = self.image_client.create_image(
            name=name, container_format='bare', disk_format=disk_format,
            visibility='private')
        image = body['image'] if 'image' in body else body
        image_id: str = image['id']
        self.addCleanup(test_utils.call_and_ignore_notfound_exc,
                        self.image_client.delete_image, image_id)
        with open(path, 'rb') as data:
            self.image_client.store_image_file(image_id, data)
        waiters.wait_for_image_status(self.image_client, image_id, 'active')
        return image_id

    # -- flavors ------------------------------------------------------------

    def create_native_flavor(self, extra_disk: int = 0) -> dict[str, Any]:
        """A public copy of [compute]flavor_ref (``extra_disk`` GB larger)
        with ``imgtype:native=required``."""
        base = self.admin_flavors_client.show_flavor(
            CONF.compute.flavor_ref)['flavor']
        flavor: dict[str, Any] = self.admin_flavors_client.create_flavor(
            name=data_utils.rand_name(
                prefix=CONF.resource_name_prefix, name='imgtype-native'),
            ram=base['ram'], vcpus=base['vcpus'],
            disk=base['disk'] + extra_disk)['flavor']
        self.addCleanup(test_utils.call_and_ignore_notfound_exc,
                        self.admin_flavors_client.delete_flavor,
                        flavor['id'])
        self.admin_flavors_client.set_flavor_extra_spec(
            flavor['id'], **{NATIVE_EXTRA_SPEC: 'required'})
        return flavor

    # -- placement ----------------------------------------------------------

    def host_and_traits(self, server_id: str) -> tuple[str, set[str]]:
        """The server's nova-compute host and its node's traits."""
        server = self.admin_servers_client.show_server(server_id)['server']
        node = server['OS-EXT-SRV-ATTR:hypervisor_hostname']
        providers = self.resource_providers_client.list_resource_providers(
            name=node)['resource_providers']
        self.assertEqual(
            1, len(providers),
            'expected one resource provider named %s, got %s'
            % (node, providers))
        traits = self.resource_providers_client \
            .list_resource_provider_traits(providers[0]['uuid'])['traits']
        return server['OS-EXT-SRV-ATTR:host'], set(traits)

    def assert_on_native_qcow2_host(self, server_id: str) -> None:
        host, traits = self.host_and_traits(server_id)
        self.assertIn(
            NATIVE_QCOW2_TRAIT, traits,
            'server %s is on %s, which does not use qcow2 natively '
            '(traits: %s)' % (server_id, host, sorted(traits)))
        if CONF.imgtype.native_qcow2_hosts:
            self.assertIn(host, CONF.imgtype.native_qcow2_hosts)


class ImageTypeSchedulingTest(ImageTypeSchedulingBase):
    """Boots: native placement and unsupported formats."""

    @decorators.idempotent_id('c605d13c-eed8-4887-bb90-efb126fdaa5a')
    def test_native_qcow2_flavor_lands_on_native_host(self) -> None:
        """A qcow2 image with imgtype:native=required boots on a host that
        uses qcow2 natively."""
        image_id = self.upload_image(self.qcow2_image_file(), 'qcow2')
        flavor = self.create_native_flavor()
        server = self.create_server(
            image_id=image_id, flavor=flavor['id'], wait_until='ACTIVE')
        self.assert_on_native_qcow2_host(server['id'])

    @decorators.idempotent_id('279db73e-ab67-43d0-93c0-32038223a973')
    def test_unsupported_disk_format_no_valid_host(self) -> None:
        """An image whose disk_format no compute supports is refused by
        the scheduler (NoValidHost), not converted somewhere."""
        disk_format = CONF.imgtype.unsupported_disk_format
        image_id = self.upload_image(
            self.unsupported_image_file(disk_format), disk_format)
        server = self.create_server(image_id=image_id, wait_until=None)
        waiters.wait_for_server_status(
            self.servers_client, server['id'], 'ERROR', ready_wait=False,
            raise_on_error=False)
        server = self.admin_servers_client.show_server(
            server['id'])['server']
        self.assertIn('fault', server)
        self.assertIn('No valid host', server['fault']['message'])


class ImageTypeResizeTest(ImageTypeSchedulingBase):
    """Moves keep the image-type requirement."""

    @classmethod
    def skip_checks(cls) -> None:
        super().skip_checks()
        if not CONF.compute_feature_enabled.resize:
            raise cls.skipException('[compute-feature-enabled]resize is '
                                    'False')

    @decorators.idempotent_id('b67ce5a3-3c6d-4e60-8e33-4a75b41afc1a')
    def test_resize_keeps_native_requirement(self) -> None:
        """Resized to another imgtype:native=required flavor, the server
        is again on a host that uses qcow2 natively."""
        image_id = self.upload_image(self.qcow2_image_file(), 'qcow2')
        flavor = self.create_native_flavor()
        server = self.create_server(
            image_id=image_id, flavor=flavor['id'], wait_until='ACTIVE')
        self.assert_on_native_qcow2_host(server['id'])

        new_flavor = self.create_native_flavor(extra_disk=1)
        self.servers_client.resize_server(server['id'], new_flavor['id'])
        waiters.wait_for_server_status(
            self.servers_client, server['id'], 'VERIFY_RESIZE')
        self.servers_client.confirm_resize_server(server['id'])
        waiters.wait_for_server_status(
            self.servers_client, server['id'], 'ACTIVE')

        resized = self.admin_servers_client.show_server(
            server['id'])['server']
        # id below compute microversion 2.47, original_name from it on
        flavor_ref = resized['flavor'].get(
            'id', resized['flavor'].get('original_name'))
        self.assertIn(flavor_ref, (new_flavor['id'], new_flavor['name']))
        self.assert_on_native_qcow2_host(server['id'])
