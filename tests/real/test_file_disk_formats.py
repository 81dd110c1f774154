"""Real: on files, every disk is opened in its recorded format (issue 54,
1 and 2).

A guest owns the bytes of its raw disks and writes at their start a qcow2
header naming a root-only host file, as backing file or as external data
file. Stock's file backends take a file's format from ``disk.info`` and,
for a file it does not list, from ``qemu-img info`` of the file; stock's
Qcow2 gives QEMU every disk as qcow2. Here each file's format comes from
the instance's record (or ``disk.info``): after a cold move lands files on
a host without pools, for a raw disk of a qcow2 instance, and for a file
no one listed. Each check reads the guest's data with the format the
domain XML gives QEMU.

Real: qemu-img, files, stock's image backend classes under the plugin's.
Fake: the Nova DB (``Instance.save``).
"""

import json
import os
import uuid
from unittest import mock

import pytest
from lxml import etree
from nova import objects
from nova.virt.libvirt import utils as libvirt_utils

from nova_imgtype_testing import libvirtd as real
from tests.real.test_guest_written_headers import MARKER
from tests.real.test_guest_written_headers import host_secret  # noqa: F401
from tests.real.test_guest_written_headers import read_as_domain
from tests.real.test_native_images import MiB
from tests.real.test_native_images import conf  # noqa: F401
from tests.real.test_native_images import driver  # noqa: F401

objects.register_all()


def _hostile(path, secret, kind, tmp_path):
    """A raw disk file whose guest wrote at offset 0 a qcow2 header that
    names the host file ``secret`` as its backing file or as its external
    data file. Returns the bytes the guest wrote."""
    real.make_image(path, 'raw', 8 * MiB)
    header = str(tmp_path / ('hdr-%s.qcow2' % uuid.uuid4().hex))
    if kind == 'backing':
        real.qemu_img('create', '-q', '-f', 'qcow2', '-b', secret, '-F',
                      'raw', header, '1G')
    else:
        real.qemu_img('create', '-q', '-f', 'qcow2', '-o',
                      'data_file=%s,data_file_raw=on' % secret, header,
                      str(os.path.getsize(secret)))
    with open(header, 'rb') as f:
        data = f.read()
    with open(path, 'r+b') as f:
        f.write(data)
    return data


def _instance(drv, meta):
    inst = objects.Instance(
        uuid=str(uuid.uuid4()), task_state=None, vm_state='active',
        host='real1', image_ref='', system_metadata=dict(meta))
    inst_dir = libvirt_utils.get_instance_path(inst)
    os.makedirs(inst_dir)
    return inst, inst_dir


def _as_domain(drv, inst, name):
    """(format the domain XML gives QEMU, path) of disk ``name``."""
    disk = drv.image_backend.by_name(
        inst, name, disk_info_mapping={'bus': 'virtio', 'dev': 'vdb',
                                       'type': 'disk'})
    xml = etree.fromstring(disk.libvirt_info('none', {}).to_xml())
    return xml.find('driver').get('type'), xml.find('source').get('file')


def _disk_info(inst_dir):
    with open(os.path.join(inst_dir, 'disk.info')) as f:
        return json.load(f)


def _guest_reads(drv, inst, name, tmp_path):
    fmt, path = _as_domain(drv, inst, name)
    return fmt, read_as_domain(path, fmt, str(tmp_path / (name + '.data')))


@pytest.mark.parametrize('kind', ['backing', 'data-file'])
def test_a_cold_move_from_pools_lands_files_in_their_recorded_format(
        driver, tmp_path, host_secret, kind):  # noqa: F811
    """Issue 54, 1: the volumes of a pool instance arrive as files on a
    host without pools (ColdMove.send_pool_disks), each as the format its
    record gives it."""
    drv = driver(images_type='flat', images_type_mapping='qcow2:qcow2')
    inst, inst_dir = _instance(drv, {
        'imgtype_backend': 'flat', 'imgtype_native_formats': 'raw',
        'imgtype_storage': 'pools', 'imgtype_pool': 'nova-disks-pool'})
    written = {}
    for name in ('disk', 'disk.local'):
        written[name] = _hostile(os.path.join(inst_dir, name), host_secret,
                                 kind, tmp_path)
    sent = [{'type': 'raw', 'path': os.path.join(inst_dir, name)}
            for name in written]

    with mock.patch.object(objects.Instance, 'save'):
        for_stock = json.loads(drv._cold.finish(inst, json.dumps(sent),
                                                False))

    # Nothing for stock to convert; every file listed as the record says.
    assert for_stock == []
    assert drv._resolver.recorded(inst).storage == 'legacy'
    assert _disk_info(inst_dir) == {
        os.path.join(inst_dir, n): 'raw' for n in written}
    for name, data in written.items():
        fmt, got = _guest_reads(drv, inst, name, tmp_path)
        assert fmt == 'raw', name
        assert got[:len(data)] == data and MARKER not in got, name


@pytest.mark.parametrize('kind', ['backing', 'data-file'])
def test_a_raw_disk_of_a_qcow2_instance_is_given_to_qemu_as_raw(
        driver, tmp_path, host_secret, kind):  # noqa: F811
    """Issue 54, 2: the record's per-disk format decides on files too (an
    adopted raw ephemeral disk, moved out of the pools)."""
    drv = driver(images_type='qcow2')
    inst, inst_dir = _instance(drv, {
        'imgtype_backend': 'qcow2', 'imgtype_native_formats': '',
        'imgtype_storage': 'legacy', 'imgtype_disk_formats': 'disk.local=raw'})
    data = _hostile(os.path.join(inst_dir, 'disk.local'), host_secret, kind,
                    tmp_path)

    fmt, got = _guest_reads(drv, inst, 'disk.local', tmp_path)

    assert fmt == 'raw'
    assert got[:len(data)] == data and MARKER not in got
    # disk.info agrees with the record.
    assert _disk_info(inst_dir)[os.path.join(inst_dir, 'disk.local')] == 'raw'


def test_a_raw_file_arriving_at_a_qcow2_instance_is_recorded_raw(
        driver, tmp_path, host_secret):  # noqa: F811
    """A cold move brings a raw file to a qcow2 instance: the record names
    it raw before stock opens it (stock would open it with its Qcow2 class
    first, then convert it), and stock gets nothing to convert."""
    drv = driver(images_type='qcow2')
    inst, inst_dir = _instance(drv, {
        'imgtype_backend': 'qcow2', 'imgtype_native_formats': '',
        'imgtype_storage': 'legacy'})
    path = os.path.join(inst_dir, 'disk.local')
    data = _hostile(path, host_secret, 'backing', tmp_path)

    with mock.patch.object(objects.Instance, 'save') as save:
        for_stock = json.loads(drv._cold.finish(
            inst, json.dumps([{'type': 'raw', 'path': path}]), False))

    assert for_stock == []
    assert save.called
    decision = drv._resolver.recorded(inst)
    assert decision.volume_format('disk.local') == 'raw'
    assert _disk_info(inst_dir) == {path: 'raw'}
    fmt, got = _guest_reads(drv, inst, 'disk.local', tmp_path)
    assert fmt == 'raw' and got[:len(data)] == data and MARKER not in got


def test_a_file_no_one_listed_is_never_probed(
        driver, tmp_path, host_secret):  # noqa: F811
    """An existing disk file that neither the record nor disk.info names
    is its backend's format (raw for flat), its content not read."""
    drv = driver(images_type='flat')
    inst, inst_dir = _instance(drv, {
        'imgtype_backend': 'flat', 'imgtype_native_formats': 'raw',
        'imgtype_storage': 'legacy'})
    data = _hostile(os.path.join(inst_dir, 'disk'), host_secret, 'backing',
                    tmp_path)

    with mock.patch('nova.virt.images.qemu_img_info') as probe:
        fmt, got = _guest_reads(drv, inst, 'disk', tmp_path)

    assert not probe.called
    assert fmt == 'raw'
    assert got[:len(data)] == data and MARKER not in got
