"""pool_dir: the file moves between an instance directory and a dir pool.

The pool is one of libvirt's embedded test driver (its target path is
what the functions read); the files are real, in the test's tmp_path.
"""

import os
import uuid
from unittest import mock

import pytest

from nova_imgtype import exception
from nova_imgtype.virt.libvirt import pool_dir


@pytest.fixture
def pool(test_conn, tmp_path):
    target = tmp_path / 'disks'
    target.mkdir()
    p = test_conn.storagePoolDefineXML(
        "<pool type='dir'><name>nova-test-dir</name>"
        "<target><path>%s</path></target></pool>" % target)
    p.create(0)
    return p


@pytest.fixture
def instance(tmp_path):
    inst = mock.Mock(uuid=str(uuid.uuid4()))
    inst_dir = tmp_path / inst.uuid
    inst_dir.mkdir()
    for name in ('disk', 'disk.local', 'disk.eph0', 'disk.info',
                 'console.log'):
        (inst_dir / name).write_text(name)
    return inst, str(inst_dir)


def test_legacy_files_are_the_disks_only(instance, tmp_path):
    inst, inst_dir = instance
    assert pool_dir.legacy_files(inst_dir) == [
        'disk', 'disk.eph0', 'disk.local']
    assert pool_dir.legacy_files(str(tmp_path / 'gone')) == []


def test_adopt_renames_and_finishes_an_interrupted_adoption(pool, instance,
                                                            tmp_path):
    inst, inst_dir = instance
    disks = tmp_path / 'disks'
    # A crash moved the first file already.
    os.rename(os.path.join(inst_dir, 'disk'),
              disks / ('%s_disk' % inst.uuid))
    pool_dir.adopt(pool, inst, inst_dir, ['disk', 'disk.local'])
    assert sorted(os.listdir(disks)) == sorted(
        ['%s_disk' % inst.uuid, '%s_disk.local' % inst.uuid])
    assert (disks / ('%s_disk.local' % inst.uuid)).read_text() == \
        'disk.local'


def test_adopt_puts_back_what_it_moved_on_a_conflict(pool, instance,
                                                     tmp_path):
    inst, inst_dir = instance
    taken = tmp_path / 'disks' / ('%s_disk.local' % inst.uuid)
    taken.write_text('another')
    with pytest.raises(exception.VolumeExists):
        pool_dir.adopt(pool, inst, inst_dir, ['disk', 'disk.local'])
    assert os.path.exists(os.path.join(inst_dir, 'disk'))
    assert os.listdir(tmp_path / 'disks') == [taken.name]
    assert taken.read_text() == 'another'


def test_stage_out_and_back_in(pool, instance, tmp_path):
    inst, inst_dir = instance
    disks = tmp_path / 'disks'
    names = ['%s_disk' % inst.uuid, '%s_disk.local' % inst.uuid]
    for n in names:
        (disks / n).write_text(n)
    assert pool_dir.stage_out(pool, inst, inst_dir, names) == names
    assert os.listdir(disks) == []
    pool_dir.stage_in(pool, inst, inst_dir, names)
    assert sorted(os.listdir(disks)) == names
    assert (disks / names[1]).read_text() == names[1]


def test_stage_out_puts_back_what_it_moved_on_a_failure(pool, instance,
                                                        tmp_path):
    inst, inst_dir = instance
    disks = tmp_path / 'disks'
    present = '%s_disk' % inst.uuid
    (disks / present).write_text('data')
    with pytest.raises(FileNotFoundError):
        pool_dir.stage_out(pool, inst, inst_dir,
                           [present, '%s_disk.local' % inst.uuid])
    assert os.listdir(disks) == [present]
    assert (disks / present).read_text() == 'data'
