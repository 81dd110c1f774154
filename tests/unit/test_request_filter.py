"""The image-type request filter, its registration in stock Nova, the host
filter alternative and the ``imgtype`` extra spec validator.

Stock Nova's own code is used as the scheduler uses it:
``request_filter.process_reqspec``, the scheduler's filter loader
(``HostFilterHandler.get_matching_classes`` with
``[filter_scheduler]available_filters``) and the API's extra spec
``validators`` (loaded through the installed entry points).
"""

import logging
from unittest import mock

import os_traits
import pytest
from keystoneauth1 import exceptions as ks_exc
from nova import exception as nova_exception
from nova import objects
from nova.api.validation.extra_specs import validators
from nova.scheduler import filters as nova_filters
from nova.scheduler import request_filter

from nova_imgtype import traits
from nova_imgtype.scheduler import filters
from nova_imgtype.scheduler import request_filters

objects.register_all()


@pytest.fixture
def stock_filters():
    """Nova's request filter list, put back as it was after the test."""
    saved = list(request_filter.ALL_REQUEST_FILTERS)
    yield request_filter.ALL_REQUEST_FILTERS
    request_filter.ALL_REQUEST_FILTERS[:] = saved


@pytest.fixture
def toggle(conf):
    conf.config(filter_hosts_by_image_type_support=True, group='scheduler')
    return conf


def _spec(disk_format='qcow2', bfv=False, **extra_specs):
    image = (objects.ImageMeta(disk_format=disk_format)
             if disk_format else objects.ImageMeta())
    return objects.RequestSpec(image=image, is_bfv=bfv,
                               flavor=objects.Flavor(extra_specs=extra_specs))


def test_off_by_default(conf):
    spec = _spec()
    assert request_filters.image_type_support(None, spec) is False
    assert spec.root_required == set()


@pytest.mark.parametrize('fmt,trait', [
    ('qcow2', os_traits.COMPUTE_IMAGE_TYPE_QCOW2),
    ('raw', os_traits.COMPUTE_IMAGE_TYPE_RAW),
    ('vmdk', os_traits.COMPUTE_IMAGE_TYPE_VMDK),
    ('ploop', os_traits.COMPUTE_IMAGE_TYPE_PLOOP),
    ('iso', os_traits.COMPUTE_IMAGE_TYPE_ISO),
])
def test_requires_the_image_type(toggle, fmt, trait):
    spec = _spec(fmt)
    assert request_filters.image_type_support(None, spec) is True
    assert spec.root_required == {trait}


def test_the_scheduler_log_names_the_image_and_its_format(toggle, caplog):
    caplog.set_level(logging.INFO)
    spec = _spec('vhdx')
    spec.image.id = 'c2a1e0f4-0000-4000-8000-000000000001'
    request_filters.image_type_support(None, spec)
    assert ('Image c2a1e0f4-0000-4000-8000-000000000001 is vhdx: only hosts '
            'with COMPUTE_IMAGE_TYPE_VHDX') in caplog.text


def test_native_extra_spec_requires_native_use_too(toggle):
    spec = _spec('qcow2', **{'imgtype:native': 'required'})
    request_filters.image_type_support(None, spec)
    assert spec.root_required == {os_traits.COMPUTE_IMAGE_TYPE_QCOW2,
                                  'CUSTOM_IMGTYPE_NATIVE_QCOW2'}
    spec = _spec('qcow2', **{'imgtype:native': 'optional'})
    request_filters.image_type_support(None, spec)
    assert spec.root_required == {os_traits.COMPUTE_IMAGE_TYPE_QCOW2}


@pytest.mark.parametrize('spec', [
    _spec('qcow2', bfv=True),       # boot from volume: the image is not used
    _spec(None),                    # no disk_format known
])
def test_left_alone(toggle, spec):
    assert request_filters.image_type_support(None, spec) is False
    assert spec.root_required == set()


def _image_filters(stock_filters):
    """Nova's image-type request filter and ours, in the order
    process_reqspec runs them (the others need a whole request spec)."""
    filters.register_request_filters()
    return [f for f in stock_filters
            if f in (request_filter.require_image_type_support,
                     request_filters.image_type_support)]


def test_format_without_a_trait_fails_naming_it(toggle, stock_filters):
    spec = _spec('danformat')
    with pytest.raises(nova_exception.RequestFilterFailed,
                       match='danformat'):
        for f in _image_filters(stock_filters):
            f(None, spec)


def test_with_upstream_toggle_the_same_as_ours_alone(toggle, stock_filters):
    ours = _spec('qcow2', **{'imgtype:native': 'required'})
    for f in _image_filters(stock_filters):
        f(None, ours)
    toggle.config(query_placement_for_image_type_support=True,
                  group='scheduler')
    both = _spec('qcow2', **{'imgtype:native': 'required'})
    ran = [f(None, both) for f in _image_filters(stock_filters)]
    assert ran == [True, True]
    assert both.root_required == ours.root_required


def test_stock_scheduler_loads_it_through_available_filters(stock_filters):
    """What nova-scheduler does at start with the documented lines."""
    before = list(stock_filters)
    classes = nova_filters.HostFilterHandler().get_matching_classes(
        ['nova.scheduler.filters.all_filters',
         'nova_imgtype.scheduler.filters.all_filters'])
    assert filters.ImageTypeSupportFilter in classes
    assert stock_filters == before + [request_filters.image_type_support,
                                      request_filters.instance_backend]
    # Loaded again (a second HostManager): registered once.
    nova_filters.HostFilterHandler().get_matching_classes(
        ['nova_imgtype.scheduler.filters.all_filters'])
    assert stock_filters.count(request_filters.image_type_support) == 1


def test_request_filters_come_from_the_entry_point_namespace():
    assert filters.request_filter_plugins() == [
        request_filters.image_type_support, request_filters.instance_backend]


def _move_spec(sysmeta, cell=True):
    """A request spec of an instance that exists in a cell with sysmeta
    (a move), with Nova's DB lookups answered."""
    uuid = '5c2f1d0e-1111-4a4a-8b8b-000000000001'
    spec = objects.RequestSpec(instance_uuid=uuid, image=objects.ImageMeta())
    mapping = objects.InstanceMapping(
        instance_uuid=uuid,
        cell_mapping=objects.CellMapping(uuid='c', database_connection='x',
                                         transport_url='y') if cell else None)
    instance = objects.Instance(uuid=uuid, system_metadata=sysmeta)
    patches = [
        mock.patch.object(objects.InstanceMapping, 'get_by_instance_uuid',
                          return_value=mapping),
        mock.patch('nova.context.target_cell'),
        mock.patch.object(objects.Instance, 'get_by_uuid',
                          return_value=instance),
    ]
    return spec, patches


@pytest.mark.parametrize('sysmeta,cell,wanted', [
    # A move of an instance on pools, or on a mapped backend: only hosts
    # serving it (whatever the image-type toggle says).
    ({'imgtype_backend': 'qcow2', 'imgtype_storage': 'pools'}, True,
     {'CUSTOM_IMGTYPE_BACKEND_QCOW2'}),
    ({'imgtype_backend': 'lvm'}, True, {'CUSTOM_IMGTYPE_BACKEND_LVM'}),
    # From before nova-imgtype: stock's move.
    ({}, True, set()),
    # A build: not in a cell yet.
    ({'imgtype_backend': 'qcow2'}, False, set()),
])
def test_moves_ask_for_the_recorded_backend(conf, sysmeta, cell, wanted):
    spec, patches = _move_spec(sysmeta, cell)
    for p in patches:
        p.start()
    try:
        ran = request_filters.instance_backend(mock.sentinel.ctxt, spec)
    finally:
        for p in patches:
            p.stop()
    assert ran is bool(wanted)
    assert spec.root_required == wanted


def _placement(status=200, providers=(), raises=None):
    """A report client whose GET answers as placement would."""
    client = mock.Mock()
    if raises is not None:
        client.get.side_effect = raises
    else:
        client.get.return_value = mock.Mock(
            status_code=status, text='boom',
            json=lambda: {'resource_providers': [
                {'uuid': uuid} for uuid in providers]})
    return mock.patch('nova.scheduler.client.report.report_client_singleton',
                      return_value=client), client


def test_host_filter_asks_placement_once_for_all_hosts():
    hosts = [mock.Mock(uuid='rp-%d' % i, stats={}) for i in range(5)]
    patch, client = _placement(providers=['rp-1', 'rp-3', 'elsewhere'])
    spec = _spec('qcow2', **{'imgtype:native': 'required'})
    with patch:
        passed = filters.ImageTypeSupportFilter().filter_all(hosts, spec)
    assert passed == [hosts[1], hosts[3]]
    client.get.assert_called_once_with(
        '/resource_providers?required=COMPUTE_IMAGE_TYPE_QCOW2,'
        'CUSTOM_IMGTYPE_NATIVE_QCOW2', version='1.18',
        global_request_id=mock.ANY)


@pytest.mark.parametrize('providers,passes', [
    (['rp-uuid'], True), ([], False)])
def test_host_filter_host_passes_is_filter_all_of_one(providers, passes):
    patch, client = _placement(providers=providers)
    with patch:
        assert filters.ImageTypeSupportFilter().host_passes(
            mock.Mock(uuid='rp-uuid', stats={}), _spec('qcow2')) is passes


def test_host_filter_leaves_requests_without_an_image_format_alone():
    hosts = [mock.Mock(uuid='rp-0', stats={})]
    patch, client = _placement()
    with patch:
        assert filters.ImageTypeSupportFilter().filter_all(
            hosts, _spec(None)) == hosts
        assert filters.ImageTypeSupportFilter().filter_all(
            hosts, _spec('qcow2', bfv=True)) == hosts
    client.get.assert_not_called()


def test_host_filter_refuses_a_format_without_a_trait():
    patch, client = _placement(providers=['rp-0'])
    with patch:
        assert filters.ImageTypeSupportFilter().filter_all(
            [mock.Mock(uuid='rp-0', stats={})], _spec('no-such-format')) == []
    client.get.assert_not_called()


@pytest.mark.parametrize('answer', [
    {'status': 503}, {'raises': ks_exc.ConnectFailure('placement down')}])
def test_host_filter_fails_closed_when_placement_fails(answer, caplog):
    patch, client = _placement(providers=['rp-0'], **answer)
    with patch, caplog.at_level(logging.ERROR):
        assert filters.ImageTypeSupportFilter().filter_all(
            [mock.Mock(uuid='rp-0', stats={})], _spec('qcow2')) == []
    assert ('placement could not list the resource providers with '
            'COMPUTE_IMAGE_TYPE_QCOW2') in caplog.text


def _host(uuid, *node_traits, **stats):
    """A host state whose compute node's stats list ``node_traits``."""
    stats.update(traits.to_stats(node_traits))
    return mock.Mock(uuid=uuid, stats=stats)


def test_host_filter_reads_the_traits_in_the_hosts_stats():
    hosts = [_host('rp-0', 'COMPUTE_IMAGE_TYPE_QCOW2',
                   'CUSTOM_IMGTYPE_NATIVE_QCOW2', num_instances='3'),
             _host('rp-1', 'COMPUTE_IMAGE_TYPE_QCOW2'),
             _host('rp-2', 'COMPUTE_IMAGE_TYPE_RAW'),
             _host('rp-3')]
    patch, client = _placement(providers=['rp-1', 'rp-2', 'rp-3'])
    with patch:
        flt = filters.ImageTypeSupportFilter()
        assert flt.filter_all(hosts, _spec('qcow2')) == hosts[:2]
        assert flt.filter_all(
            hosts, _spec('qcow2', **{'imgtype:native': 'required'})) == [
                hosts[0]]
        assert flt.filter_all(hosts, _spec('raw')) == [hosts[2]]
        assert flt.host_passes(hosts[3], _spec('raw')) is False
    client.get.assert_not_called()


@pytest.mark.parametrize('answer,asked_passes', [
    ({}, True), ({'status': 503}, False)])
def test_host_filter_asks_placement_only_about_hosts_without_stats(
        answer, asked_passes):
    """A compute without nova-imgtype (or from before its stats) is
    decided by placement's answer, failing closed; the others by their
    stats, whatever placement says of them."""
    hosts = [_host('rp-0', 'COMPUTE_IMAGE_TYPE_QCOW2'),
             mock.Mock(uuid='rp-1', stats={'num_instances': '1'}),
             _host('rp-2', 'COMPUTE_IMAGE_TYPE_RAW')]
    patch, client = _placement(providers=['rp-1', 'rp-2'], **answer)
    with patch:
        passed = filters.ImageTypeSupportFilter().filter_all(
            hosts, _spec('qcow2'))
    assert passed == ([hosts[0], hosts[1]] if asked_passes else [hosts[0]])
    client.get.assert_called_once_with(
        '/resource_providers?required=COMPUTE_IMAGE_TYPE_QCOW2',
        version='1.18', global_request_id=mock.ANY)


def test_stats_list_only_image_type_traits():
    stats = traits.to_stats(['COMPUTE_IMAGE_TYPE_RAW', 'HW_CPU_X86_AVX',
                             'CUSTOM_IMGTYPE_NATIVE_RAW',
                             'CUSTOM_IMGTYPE_BACKEND_FLAT',
                             'COMPUTE_IMAGE_TYPE_QCOW2'])
    assert stats == {traits.STATS_KEY: 'COMPUTE_IMAGE_TYPE_QCOW2,'
                     'COMPUTE_IMAGE_TYPE_RAW,CUSTOM_IMGTYPE_NATIVE_RAW'}
    assert traits.from_stats(stats) == {
        'COMPUTE_IMAGE_TYPE_QCOW2', 'COMPUTE_IMAGE_TYPE_RAW',
        'CUSTOM_IMGTYPE_NATIVE_RAW'}
    # A node that boots no image type lists none: it is known, not unknown.
    assert traits.from_stats(traits.to_stats([])) == frozenset()
    assert traits.from_stats({'uptime': None}) is None
    assert traits.from_stats(None) is None


def test_stats_read_once_per_distinct_value():
    # The host filter reads every host's stats on every pass: hosts listing
    # the same traits share one parsed set, not one set each.
    one = traits.to_stats(['COMPUTE_IMAGE_TYPE_RAW'])
    other = traits.to_stats(['COMPUTE_IMAGE_TYPE_QCOW2'])
    first = traits.from_stats(dict(one, uptime='1'))
    assert traits.from_stats(dict(one, uptime='2')) is first
    assert traits.from_stats(other) == {'COMPUTE_IMAGE_TYPE_QCOW2'}
    assert first == {'COMPUTE_IMAGE_TYPE_RAW'}


def test_extra_spec_validator_is_loaded_by_the_api():
    validators.load_validators()
    validators.validate('imgtype:native', 'required')
    validators.validate('imgtype:native', 'optional')
    with pytest.raises(nova_exception.ValidationError):
        validators.validate('imgtype:native', 'always')
    with pytest.raises(nova_exception.ValidationError,
                       match='imgtype:nativ'):
        validators.validate('imgtype:nativ', 'required')
