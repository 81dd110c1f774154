"""Real: the config drive of an instance that is not on rbd, on rbd hosts.

Stock imports every config drive into Ceph (``{uuid}_disk.config``) when
the host's ``images_type`` is rbd, and on ``destroy(destroy_disks=True)``
removes every ``{uuid}*`` image of the pool. An instance whose disks are
local (``qcow2:qcow2`` on an rbd host) is not shared storage: the host it
was evacuated from destroys its disks when it comes back, and would so
delete the config drive the destination uses. nova-imgtype keeps such an
instance's config drive a raw file of the instance, as stock makes it on
any other host.

Real: the throwaway Ceph cluster, stock's ``_create_configdrive`` (ISO 9660
made by genisoimage), stock's guest disk config and ``destroy``; two hosts
as two instance directories (one conf, switched) on the same cluster.
Fake: the instance's metadata (Nova's metadata service object reads the
database), its save (no database), Nova's product and version strings
(they read a release file) and the driver's libvirt connection
(LibvirtFixture: there is no domain to undefine).
"""

import contextlib
import os
import uuid
from unittest import mock

import pytest
from nova import context as nova_context
from nova import objects
from nova import version
from nova.api.metadata import base as instance_metadata
from nova.virt.libvirt import driver as stock_driver
from nova.virt.libvirt import utils as libvirt_utils
from oslo_concurrency import processutils

from nova_imgtype import record
from tests.real.test_native_images import conf  # noqa: F401
from tests.real.test_native_images import driver  # noqa: F401

objects.register_all()
DISK_MAPPING = {'disk.config': {'bus': 'ide', 'dev': 'hda',
                                'type': 'cdrom'}}


class _Metadata:
    """What the config drive holds: the instance's uuid."""

    def __init__(self, instance, **kwargs):
        self.uuid = instance.uuid

    def metadata_for_config_drive(self):
        yield ('openstack/latest/meta_data.json',
               ('{"uuid": "%s"}' % self.uuid).encode())


@contextlib.contextmanager
def config_drive_fakes():
    """What stock's config drive step reads that is not here: the
    instance's metadata, its device metadata, Nova's version strings."""
    with mock.patch.object(instance_metadata, 'InstanceMetadata',
                           _Metadata), \
            mock.patch.object(stock_driver.LibvirtDriver,
                              '_build_device_metadata', return_value=None), \
            mock.patch.object(version, 'product_string',
                              return_value='OpenStack Compute'), \
            mock.patch.object(version, 'version_string_with_package',
                              return_value='34'):
        yield


@pytest.fixture
def rbd_hosts(driver, conf, ceph_cluster, tmp_path):  # noqa: F811
    """Two rbd hosts without storage pools, qcow2 images mapped to qcow2,
    sharing the cluster: ``use(host)`` makes ``host`` the one acting."""
    drv = driver(images_type='rbd', images_rbd_pool=ceph_cluster.pool,
                 images_rbd_ceph_conf=ceph_cluster.conf,
                 images_type_mapping='qcow2:qcow2')
    paths = {}
    for host in ('hostA', 'hostB'):
        paths[host] = str(tmp_path / host / 'instances')
        os.makedirs(paths[host])

    def use(host):
        conf.config(host=host, instances_path=paths[host])

    with config_drive_fakes():
        yield drv, use, paths
    ceph_cluster.purge()


def _instance(drv, disk_format='qcow2'):
    inst = objects.Instance(
        uuid=str(uuid.uuid4()), image_ref=str(uuid.uuid4()),
        config_drive='True', task_state=None, vm_state='building',
        migration_context=None, system_metadata={}, metadata={},
        flavor=objects.Flavor(extra_specs={}), numa_topology=None,
        pci_devices=objects.PciDeviceList(objects=[]), resources=None,
        host=None, node=None)
    drv._record.record_build(inst, disk_format)
    return inst


def _make_config_drive(drv, inst):
    """Stock's config drive step of spawn (in the instance directory its
    ``_create_image`` made), and the disk it gives QEMU."""
    os.makedirs(libvirt_utils.get_instance_path(inst), exist_ok=True)
    drv._create_configdrive(nova_context.get_admin_context(), inst,
                            stock_driver.InjectionInfo(
                                network_info=[], files=[], admin_pass=None))
    return drv._get_guest_disk_config(
        inst, 'disk.config', DISK_MAPPING, inst.flavor,
        drv._get_disk_config_image_type())


def _reads_uuid(cluster, disk, inst):
    """Whether the config drive ``disk`` names holds the instance's data,
    read where the guest's QEMU would read it."""
    if disk.source_type == 'network':
        image = disk.source_name.split('/', 1)[1]
        if image not in cluster.images():
            return False
        path = os.path.join(os.path.dirname(cluster.conf), image + '.export')
        cluster.rbd('export', '--no-progress', cluster.image_spec(image),
                    path)
    else:
        path = disk.source_path
        if not os.path.exists(path):
            return False
    with open(path, 'rb') as f:
        return inst.uuid.encode() in f.read()


def test_a_local_instances_config_drive_stays_local_on_rbd_hosts(
        rbd_hosts, ceph_cluster):
    drv, use, paths = rbd_hosts
    use('hostA')
    inst = _instance(drv)
    disk = _make_config_drive(drv, inst)
    # Nothing of the instance in Ceph for stock's host-wide cleanup.
    assert [i for i in ceph_cluster.images()
            if i.startswith(inst.uuid)] == []
    assert disk.source_type == 'file'
    assert disk.source_path == os.path.join(paths['hostA'], inst.uuid,
                                            'disk.config')
    assert disk.driver_format == 'raw'
    assert _reads_uuid(ceph_cluster, disk, inst)


def test_the_evacuated_source_coming_back_keeps_the_destinations_drive(
        rbd_hosts, ceph_cluster):
    drv, use, paths = rbd_hosts
    use('hostA')
    inst = _instance(drv)
    _make_config_drive(drv, inst)
    # Evacuated: hostB rebuilds the instance (its spawn makes the config
    # drive there).
    use('hostB')
    inst.vm_state = 'active'
    on_b = _make_config_drive(drv, inst)
    assert _reads_uuid(ceph_cluster, on_b, inst)
    # hostA comes back: the instance is not on shared storage, so the
    # compute manager destroys it with its disks.
    use('hostA')
    with mock.patch.object(objects.Instance, 'save'):    # no database
        drv.destroy(nova_context.get_admin_context(), inst, [], None, True)
    assert not os.path.exists(os.path.join(paths['hostA'], inst.uuid))
    assert _reads_uuid(ceph_cluster, on_b, inst)


def test_an_rbd_instances_config_drive_is_in_ceph_as_stock_makes_it(
        rbd_hosts, ceph_cluster):
    drv, use, paths = rbd_hosts
    use('hostA')
    inst = _instance(drv, 'raw')        # unmapped: images_type, rbd
    assert drv._resolver.backend_for(inst) == 'rbd'
    disk = _make_config_drive(drv, inst)
    assert disk.source_type == 'network'
    assert inst.uuid + '_disk.config' in ceph_cluster.images()
    assert not os.path.exists(os.path.join(paths['hostA'], inst.uuid,
                                           'disk.config'))
    assert _reads_uuid(ceph_cluster, disk, inst)


def test_a_config_drive_in_ceph_from_before_the_record_said_stays_used(
        rbd_hosts, ceph_cluster):
    """An instance recorded before its config drive's place was: stock's
    choice, in Ceph on an rbd host, where an earlier release made it."""
    drv, use, paths = rbd_hosts
    use('hostA')
    inst = _instance(drv)
    del inst.system_metadata[record.CONFIG_DRIVE]
    disk = _make_config_drive(drv, inst)
    assert disk.source_type == 'network'
    assert _reads_uuid(ceph_cluster, disk, inst)


def test_a_config_drive_file_is_raw_whatever_the_guest_wrote_in_it(
        driver, conf, tmp_path):  # noqa: F811
    """A vfat config drive is the guest's to write: a qcow2 header it
    writes there (backed by a host file) never makes QEMU open it as
    qcow2, on any host."""
    drv = driver(images_type='qcow2', images_type_mapping='raw:flat')
    inst = _instance(drv)
    with config_drive_fakes():
        # Spawn's guest XML is written before the drive is made.
        first = drv._get_guest_disk_config(
            inst, 'disk.config', DISK_MAPPING, inst.flavor,
            drv._get_disk_config_image_type())
        os.makedirs(libvirt_utils.get_instance_path(inst), exist_ok=True)
        drv._create_configdrive(nova_context.get_admin_context(), inst,
                                stock_driver.InjectionInfo(
                                    network_info=[], files=[],
                                    admin_pass=None))
    assert first.source_type == 'file'
    assert first.driver_format == 'raw'
    # The guest rewrites its drive: a qcow2 header naming a host file.
    processutils.execute('qemu-img', 'create', '-f', 'qcow2', '-b',
                         '/etc/hostname', '-F', 'raw', first.source_path,
                         '1M')
    # The next guest XML (a hard reboot, a move).
    after = drv._get_guest_disk_config(
        inst, 'disk.config', DISK_MAPPING, inst.flavor,
        drv._get_disk_config_image_type())
    assert after.source_path == first.source_path
    assert after.driver_format == 'raw'
