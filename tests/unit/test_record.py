"""The instance's record (nova_imgtype.record): what is written reads back,
each disk's format follows from it, and nothing else writes its keys."""

import pathlib
import re

import pytest
from nova import objects

from nova_imgtype import record

objects.register_all()


def _instance(**meta):
    return objects.Instance(uuid='u', system_metadata=dict(meta))


@pytest.mark.parametrize('decision', [
    record.BackendDecision('qcow2', ('qcow2',)),
    record.BackendDecision('flat', (), record.POOLS, 'nova-disks-pool'),
    record.BackendDecision('qcow2', (), record.POOLS, 'p',
                           (('disk.eph0', 'raw'), ('disk.local', 'raw')))])
def test_what_is_written_reads_back(decision):
    inst = _instance(other='kept')
    record.write(inst, decision)
    assert record.read(inst.system_metadata, 'default') == decision
    assert inst.system_metadata['other'] == 'kept'


def test_a_decision_without_a_pool_or_disk_formats_drops_their_keys():
    inst = _instance()
    record.write(inst, record.BackendDecision(
        'qcow2', (), record.POOLS, 'p', (('disk.local', 'raw'),)))
    record.write(inst, record.BackendDecision('qcow2'))
    assert set(inst.system_metadata) == {record.BACKEND, record.NATIVE,
                                         record.STORAGE}


@pytest.mark.parametrize('backend,disk,fmt', [
    ('qcow2', 'disk', 'qcow2'), ('qcow2', 'disk.local', 'qcow2'),
    ('qcow2', 'disk.config', 'raw'), ('qcow2', 'disk.config.rescue', 'raw'),
    ('qcow2', 'kernel', 'raw'), ('qcow2', 'ramdisk', 'raw'),
    ('qcow2', 'disk.rescue', 'qcow2'),
    ('flat', 'disk', 'raw'), ('rbd', 'disk', 'raw'), ('lvm', 'disk', 'raw')])
def test_each_disks_format_follows_from_the_record(backend, disk, fmt):
    assert record.BackendDecision(backend).volume_format(disk) == fmt


def test_a_value_nova_cannot_keep_is_refused_naming_the_key():
    many = tuple(('disk.eph%d' % i, 'raw') for i in range(40))
    with pytest.raises(ValueError, match='imgtype_disk_formats: .* 255'):
        record.write(_instance(), record.BackendDecision(
            'qcow2', disk_formats=many))


def test_only_keys_of_the_record_are_set_through_it():
    with pytest.raises(KeyError):
        record.set_value(_instance(), 'image_disk_format', 'raw')


def test_no_other_module_writes_the_records_keys():
    """The record has one owner: no other module names a key of it."""
    root = pathlib.Path(record.__file__).parent
    literal = re.compile(r"""['"]imgtype_[a-z_]+['"]""")
    writers = sorted(str(p.relative_to(root)) for p in root.rglob('*.py')
                     if p.name != 'record.py' and 'testing' not in p.parts
                     and 'tempest' not in p.parts and p.name != 'demo.py'
                     and literal.search(p.read_text()))
    assert writers == []


def test_the_root_template_reads_back_and_nothing_else_passes_for_it():
    inst = _instance()
    assert record.template(inst.system_metadata) is None
    assert record.set_template(inst, 'image-1', 'abc_qcow2')
    assert record.template(inst.system_metadata) == ('image-1', 'abc_qcow2')
    assert not record.set_template(inst, 'image-1', 'abc_qcow2')
    for meta in ({record.TEMPLATE: 'abc'}, {record.TEMPLATE: ':abc'},
                 {record.TEMPLATE: 'image-1:'}):
        assert record.template(meta) is None
    with pytest.raises(ValueError):
        record.set_template(inst, 'a:b', 'abc')


def test_a_local_config_drive_reads_back_and_is_dropped_with_the_decision():
    inst = _instance()
    record.write(inst, record.BackendDecision('qcow2',
                                              config_drive=record.LOCAL))
    assert inst.system_metadata[record.CONFIG_DRIVE] == 'local'
    assert record.read(inst.system_metadata, 'p').config_drive == 'local'
    # Anything else a record holds there is stock's choice.
    inst.system_metadata[record.CONFIG_DRIVE] = 'rbd'
    assert record.read(inst.system_metadata, 'p').config_drive == ''
    record.write(inst, record.BackendDecision('rbd'))
    assert record.CONFIG_DRIVE not in inst.system_metadata
