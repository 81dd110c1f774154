"""Real: a guest's bytes decide nothing (issue 27, 1 and 2).

A guest owns the bytes of its raw disk. It writes a qcow2 header into it
naming a backing file: a root-only host file, or another image's cache
name. After a refresh of the dir pool (every libvirtd start, every cold
move arriving), libvirt reports that volume as a qcow2 overlay of that
file. Nothing the plugin does with the disk may follow it: a snapshot, the
disk info a live block migration sends, a cold move's disk info, and the
adoption of a legacy instance's files all use the format recorded for the
disk, and read the guest's data as QEMU reads it (the format the domain
XML gives).

Real: the throwaway libvirtd, its dir pools, qemu-img, files. Fake: the
image service (a local file), the Nova DB (``Instance.save``).
"""

import json
import os
import uuid
from unittest import mock

import pytest
from lxml import etree
from nova import objects
from nova.virt.libvirt import driver as stock_driver
from nova.virt.libvirt import utils as libvirt_utils

from nova_imgtype.virt.libvirt import live_migration
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype_testing import drivers
from nova_imgtype_testing import libvirtd as real
from tests.real.test_libvirt_storage import _boot_disk
from tests.real.test_libvirt_storage import pool_driver  # noqa: F401
from tests.real.test_native_images import MiB
from tests.real.test_native_images import conf  # noqa: F401
from tests.real.test_native_images import driver  # noqa: F401
from tests.real.test_native_images import glance  # noqa: F401

objects.register_all()

STOCK = stock_driver.LibvirtDriver
MARKER = b'HOST-SECRET-MARKER-27'


@pytest.fixture
def host_secret(tmp_path):
    """A root-only host file holding :data:`MARKER` (raw)."""
    path = tmp_path / 'secret.raw'
    path.write_bytes(MARKER * 4096)
    os.chmod(path, 0o600)
    return str(path)


def guest_writes_header(disk_path, backing, tmp_path):
    """What a guest can do to its raw disk: write, from offset 0, the
    header of a qcow2 image backed by ``backing``. Returns the bytes
    written (the guest's data, as a raw read gives them back)."""
    header = str(tmp_path / ('hdr-%s.qcow2' % uuid.uuid4().hex))
    real.qemu_img('create', '-q', '-f', 'qcow2', '-b', backing, '-F', 'raw',
                  header, '1G')
    with open(header, 'rb') as f:
        data = f.read()
    with open(disk_path, 'r+b') as f:
        f.write(data)
    return data


def read_as_domain(path, fmt, out):
    """The disk's data as QEMU reads them with the domain's format."""
    real.qemu_img('convert', '-f', fmt, '-O', 'raw', path, out)
    with open(out, 'rb') as f:
        return f.read()


def _raw_instance(drv, glance, tmp_path):  # noqa: F811
    image_id = str(uuid.uuid4())
    src = str(tmp_path / 'img.raw')
    real.make_image(src, 'raw', 8 * MiB)
    glance[image_id] = (src, 'raw')
    return _boot_disk(drv, image_id, 'raw')   # flat on pools: a raw volume


def _mapping(dev):
    return {'bus': 'virtio', 'dev': dev, 'type': 'disk'}


def _refresh(drv):
    drv._pools.get(pool_specs.DISKS_POOL).refresh(0)


def _libvirt_reads(vol):
    xml = etree.fromstring(vol.XMLDesc(0))
    return (xml.find('target/format').get('type'),
            xml.findtext('backingStore/path'))


@pytest.mark.parametrize('backing', ['secret', 'cache-name'])
def test_a_snapshot_of_a_raw_volume_holds_the_guests_bytes(
        pool_driver, glance, tmp_path, host_secret, backing):  # noqa: F811
    inst, disk = _raw_instance(pool_driver, glance, tmp_path)
    target = (host_secret if backing == 'secret' else os.path.join(
        os.path.dirname(host_secret), 'another-image-cache-name'))
    if backing == 'cache-name':
        os.link(host_secret, target)
    written = guest_writes_header(disk.path, target, tmp_path)
    _refresh(pool_driver)
    vol = disk._volume()
    # The premise: libvirt now takes the guest's header for the format.
    assert _libvirt_reads(vol) == ('qcow2', target)

    snap_dir = tmp_path / 'snap'
    snap_dir.mkdir()
    out = str(snap_dir / 'snap')
    disk.snapshot_extract(out, 'raw')

    data = read_as_domain(out, 'raw', str(tmp_path / 'snap.data'))
    assert MARKER not in data
    assert data[:len(written)] == written
    pool_driver._disks.delete_pool_volumes(inst)


def test_live_migration_disk_info_is_the_record_not_the_probe(
        pool_driver, glance, tmp_path, host_secret):  # noqa: F811
    inst, disk = _raw_instance(pool_driver, glance, tmp_path)
    size = os.path.getsize(disk.path)
    guest_writes_header(disk.path, host_secret, tmp_path)
    _refresh(pool_driver)

    decision = pool_driver._resolver.decision_for(inst)
    info = live_migration.volume_disk_info(disk._volume(),
                                           decision.volume_format('disk'))
    # What the destination makes, and the template it would fetch: the
    # recorded raw disk, no backing file, the file's own size (not the
    # 1 GiB of the guest's header).
    assert (info['type'], info['backing_file'], info['virt_disk_size']) == (
        'raw', '', size)
    pool_driver._disks.delete_pool_volumes(inst)


def test_a_config_drive_volume_is_raw_whatever_its_bytes(
        pool_driver, glance, tmp_path, host_secret):  # noqa: F811
    inst, _disk = _raw_instance(pool_driver, glance, tmp_path)
    drive = pool_driver.image_backend.by_name(
        inst, 'disk.config', 'raw', disk_info_mapping=_mapping('vdz'))
    local = str(tmp_path / 'disk.config')
    real.make_image(local, 'raw', 1 * MiB)      # a vfat config drive
    guest_writes_header(local, host_secret, tmp_path)
    drive.import_file(inst, local, 'disk.config')
    _refresh(pool_driver)
    assert _libvirt_reads(drive._volume())[0] == 'qcow2'

    assert drive.volume_format == 'raw'
    decision = pool_driver._resolver.decision_for(inst)
    info = live_migration.volume_disk_info(
        drive._volume(), decision.volume_format('disk.config'))
    assert (info['type'], info['backing_file']) == ('raw', '')
    guest = drive.libvirt_info('none', {}).to_xml()
    assert etree.fromstring(guest).find('driver').get('type') == 'raw'
    pool_driver._disks.delete_pool_volumes(inst)


def _legacy_flat(drv):
    """A stopped legacy ``flat`` instance and its (empty) directory."""
    inst = objects.Instance(
        uuid=str(uuid.uuid4()), task_state=None, vm_state='stopped',
        system_metadata={'imgtype_backend': 'flat',
                         'imgtype_storage': 'legacy',
                         'imgtype_native_formats': ''})
    inst_dir = os.path.join(drv._resolver._conf.instances_path, inst.uuid)
    os.makedirs(inst_dir)
    return inst, inst_dir


def test_adoption_keeps_each_files_recorded_format(
        pool_driver, tmp_path, host_secret):  # noqa: F811
    """Issue 27, 2: a legacy Flat instance with a qcow2 root and a raw
    ephemeral disk into whose bytes the guest wrote a qcow2 header."""
    inst, inst_dir = _legacy_flat(pool_driver)
    root = os.path.join(inst_dir, 'disk')
    local = os.path.join(inst_dir, 'disk.local')
    real.make_image(root, 'qcow2', 8 * MiB)
    real.make_image(local, 'raw', 8 * MiB)
    written = guest_writes_header(local, host_secret, tmp_path)
    with open(os.path.join(inst_dir, 'disk.info'), 'w') as f:
        json.dump({root: 'qcow2', local: 'raw'}, f)

    with mock.patch.object(objects.Instance, 'save'):
        pool_driver._disks.move_to_pools(inst)

    decision = pool_driver._resolver.recorded(inst)
    assert decision.storage == 'pools'
    assert (decision.volume_format('disk'),
            decision.volume_format('disk.local')) == ('qcow2', 'raw')
    for name, fmt in (('disk', 'qcow2'), ('disk.local', 'raw')):
        vol = pool_driver.image_backend.by_name(
            inst, name, disk_info_mapping=_mapping('vda'))
        xml = etree.fromstring(vol.libvirt_info('none', {}).to_xml())
        assert xml.find('driver').get('type') == fmt, name
    vol = pool_driver.image_backend.by_name(inst, 'disk.local')
    data = read_as_domain(vol.path, 'raw', str(tmp_path / 'local.data'))
    assert MARKER not in data and data[:len(written)] == written
    pool_driver._disks.delete_pool_volumes(inst)


def test_adoption_without_a_recorded_format_leaves_the_files(
        pool_driver, tmp_path):  # noqa: F811
    inst, inst_dir = _legacy_flat(pool_driver)
    real.make_image(os.path.join(inst_dir, 'disk'), 'raw', 1 * MiB)
    with mock.patch.object(objects.Instance, 'save') as save:
        pool_driver._disks.move_to_pools(inst)
    assert not save.called
    assert pool_driver._resolver.recorded(inst).storage == 'legacy'
    assert os.path.exists(os.path.join(inst_dir, 'disk'))


def test_a_cold_move_to_a_host_without_pools_sends_the_recorded_format(
        pool_driver, glance, tmp_path, host_secret, libvirt_uri):  # noqa
    """Sent as a qcow2 disk, stock's raw->qcow2 safety conversion on the
    destination is skipped and its next start opens the raw disk as a
    qcow2 overlay of the host file."""
    inst, disk = _raw_instance(pool_driver, glance, tmp_path)
    inst.host = 'host1'
    os.makedirs(libvirt_utils.get_instance_path(inst))
    guest_writes_header(disk.path, host_secret, tmp_path)
    _refresh(pool_driver)
    assert _libvirt_reads(disk._volume())[0] == 'qcow2'

    def stock(self, context, instance, dest, *args, **kwargs):
        self.power_off(instance, 0, 0)
        inst_base = libvirt_utils.get_instance_path(instance)
        os.rename(inst_base, inst_base + '_resize')
        self._remotefs.create_dir(dest, inst_base)
        return '[]'

    with mock.patch.object(STOCK, 'migrate_disk_and_power_off', stock), \
            mock.patch.object(STOCK, 'power_off'), \
            mock.patch.object(pool_driver, '_is_path_shared_with',
                              return_value=False), \
            mock.patch.object(STOCK, '_live_migration_uri',
                              staticmethod(lambda dest: libvirt_uri)):
        disk_info = json.loads(drivers.send_pool_disks(
            pool_driver, inst, 'dest-host', dest_pools=False))
    assert [(i['type'], os.path.basename(i['path'])) for i in disk_info] == [
        ('raw', 'disk')]


def test_a_raw_volume_grows_as_raw_whatever_its_bytes(
        pool_driver, glance, tmp_path, host_secret):  # noqa: F811
    """Issue 54: a resize up of a raw volume whose guest wrote a qcow2
    header. libvirt, once its pool refreshed, takes the volume for a small
    qcow2 image and would resize it as one (rewriting the guest's header,
    the disk not grown): it grows as the raw file it is recorded."""
    inst, disk = _raw_instance(pool_driver, glance, tmp_path)
    written = guest_writes_header(disk.path, host_secret, tmp_path)
    _refresh(pool_driver)
    assert _libvirt_reads(disk._volume())[0] == 'qcow2'   # the premise
    before = os.path.getsize(disk.path)

    again = pool_driver.image_backend.by_name(inst, 'disk')
    again.resize_image(before + 16 * MiB)

    assert os.path.getsize(disk.path) == before + 16 * MiB
    data = read_as_domain(disk.path, 'raw', str(tmp_path / 'grown.data'))
    assert data[:len(written)] == written and MARKER not in data
    pool_driver._disks.delete_pool_volumes(inst)
