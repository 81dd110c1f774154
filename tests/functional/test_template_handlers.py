"""[image_cache]template_image_handler in stock Nova's harness.

Real: Nova's API, conductor, scheduler, placement, compute manager, our
driver with the handler it loads from the stevedore namespace, the image
backends, qemu-img, every disk file (under a temporary instances_path),
the image cache manager, and the attach itself: os-brick's local connector
connects the "volume" (a file holding the image's bytes, standing for the
block device Glance's cinder store wrote the image to), with os-brick's
privsep run in-process.

Fake: libvirt domains (fakelibvirt); Glance (Nova's GlanceFixture serving
real image bytes; here it also returns a ``cinder://<volume>`` location
for a cinder-backed image when asked ``include_locations``, as Glance with
the cinder store does, and counts downloads); Cinder's API (Nova's
CinderFixture, whose attachments hand out ``local`` connection_info
pointing at the volume's file: no Cinder runs here); the connector
properties handed to Cinder (stock's OSBrickFixture: the real ones scan
/sys, which the harness forbids); libvirt's answer "no storage pool" to
the image cache manager (fakelibvirt has no pool API).
"""

from __future__ import annotations

import collections
import os
import shutil
import uuid
from typing import Any
from unittest import mock

import fixtures
from nova import context as nova_context
from nova import objects
from os_brick import privileged as brick_privileged
from os_brick.initiator.connectors import local as brick_local

from nova_imgtype import exception
from nova_imgtype.virt.libvirt.template_handlers import volume_linking
from nova_imgtype_testing import functional as base
from nova_imgtype_testing import libvirtd

LINKING = {'image_cache': {'template_image_handler': 'volume-based-linking'}}
DOWNLOADING = {'image_cache': {'template_image_handler': 'downloading'}}

#: The real os-brick local connector, taken at import, before stock's
#: ServersTestBase installs OSBrickFixture (every connector's
#: connect_volume a Mock answering ``/dev/sda``); put back in setUp. The
#: connector *properties* sent to Cinder stay OSBrickFixture's: the real
#: ones scan the host's /sys, which stock's SysFsPoisonFixture forbids.
_REAL_LOCAL_CONNECTOR = {
    name: vars(brick_local.LocalConnector)[name]
    for name in ('connect_volume', 'disconnect_volume', 'extend_volume')}
assert not any(isinstance(real, mock.Mock)
               for real in _REAL_LOCAL_CONNECTOR.values()), (
    'tests.functional.test_template_handlers imported while os-brick is '
    'patched')


class TemplateHandlersTest(base.ImgtypeServersTestBase):

    def setUp(self) -> None:
        super().setUp()
        # The real os-brick local connector attaches the volumes.
        for name, real in _REAL_LOCAL_CONNECTOR.items():
            self.useFixture(fixtures.MockPatchObject(
                brick_local.LocalConnector, name, real))
        # Any privileged call of os-brick runs in this process, as Nova's
        # own privsep'd calls do here (PrivsepFixture), not in a daemon the
        # harness forbids; put back at cleanup.
        self.useFixture(fixtures.MockPatchObject(
            brick_privileged.default, 'client_mode', False))
        # Read-only attachments go through cinderclient at 3.54, which the
        # CinderFixture does not fake: recorded here, made by the fixture.
        self.read_only: list[str] = []

        def attach_read_only(api: Any, context: Any, volume_id: str,
                             instance_id: str, connector: Any) -> Any:
            attachment = api.attachment_create(
                context, volume_id, instance_id, connector=connector)
            self.read_only.append(attachment['id'])
            return attachment

        self.useFixture(fixtures.MonkeyPatch(
            'nova_imgtype.virt.libvirt.template_handlers.volume_linking.'
            'ImageVolumeAPI.attachment_create_read_only', attach_read_only))
        self._volume_dir = self.useFixture(fixtures.TempDir()).path
        self.ctxt = nova_context.get_admin_context()

        # Downloads per image, counted where GlanceFixture serves bytes.
        self.downloads: collections.Counter[str] = collections.Counter()
        real_download = self.glance.download

        def download(context: Any, image_id: str, *args: Any,
                     **kwargs: Any) -> Any:
            self.downloads[image_id] += 1
            return real_download(context, image_id, *args, **kwargs)

        self.useFixture(fixtures.MockPatchObject(
            self.glance, 'download', side_effect=download))

        # Locations: returned only when asked for (include_locations), as
        # stock Nova's Glance client does.
        self.locations: dict[str, str] = {}
        real_show = self.glance.show

        def show(context: Any, image_id: str, include_locations: bool = False,
                 show_deleted: bool = True) -> dict[str, Any]:
            image: dict[str, Any] = real_show(
                context, image_id, include_locations=include_locations,
                show_deleted=show_deleted)
            url = self.locations.get(str(image_id))
            if include_locations and url:
                image['locations'] = [{'url': url, 'metadata': {}}]
                image['direct_url'] = url
            return image

        self.useFixture(fixtures.MockPatchObject(
            self.glance, 'show', side_effect=show))

    # -- helpers --------------------------------------------------------------

    def create_cinder_image(self, size_mb: int) -> tuple[dict[str, Any],
                                                          str, str]:
        """A raw image whose location is a Cinder volume.

        The volume is a file holding the image's bytes (what the cinder
        store writes); the CinderFixture's attachments for it carry
        ``local`` connection_info to that file.

        :returns: (image, volume id, the volume's device file)
        """
        image = self.create_image('raw', size_mb=size_mb,
                                  name='cinder-backed')
        volume_id = str(uuid.uuid4())
        device = os.path.join(self._volume_dir, 'volume-' + volume_id)
        shutil.copyfile(self.image_files[image['id']], device)
        # An instance attribute: the class's dict stays as it is.
        self.cinder.VOLUME_CONNECTION_INFO = dict(
            self.cinder.VOLUME_CONNECTION_INFO, **{volume_id: {
                'driver_volume_type': 'local',
                'data': {'device_path': device}}})
        self.locations[image['id']] = 'cinder://%s' % volume_id
        return image, volume_id, device

    def attachments(self, volume_id: str) -> list[dict[str, Any]]:
        return list(self.cinder.volume_to_attachment[volume_id].values())

    def assert_downloaded(self, server: dict[str, Any],
                          image_id: str) -> None:
        """The server is ACTIVE on a disk backed by a downloaded template."""
        self.assertEqual('ACTIVE', server['status'])
        self.assertEqual(1, self.downloads[image_id])
        template = self.cache_path(image_id)
        self.assertFalse(os.path.islink(template), template)
        self.assertTrue(os.path.isfile(template), template)
        info = base.qemu_img_info(self.instance_path(server, 'disk'))
        self.assertEqual('qcow2', info['format'])
        self.assertEqual(template, info['full-backing-filename'])
        # The template in the format the host wrote in the overlay's header
        # when it made the disk (never probed from the image's bytes).
        self.assertEqual(base.IMAGE_MARKER, self.guest_head(
            template, info['backing-filename-format']))
        self.assertFalse(os.path.exists(os.path.join(
            self.base_dir, volume_linking.STATE_DIR,
            os.path.basename(template) + '.json')))

    def delete_and_check_gone(self, *servers: dict[str, Any]) -> None:
        for server in servers:
            self._delete_server(server)
            self.assertFalse(os.path.exists(self.instance_path(server)))
            self.assertFalse(os.path.exists(
                self.instance_path(server['id'] + '_del')))
            self.assertFalse(os.path.exists(
                self.instance_path(server['id'] + '_resize')))

    def run_image_cache_manager(self, hostname: str) -> None:
        """One pass of the image cache manager, removing unused templates
        at once."""
        self.flags(remove_unused_base_images=True,
                   remove_unused_original_minimum_age_seconds=0,
                   remove_unused_resized_minimum_age_seconds=0,
                   group='image_cache')
        driver = self.computes[hostname].manager.driver
        # fakelibvirt has no storage pool API: answer as a libvirtd with
        # no pools does (the cache manager also asks about pool volumes).
        def no_pool(name: str) -> None:
            raise exception.PoolNotFound(pool=name)

        self.useFixture(fixtures.MockPatchObject(driver._pools, 'get',
                                                 side_effect=no_pool))
        with self.on_compute(hostname):
            driver.manage_image_cache(
                self.ctxt, objects.InstanceList.get_by_host(self.ctxt,
                                                            hostname))

    # -- tests ----------------------------------------------------------------

    def test_linking_cinder_image_and_fallback_on_one_host(self) -> None:
        """volume-based-linking: the cinder-backed image is linked, not
        downloaded; a plain image on the same host is downloaded."""
        self.start_compute('compute1', images_type='qcow2', flags=LINKING)
        driver = self.computes['compute1'].manager.driver
        self.assertEqual('volume-based-linking',
                         driver._template_handler.name)
        linked_image, volume_id, device = self.create_cinder_image(8)
        plain_image = self.create_image('raw', size_mb=4, name='plain')

        linked = self.boot_server(linked_image['id'])
        plain = self.boot_server(plain_image['id'])
        self.assertEqual('ACTIVE', linked['status'])
        self.assertEqual('compute1', linked['OS-EXT-SRV-ATTR:host'])
        self.assertEqual('compute1', plain['OS-EXT-SRV-ATTR:host'])

        # The cinder-backed image: never downloaded; its template is a
        # symbolic link to the connected device.
        self.assertEqual(0, self.downloads[linked_image['id']])
        template = self.cache_path(linked_image['id'])
        self.assertTrue(os.path.islink(template), template)
        self.assertEqual(device, os.readlink(template))
        # No copy in the cache: the link holds the device's path, at most
        # one filesystem block (the image is 8 MiB).
        link = os.lstat(template)
        self.assertEqual(len(os.fsencode(device)), link.st_size)
        self.assertLessEqual(link.st_blocks * 512,
                             os.statvfs(self.base_dir).f_bsize)
        # The instance disk is a qcow2 overlay whose chain ends at the
        # device, and reads the image's bytes through it.
        disk = self.instance_path(linked, 'disk')
        chain = libvirtd.qemu_img_info(disk, backing_chain=True)
        self.assertEqual('qcow2', chain[0]['format'])
        self.assertEqual(template, chain[0]['full-backing-filename'])
        self.assertEqual(2, len(chain))
        self.assertEqual('raw', chain[-1]['format'])
        self.assertEqual(device, os.path.realpath(chain[-1]['filename']))
        self.assertEqual(base.IMAGE_MARKER, self.guest_head(
            disk, self.domain_format('compute1', linked)))
        # One Cinder attachment for this host's templates, connected with
        # this host's os-brick connector, and recorded for init().
        attachments = self.attachments(volume_id)
        self.assertEqual(1, len(attachments))
        self.assertEqual(volume_linking.owner_uuid('compute1'),
                         attachments[0]['instance_uuid'])
        self.assertEqual('compute1', attachments[0]['connector']['host'])
        self.assertEqual([attachments[0]['id']], self.read_only)
        state = driver._template_handler.linked(template)
        self.assertIsNotNone(state)
        self.assertEqual({'image_id': linked_image['id'],
                          'volume_id': volume_id,
                          'attachment_id': attachments[0]['id'],
                          'device_path': device},
                         {k: state[k] for k in ('image_id', 'volume_id',
                                                'attachment_id',
                                                'device_path')})

        # The plain image, same host, same handler: downloaded.
        self.assert_downloaded(plain, plain_image['id'])

        # A second server of the linked image: same link, no new
        # attachment, still no download.
        again = self.boot_server(linked_image['id'])
        self.assertEqual(template, base.qemu_img_info(
            self.instance_path(again, 'disk'))['full-backing-filename'])
        self.assertEqual(0, self.downloads[linked_image['id']])
        self.assertEqual(1, len(self.attachments(volume_id)))

        self.delete_and_check_gone(linked, plain, again)
        # The cache outlives the instances until the image cache manager
        # finds its templates unused: then the link goes through the
        # handler, which deletes the attachment; the volume stays.
        self.assertTrue(os.path.islink(template))
        self.run_image_cache_manager('compute1')
        self.assertFalse(os.path.lexists(template))
        self.assertIsNone(driver._template_handler.linked(template))
        self.assertEqual([], self.attachments(volume_id))
        self.assertFalse(os.path.exists(self.cache_path(plain_image['id'])))
        self.assertTrue(os.path.isfile(device))
        # The image's volume, raw as the image was made.
        self.assertEqual(base.IMAGE_MARKER, self.guest_head(device, 'raw'))

    def test_downloading_boots_both_images(self) -> None:
        """downloading: the cinder-backed image is downloaded like any
        other; no attachment is made."""
        self.start_compute('compute1', images_type='qcow2',
                           flags=DOWNLOADING)
        driver = self.computes['compute1'].manager.driver
        self.assertEqual('downloading', driver._template_handler.name)
        cinder_image, volume_id, device = self.create_cinder_image(8)
        plain_image = self.create_image('raw', size_mb=4, name='plain')

        servers = [self.boot_server(cinder_image['id']),
                   self.boot_server(plain_image['id'])]

        self.assert_downloaded(servers[0], cinder_image['id'])
        self.assert_downloaded(servers[1], plain_image['id'])
        self.assertEqual([], self.attachments(volume_id))
        self.assertFalse(os.path.exists(os.path.join(
            self.base_dir, volume_linking.STATE_DIR)))

        self.delete_and_check_gone(*servers)
        self.run_image_cache_manager('compute1')
        for image in (cinder_image, plain_image):
            self.assertFalse(os.path.exists(self.cache_path(image['id'])))
        self.assertTrue(os.path.isfile(device))

    def test_default_handler_is_downloading(self) -> None:
        """No option: servers boot from downloaded templates."""
        self.start_compute('compute1', images_type='qcow2')
        driver = self.computes['compute1'].manager.driver
        self.assertEqual('downloading', driver._template_handler.name)
        image = self.create_image('qcow2', size_mb=4)

        server = self.boot_server(image['id'])

        self.assert_downloaded(server, image['id'])
        # force_raw_images (stock's default): converted to a raw template.
        self.assertEqual(
            'raw', base.qemu_img_info(self.cache_path(image['id']))['format'])
        self.delete_and_check_gone(server)
