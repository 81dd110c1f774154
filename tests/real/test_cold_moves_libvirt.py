"""Real: the cold move (resize, cold migration) of a pool instance goes
through the destination's libvirtd, not SSH (issue 13).

The destination is the session's throwaway libvirtd (the one the source's
pools are on, so paths are the same, as between two computes with the same
``instances_path``). Real: pools, volumes, files, qemu-img, the libvirt
streams. Mocked: stock's own ``migrate_disk_and_power_off`` (a stand-in
doing what stock does around our part: it stops the guest through the
driver's ``power_off``, renames the instance directory to ``_resize`` and
makes it on the destination through the driver's ``_remotefs``), stock's
``power_off`` (no domain), and ``_is_path_shared_with``
(False: the destination is another host).
"""

import json
import os
import uuid
from unittest import mock

import pytest
from nova import exception as nova_exception
from nova import objects
from nova.virt.libvirt import driver as stock_driver
from nova.virt.libvirt import utils as libvirt_utils
from nova.virt.libvirt.volume import remotefs

from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import remote_storage
from nova_imgtype_testing import drivers
from nova_imgtype_testing import libvirtd as real
from tests.real.test_libvirt_storage import _boot_disk
from tests.real.test_libvirt_storage import pool_driver  # noqa: F401
from tests.real.test_native_images import MiB
from tests.real.test_native_images import conf  # noqa: F401
from tests.real.test_native_images import driver  # noqa: F401
from tests.real.test_native_images import glance  # noqa: F401

STOCK = stock_driver.LibvirtDriver


@pytest.fixture
def pool_instance(pool_driver, glance, tmp_path):  # noqa: F811
    image_id = str(uuid.uuid4())
    src = str(tmp_path / 'img.qcow2')
    real.make_image(src, 'qcow2', 16 * MiB)
    glance[image_id] = (src, 'qcow2')
    inst, disk = _boot_disk(pool_driver, image_id, 'qcow2')
    inst.host = 'host1'
    # Data of the instance's own, in its overlay volume.
    real.qemu_img('rebase', '-u', '-f', 'qcow2', '-F', 'qcow2', '-b',
                  real.qemu_img_info(disk.path)['backing-filename'],
                  disk.path)
    with open(disk.path, 'ab') as f:
        f.write(b'instance data' * 100)
    inst_base = libvirt_utils.get_instance_path(inst)
    os.makedirs(inst_base)
    # A legacy left-over that stock would copy with scp.
    with open(os.path.join(inst_base, 'disk.info'), 'w') as f:
        f.write('{"legacy": "qcow2"}')
    with open(disk.path, 'rb') as f:
        data = f.read()
    return inst, disk.path, data, inst_base


def _stock_stand_in(seen):
    def migrate(self, context, instance, dest, *args, **kwargs):
        self.power_off(instance, 0, 0)
        inst_base = libvirt_utils.get_instance_path(instance)
        seen['remotefs'] = self._remotefs
        seen['files'] = sorted(os.listdir(inst_base))
        os.rename(inst_base, inst_base + '_resize')
        self._remotefs.create_dir(dest, inst_base)
        return '[]'
    return migrate


def _move(drv, inst, libvirt_uri, seen):
    with mock.patch.object(STOCK, 'migrate_disk_and_power_off',
                           _stock_stand_in(seen)), \
            mock.patch.object(STOCK, 'power_off'), \
            mock.patch.object(drv, '_is_path_shared_with',
                              return_value=False), \
            mock.patch.object(STOCK, '_live_migration_uri',
                              staticmethod(lambda dest: libvirt_uri)):
        return drivers.send_pool_disks(drv, inst, 'dest-host')


def test_volumes_and_disk_info_go_through_libvirt(
        pool_driver, pool_instance, libvirt_uri):  # noqa: F811
    inst, path, data, inst_base = pool_instance
    seen = {}
    disk_info = json.loads(_move(pool_driver, inst, libvirt_uri, seen))

    # Stock ran with the destination's libvirtd as its remote filesystem,
    # the volume staged in the directory it keeps, disk.info out of sight.
    assert isinstance(seen['remotefs'],
                      remote_storage.LibvirtRemoteFilesystem)
    name = pool_specs.volume_name(inst.uuid, 'disk')
    assert seen['files'] == sorted(['disk.info.imgtype-moving', name])
    assert isinstance(pool_driver._remotefs, remotefs.RemoteFilesystem)
    # The volume is in the destination's pool, the same bytes; the source
    # keeps its own for a revert.
    assert disk_info == [{'type': 'qcow2', 'path': path, 'volume': name}]
    with open(path, 'rb') as f:
        assert f.read() == data
    with open(os.path.join(inst_base + '_resize', name), 'rb') as f:
        assert f.read() == data
    assert name in pool_driver._pools.get(pool_specs.DISKS_POOL).listVolumes()
    # disk.info too, and the source's is back under its name.
    for d in (inst_base, inst_base + '_resize'):
        with open(os.path.join(d, 'disk.info')) as f:
            assert json.load(f) == {'legacy': 'qcow2'}


def test_a_failed_copy_puts_everything_back(
        pool_driver, pool_instance, libvirt_uri):  # noqa: F811
    inst, path, data, inst_base = pool_instance

    def broken(self, src, host, dst_path):
        raise OSError('destination unreachable')

    removed = []
    # Stock's clean-up removes the instance directory on the destination,
    # which here is this host's own: recorded, not done.
    with mock.patch.object(remote_storage.LibvirtRemoteFilesystem,
                           'upload', broken), \
            mock.patch.object(remote_storage.LibvirtRemoteFilesystem,
                              'remove_dir',
                              lambda self, host, path: removed.append(
                                  (host, path))):
        with pytest.raises(nova_exception.InstanceFaultRollback) as e:
            _move(pool_driver, inst, libvirt_uri, {})
    # Rolled back: the instance keeps its host and may move again.
    reason = str(e.value.inner_exception)
    assert 'destination unreachable' in reason and 'dest-host' in reason
    assert removed == [('dest-host', inst_base)]
    assert not os.path.exists(inst_base + '_resize')
    assert sorted(os.listdir(inst_base)) == ['disk.info']
    with open(path, 'rb') as f:
        assert f.read() == data
    name = pool_specs.volume_name(inst.uuid, 'disk')
    assert name in pool_driver._pools.get(pool_specs.DISKS_POOL).listVolumes()


def test_an_unreachable_destination_touches_nothing(
        pool_driver, pool_instance, tmp_path):  # noqa: F811
    inst, path, data, inst_base = pool_instance
    nowhere = 'qemu+unix:///system?socket=%s' % (tmp_path / 'no-socket')
    with mock.patch.object(STOCK, 'migrate_disk_and_power_off') as stock, \
            mock.patch.object(STOCK, 'power_off') as power_off, \
            mock.patch.object(pool_driver, '_is_path_shared_with',
                              return_value=False), \
            mock.patch.object(STOCK, '_live_migration_uri',
                              staticmethod(lambda dest: nowhere)):
        with pytest.raises(nova_exception.InstanceFaultRollback) as e:
            drivers.send_pool_disks(pool_driver, inst, 'dest-host')
    assert 'dest-host' in str(e.value.inner_exception)
    assert nowhere in str(e.value.inner_exception)
    power_off.assert_not_called()
    stock.assert_not_called()
    assert sorted(os.listdir(inst_base)) == ['disk.info']
    with open(path, 'rb') as f:
        assert f.read() == data


def test_legacy_files_go_through_libvirt_too(
        pool_driver, tmp_path, libvirt_uri):  # noqa: F811
    inst = objects.Instance(uuid=str(uuid.uuid4()), host='host1',
                            system_metadata={}, migration_context=None,
                            flavor=objects.Flavor(extra_specs={}),
                            image_ref='', task_state=None, vm_state='active')
    inst_base = libvirt_utils.get_instance_path(inst)
    os.makedirs(inst_base)
    disk = os.path.join(inst_base, 'disk')
    real.make_image(disk, 'qcow2', 8 * MiB)
    with open(disk, 'ab') as f:
        f.write(b'legacy data' * 50)
    with open(disk, 'rb') as f:
        data = f.read()
    real.make_image(os.path.join(inst_base, 'disk.swap'), 'raw', MiB)
    with open(os.path.join(inst_base, 'disk.info'), 'w') as f:
        f.write('{"%s": "qcow2"}' % disk)
    found = [{'type': 'qcow2', 'path': disk},
             {'type': 'raw', 'path': os.path.join(inst_base, 'disk.swap')}]
    seen = {}

    def stock(self, context, instance, dest, *args, **kwargs):
        # What stock copies itself, with SSH: what this returns.
        seen['copies'] = self._get_instance_disk_info(instance, None)
        os.rename(inst_base, inst_base + '_resize')
        self._remotefs.create_dir(dest, inst_base)
        return json.dumps(seen['copies'])

    with mock.patch.object(STOCK, 'migrate_disk_and_power_off', stock), \
            mock.patch.object(STOCK, '_get_instance_disk_info',
                              return_value=found), \
            mock.patch.object(pool_driver, '_is_path_shared_with',
                              return_value=False), \
            mock.patch.object(STOCK, '_live_migration_uri',
                              staticmethod(lambda dest: libvirt_uri)), \
            mock.patch.object(objects.Instance, 'image_meta',
                              objects.ImageMeta.from_dict({})):
        disk_info = json.loads(drivers.send_files(pool_driver, inst,
                                                  'dest-host'))

    assert seen['copies'] == []
    assert disk_info == found
    # "There": the disk, its bytes; disk.info; no swap (made anew there).
    assert sorted(os.listdir(inst_base)) == ['disk', 'disk.info']
    with open(disk, 'rb') as f:
        assert f.read() == data
    assert sorted(os.listdir(inst_base + '_resize')) == [
        'disk', 'disk.info', 'disk.swap']


def test_a_move_stock_refuses_leaves_the_guest_running_and_nothing_there(
        pool_driver, pool_instance, libvirt_uri):  # noqa: F811
    """Stock refuses (a resize down) before it stops the guest: the guest
    is not stopped, the volumes stay in the pool, and the instance
    directory made on the destination is removed (here this host's own:
    recorded, not done)."""
    inst, path, data, inst_base = pool_instance

    def refuse(self, context, instance, dest, *args, **kwargs):
        raise nova_exception.InstanceFaultRollback(
            nova_exception.ResizeError(reason='Unable to resize disk down.'))

    removed = []
    with mock.patch.object(STOCK, 'migrate_disk_and_power_off', refuse), \
            mock.patch.object(STOCK, 'power_off') as power_off, \
            mock.patch.object(pool_driver, '_is_path_shared_with',
                              return_value=False), \
            mock.patch.object(STOCK, '_live_migration_uri',
                              staticmethod(lambda dest: libvirt_uri)), \
            mock.patch.object(remote_storage.LibvirtRemoteFilesystem,
                              'remove_dir',
                              lambda self, host, p: removed.append(
                                  (host, p))):
        with pytest.raises(nova_exception.InstanceFaultRollback):
            drivers.send_pool_disks(pool_driver, inst, 'dest-host')
    # Stock refuses before it stops the guest, and so does the move: the
    # guest runs on (issue 29, 7: it was powered off for nothing).
    power_off.assert_not_called()
    assert removed == [('dest-host', inst_base)]
    assert sorted(os.listdir(inst_base)) == ['disk.info']
    with open(path, 'rb') as f:
        assert f.read() == data
    name = pool_specs.volume_name(inst.uuid, 'disk')
    assert name in pool_driver._pools.get(pool_specs.DISKS_POOL).listVolumes()


def test_deleting_the_files_of_a_deleted_instance_removes_its_volumes(
        pool_driver, pool_instance, glance, tmp_path):  # noqa: F811
    """Stock's pending deletes and its clean-up of a deleted instance's
    failed move call ``delete_instance_files``: the instance's volumes in
    this host's dir pool (a failed cold move's copies) go with its
    directory (issue 29, 8: they stayed for ever), another instance's stay.
    """
    inst, path, data, inst_base = pool_instance
    other_id = str(uuid.uuid4())
    src = str(tmp_path / 'other.qcow2')
    real.make_image(src, 'qcow2', 16 * MiB)
    glance[other_id] = (src, 'qcow2')
    other, other_disk = _boot_disk(pool_driver, other_id, 'qcow2')
    pool = pool_driver._pools.get(pool_specs.DISKS_POOL)
    name = pool_specs.volume_name(inst.uuid, 'disk')
    # A volume of the instance that a failed move left in the pool.
    pool_driver._pools.create_empty(pool, pool_specs.volume_name(
        inst.uuid, 'disk.local'), 'raw', MiB)
    assert name in pool.listVolumes()

    assert pool_driver.delete_instance_files(inst) is True

    assert not os.path.exists(inst_base)
    assert not os.path.exists(path)
    left = pool.listVolumes()
    assert not [v for v in left if v.startswith(inst.uuid)]
    assert pool_specs.volume_name(other.uuid, 'disk') in left
    assert os.path.exists(other_disk.path)
