"""[libvirt]images_type_mapping: parsing and validation."""

import textwrap

import nova.conf
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from oslo_config import cfg

import nova_imgtype.conf  # noqa: F401  (registers our options)
from nova_imgtype import exception
from nova_imgtype.virt.libvirt import mapping

Invalid = exception.InvalidImagesTypeMapping


# The spec's correct examples (images_type, images_type_mapping).
SPEC_CORRECT = [
    ('default', 'raw:lvm, ploop:ploop', {'raw': 'lvm', 'ploop': 'ploop'}),
    ('lvm', 'qcow2:qcow2', {'qcow2': 'qcow2'}),
    ('qcow2', 'raw:raw, ploop:ploop', {'raw': 'raw', 'ploop': 'ploop'}),
    ('default', 'raw:raw, qcow2:qcow2', {'raw': 'raw', 'qcow2': 'qcow2'}),
    ('default', '', {}),
]

SPEC_INCORRECT = [
    ('qcow2:raw, qcow2:qcow2', 'qcow2:'),   # ambiguous for qcow2
    ('raw:rbd, raw:lvm', 'raw:lvm'),        # ambiguous for raw
    ('lvm:rbd, rbd:rbd', 'lvm:rbd'),        # lvm is no source format
]


@pytest.mark.parametrize('images_type,value,expected', SPEC_CORRECT)
def test_spec_correct_examples(conf, images_type, value, expected):
    conf.config(images_type=images_type, images_type_mapping=value,
                group='libvirt')
    assert dict(nova.conf.CONF.libvirt.images_type_mapping) == expected


@pytest.mark.parametrize('value,names', SPEC_INCORRECT)
def test_spec_incorrect_examples(value, names):
    with pytest.raises(Invalid) as e:
        mapping.parse(value)
    assert names in str(e.value)


def test_ambiguous_message_names_both_backends():
    with pytest.raises(Invalid, match="'raw:lvm'.*already mapped to 'rbd'"):
        mapping.parse('raw:rbd, raw:lvm')


def test_unknown_source_is_no_glance_format():
    with pytest.raises(Invalid, match="unknown source disk_format 'rbd'"):
        mapping.parse('rbd:rbd')


@pytest.mark.parametrize('value,entry', [
    ('raw', 'raw'), ('raw:', 'raw:'), (':lvm', ':lvm'),
    ('raw:lvm:x', 'raw:lvm:x'), ('raw:lvm,', ''), (',raw:lvm', ''),
    ('raw:lvm,,qcow2:qcow2', ''), ('raw :lvm', 'raw :lvm'),
    ('raw: lvm', 'raw: lvm'), ('RAW:lvm', 'RAW:lvm'),
])
def test_malformed_entries_are_named(value, entry):
    with pytest.raises(Invalid) as e:
        mapping.parse(value)
    assert 'entry %r' % entry in str(e.value)


def test_unknown_backend_lists_registered_ones():
    with pytest.raises(Invalid) as e:
        mapping.parse('raw:sheepdog')
    msg = str(e.value)
    assert "unknown backend 'sheepdog'" in msg
    for name in ('flat', 'lvm', 'ploop', 'qcow2', 'raw', 'rbd'):
        assert name in msg


def test_default_is_no_backend():
    with pytest.raises(Invalid, match="'default' names no backend"):
        mapping.parse('raw:default')


def test_backend_that_would_convert_is_refused():
    with pytest.raises(Invalid, match="backend 'lvm' cannot use qcow2"):
        mapping.parse('qcow2:lvm')


@pytest.mark.parametrize('value', ['', '   ', None, []])
def test_empty_means_no_mapping(value):
    assert dict(mapping.parse(value)) == {}


def test_list_input_and_round_trip():
    m = mapping.parse(['raw:rbd', 'qcow2:qcow2'])
    assert str(m) == 'raw:rbd, qcow2:qcow2'
    assert mapping.parse(str(m)) == m
    assert m.formats_for('rbd') == ('raw',)


def test_bad_value_in_config_file_names_option_and_entry(tmp_path):
    conf_file = tmp_path / 'nova.conf'
    conf_file.write_text(textwrap.dedent('''
        [libvirt]
        images_type_mapping = raw:lvm, qcow2:flat
    '''))
    conf = cfg.ConfigOpts()
    nova_imgtype.conf.libvirt.register_opts(conf)
    conf(['--config-file', str(conf_file)])
    with pytest.raises(cfg.ConfigFileValueError) as e:
        _ = conf.libvirt.images_type_mapping
    assert 'images_type_mapping' in str(e.value)
    assert "'qcow2:flat'" in str(e.value)


@pytest.mark.parametrize('value,flags,reason', [
    ('raw:lvm', {'images_volume_group': None}, 'images_volume_group'),
    ('raw:rbd', {'images_rbd_pool': ''}, 'images_rbd_pool'),
    ('ploop:ploop', {'virt_type': 'kvm'}, 'parallels'),
])
def test_backend_the_host_cannot_serve(conf, value, flags, reason):
    conf.config(group='libvirt', **flags)
    m = mapping.parse(value)
    with pytest.raises(Invalid) as e:
        mapping.check_host(m, nova.conf.CONF)
    assert value in str(e.value) and reason in str(e.value)


def test_backends_the_host_serves(conf):
    conf.config(group='libvirt', images_volume_group='vg',
                images_rbd_pool='vms', virt_type='parallels')
    mapping.check_host(mapping.parse('raw:lvm, qcow2:qcow2, ploop:ploop'),
                       nova.conf.CONF)


# Property: any text parses to a mapping that round-trips, or raises the one
# documented exception, never anything else.
_ALPHABET = st.sampled_from(list('rawqcowlvmbdplofat2:, \t') +
                            ['raw', 'qcow2', 'lvm', 'rbd', 'ploop', 'flat',
                             'iso', 'vmdk', 'default', ':', ', '])
_texts = st.one_of(st.text(), st.lists(_ALPHABET, max_size=12).map(''.join))


@settings(max_examples=400, deadline=None)
@given(_texts)
def test_parse_round_trips_or_raises_documented(value):
    try:
        m = mapping.parse(value)
    except Invalid as e:
        assert 'images_type_mapping entry' in str(e)
        return
    assert mapping.parse(str(m)) == m
    assert all(src in mapping.SOURCE_FORMATS for src in m)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(
    ['raw:raw', 'raw:flat', 'raw:lvm', 'raw:rbd', 'qcow2:qcow2',
     'ploop:ploop']), unique_by=lambda e: e.split(':')[0]))
def test_valid_entries_always_parse(entries):
    m = mapping.parse(', '.join(entries))
    assert [f'{k}:{v}' for k, v in m.items()] == entries
