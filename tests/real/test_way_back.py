"""Real: a host taken back to stock's ``libvirt.LibvirtDriver`` (issue 31).

``nova-imgtype prepare-uninstall --apply`` moves each stopped instance of
the host back to stock's layout (:mod:`nova_imgtype.virt.libvirt.way_back`)
and undefines the plugin's pools. Here a host on pools (``images_type =
flat``, ``qcow2:qcow2``) holds a native qcow2 instance (an overlay volume
on its template) and a flat one (raw volumes); after the way back, stock's
own image backend (not the plugin's) gives the guest XML of each disk, a
domain boots on exactly those disks, and each disk reads back what was
written, in the format stock's XML gives QEMU. The same for a host whose
``images_type`` is qcow2, where the flat instance's raw disks become qcow2.

Real: the throwaway libvirtd, its dir pools, qemu-img, qemu-io, QEMU (KVM,
or TCG). Fake: the Nova DB (``Instance.save``); the CLI's conductor and
placement calls are unit-tested (tests/unit/test_prepare_uninstall.py).
"""

import json
import os
import subprocess
import uuid
from unittest import mock

import libvirt
import nova.conf
import pytest
from lxml import etree
from nova import objects
from nova.virt.libvirt import imagebackend as stock_imagebackend

from nova_imgtype import exception
from nova_imgtype.cmd import prepare_uninstall
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import way_back as way_back_mod
from nova_imgtype_testing import libvirtd as real
from tests.real.test_libvirt_storage import pool_driver  # noqa: F401
from tests.real.test_native_images import MiB
from tests.real.test_native_images import conf  # noqa: F401
from tests.real.test_native_images import driver  # noqa: F401

SIZE = 16 * MiB
DEVS = {'disk': 'vda', 'disk.local': 'vdb', 'disk.config': 'vdc'}


def _qemu_io(path, fmt, command):
    out = subprocess.run(['qemu-io', '-f', fmt, '-c', command, path],
                         capture_output=True, text=True, check=True)
    return out.stdout + out.stderr


def _write(path, fmt, pattern):
    _qemu_io(path, fmt, 'write -q -P %d 1M 64k' % pattern)


def _reads(path, fmt, pattern):
    return 'Pattern verification failed' not in _qemu_io(
        path, fmt, 'read -q -P %d 1M 64k' % pattern)


def _instance(drv, disk_format, name):
    decision = drv._resolver.decide(disk_format)
    inst = objects.Instance(
        uuid=str(uuid.uuid4()), display_name=name, vm_state='stopped',
        task_state=None, system_metadata={'image_disk_format': disk_format})
    drv._resolver.record(inst, decision)
    return inst


def _host_with_instances(drv):
    """A native qcow2 pool instance and a flat one, each disk marked."""
    pools = drv._pools
    disks = pools.get(pool_specs.DISKS_POOL)
    base = os.path.join(drv._resolver._conf.instances_path, '_base')
    template = os.path.join(base, 'template_qcow2')
    real.make_image(template, 'qcow2', SIZE)
    pools.refresh(pool_specs.BASE_POOL)
    native = _instance(drv, 'qcow2', 'native')
    pools.create_cow(disks, pool_specs.volume_name(native.uuid, 'disk'),
                     template, 'qcow2', SIZE)
    pools.create_empty(disks, pool_specs.volume_name(
        native.uuid, 'disk.config'), 'raw', SIZE)
    flat = _instance(drv, 'raw', 'flat')
    for name in ('disk', 'disk.local'):
        pools.create_empty(disks, pool_specs.volume_name(flat.uuid, name),
                           'raw', SIZE)
    marks = {}
    for pattern, inst in enumerate((native, flat), start=0x31):
        decision = drv._resolver.recorded(inst)
        assert decision.storage == 'pools'
        for vol in pools.volumes(disks, inst.uuid + '_'):
            name = vol.name()[len(inst.uuid) + 1:]
            _write(vol.path(), decision.volume_format(name), pattern)
            marks[(inst.uuid, name)] = pattern
    return native, flat, marks, template


def _stock_disk_xml(inst, name):
    """The disk's XML as stock's driver writes it: stock's image backend
    for the host's images_type, the format from its disk.info."""
    # Stock makes the config drive raw whatever images_type is
    # (LibvirtDriver._get_disk_config_image_type).
    disk = stock_imagebackend.Backend(True).by_name(
        inst, name, image_type='raw' if name == 'disk.config' else None,
        disk_info_mapping={
            'bus': 'virtio', 'dev': DEVS[name], 'type': 'disk'})
    return etree.fromstring(disk.libvirt_info('none', {}).to_xml())


def _boots_and_reads_back(conn, daemon, inst, marks, kvm):
    names = sorted(n for (u, n) in marks if u == inst.uuid)
    xmls = [_stock_disk_xml(inst, n) for n in names]
    paths = [x.find('source').get('file') for x in xmls]
    daemon.give(*paths)
    dom = real.start_domain(conn, 'wayback-' + inst.uuid[:8],
                            [etree.tostring(x).decode() for x in xmls],
                            kvm=kvm)
    try:
        assert dom.state()[0] == libvirt.VIR_DOMAIN_RUNNING
    finally:
        real.destroy_domain(dom)
    formats = {}
    for name, xml, path in zip(names, xmls, paths, strict=True):
        fmt = xml.find('driver').get('type')
        formats[name] = fmt
        # Stock's file in the instance directory.
        assert path == os.path.join(
            nova.conf.CONF.instances_path, inst.uuid, name), path
        assert _reads(path, fmt, marks[(inst.uuid, name)]), (name, fmt)
    return formats


def _take_back(drv, conn):
    back = prepare_uninstall.way_back(drv._resolver._conf, lambda: conn)
    return back


def test_a_pool_host_goes_back_to_stock_and_boots_each_instance(
        pool_driver, conf, libvirt_conn, libvirt_daemon,  # noqa: F811
        kvm_available):
    native, flat, marks, template = _host_with_instances(pool_driver)
    back = _take_back(pool_driver, libvirt_conn)

    with mock.patch.object(objects.Instance, 'save') as save:
        dry = [back.review(i, stopped=True, apply=False)
               for i in (native, flat)]
        assert [f.outcome for f in dry] == [way_back_mod.TO_MOVE] * 2
        assert not save.called          # a dry run changes nothing
        found = [back.review(i, stopped=True, apply=True)
                 for i in (native, flat)]
    assert [f.outcome for f in found] == [way_back_mod.MOVED] * 2, found
    for inst in (native, flat):
        decision = pool_driver._resolver.recorded(inst)
        assert decision.storage == 'legacy'
        volumes = pool_driver._pools.get(pool_specs.DISKS_POOL).listVolumes()
        assert not [v for v in volumes if v.startswith(inst.uuid)]

    # Stock's Flat reads each file's format from disk.info: written from
    # the record, never probed.
    for inst, formats in ((native, {'disk': 'qcow2', 'disk.config': 'raw'}),
                          (flat, {'disk': 'raw', 'disk.local': 'raw'})):
        inst_dir = os.path.join(nova.conf.CONF.instances_path, inst.uuid)
        with open(os.path.join(inst_dir, 'disk.info')) as f:
            assert json.load(f) == {os.path.join(inst_dir, n): fmt
                                    for n, fmt in formats.items()}

    removed = back.remove_pools()
    assert {n for n, what in removed if what.startswith('undefined')} == {
        pool_specs.BASE_POOL, pool_specs.DISKS_POOL}
    assert back.own_pools() == []
    assert os.path.exists(template)     # the cache's files are kept

    # Stock's driver, images_type = flat: each disk in the format stock's
    # Flat reads from disk.info, the overlay on its template.
    assert _boots_and_reads_back(libvirt_conn, libvirt_daemon, native, marks,
                                 kvm_available) == {
        'disk': 'qcow2', 'disk.config': 'raw'}
    assert _boots_and_reads_back(libvirt_conn, libvirt_daemon, flat, marks,
                                 kvm_available) == {
        'disk': 'raw', 'disk.local': 'raw'}


def test_on_a_qcow2_host_raw_disks_become_qcow2(
        pool_driver, conf, libvirt_conn, libvirt_daemon,  # noqa: F811
        kvm_available):
    native, flat, marks, _template = _host_with_instances(pool_driver)
    # Stock's driver will run with images_type = qcow2: its Qcow2 backend
    # gives QEMU every disk but the config drive as qcow2.
    conf.config(images_type='qcow2', group='libvirt')
    back = _take_back(pool_driver, libvirt_conn)
    with mock.patch.object(objects.Instance, 'save'):
        found = back.review(flat, stopped=True, apply=True)
        assert found.outcome == way_back_mod.MOVED, found
        assert 'converted to qcow2' in found.detail
        assert back.review(native, stopped=True, apply=True).outcome == (
            way_back_mod.MOVED)
    decision = pool_driver._resolver.recorded(flat)
    assert (decision.backend, decision.storage) == ('qcow2', 'legacy')
    assert decision.native_formats == () and decision.disk_formats == ()
    assert _boots_and_reads_back(libvirt_conn, libvirt_daemon, flat, marks,
                                 kvm_available) == {
        'disk': 'qcow2', 'disk.local': 'qcow2'}
    assert _boots_and_reads_back(libvirt_conn, libvirt_daemon, native, marks,
                                 kvm_available) == {
        'disk': 'qcow2', 'disk.config': 'raw'}
    back.remove_pools()


def test_running_instances_are_marked_and_unservable_ones_left(
        pool_driver, conf, libvirt_conn):  # noqa: F811
    native, flat, _marks, _template = _host_with_instances(pool_driver)
    back = _take_back(pool_driver, libvirt_conn)
    disks = pool_driver._pools.get(pool_specs.DISKS_POOL)
    before = sorted(disks.listVolumes())
    with mock.patch.object(objects.Instance, 'save') as save:
        # Running: marked to move at its next hard reboot, nothing moved.
        running = back.review(native, stopped=False, apply=True)
        assert running.outcome == way_back_mod.AT_REBOOT
        assert 'reboot --hard' in running.detail
        assert native.system_metadata['imgtype_way_back'] == 'real1'
        assert save.call_count == 1
        assert back.due(native)
        # A guest neither stopped nor running idle (a resize to confirm)
        # is neither moved nor marked.
        busy = back.review(flat, stopped=False, apply=True, running=False)
        assert busy.outcome == way_back_mod.LEFT
        assert 'once it is stopped or running again' in busy.detail
        assert 'imgtype_way_back' not in flat.system_metadata
        # Stock on lvm would look for a file instance's disks in its
        # volume group: no layout of stock's serves it here.
        conf.config(images_type='lvm', images_volume_group='vg0',
                    group='libvirt')
        left = back.review(flat, stopped=True, apply=True)
        assert left.outcome == way_back_mod.LEFT
        assert 'lvm' in left.detail and 'migrate' in left.detail
        assert save.call_count == 1
        assert 'imgtype_way_back' not in flat.system_metadata
    assert sorted(disks.listVolumes()) == before
    # Pools that still hold volumes are kept.
    kept = dict(back.remove_pools())
    assert kept[pool_specs.DISKS_POOL].startswith('kept')
    pool_driver._disks.delete_pool_volumes(native)
    pool_driver._disks.delete_pool_volumes(flat)


def test_a_move_that_fails_puts_back_the_volumes_and_the_record(
        pool_driver, conf, libvirt_conn):  # noqa: F811
    """A file already where a volume would go (left by hand, say): the
    move refuses with a message naming both, moves nothing, and the record
    still says the pool."""
    _native, flat, marks, _template = _host_with_instances(pool_driver)
    back = _take_back(pool_driver, libvirt_conn)
    disks = pool_driver._pools.get(pool_specs.DISKS_POOL)
    before = sorted(disks.listVolumes())
    inst_dir = os.path.join(nova.conf.CONF.instances_path, flat.uuid)
    os.makedirs(inst_dir)
    with open(os.path.join(inst_dir, 'disk.local'), 'wb') as f:
        f.write(b'not to be overwritten')
    with mock.patch.object(objects.Instance, 'save') as save:
        with pytest.raises(exception.DiskFileExists,
                           match='disk.local.*%s_disk.local' % flat.uuid):
            back.review(flat, stopped=True, apply=True)
    # Recorded first, then put back: saved twice.
    assert save.call_count == 2
    decision = pool_driver._resolver.recorded(flat)
    assert decision.storage == 'pools'
    assert 'imgtype_way_back' not in flat.system_metadata
    assert sorted(disks.listVolumes()) == before
    assert os.listdir(inst_dir) == ['disk.local']
    with open(os.path.join(inst_dir, 'disk.local'), 'rb') as f:
        assert f.read() == b'not to be overwritten'
    for name in ('disk', 'disk.local'):
        vol = disks.storageVolLookupByName(
            pool_specs.volume_name(flat.uuid, name))
        assert _reads(vol.path(), 'raw', marks[(flat.uuid, name)])
    pool_driver._disks.delete_pool_volumes(_native)
    pool_driver._disks.delete_pool_volumes(flat)
