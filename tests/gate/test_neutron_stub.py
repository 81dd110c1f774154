"""The network stub answers Nova's calls the way an empty Neutron would."""

from __future__ import annotations

import io
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from gate import neutron_stub


@pytest.mark.parametrize('path,key', [
    ('/v2.0/ports', 'ports'),
    ('/v2.0/ports.json', 'ports'),
    ('/v2.0/networks', 'networks'),
    ('/v2.0/subnets', 'subnets'),
    ('/v2.0/security-groups', 'security_groups'),
    ('/v2.0/floatingips', 'floatingips'),
    ('/v2.0/extensions', 'extensions'),
    ('/v2.0/network-ip-availabilities', 'network_ip_availabilities'),
])
def test_collections_are_empty(path: str, key: str) -> None:
    assert neutron_stub.route('GET', path) == (200, {key: []})


def test_quotas_unlimited() -> None:
    status, body = neutron_stub.route('GET', '/v2.0/quotas/abc')
    assert status == 200 and body is not None
    assert body['quota']['port'] == -1
    assert set(body['quota'].values()) == {-1}
    status, body = neutron_stub.route('GET', '/v2.0/quotas/abc/details')
    assert status == 200 and body is not None
    assert body['quota']['security_group'] == {
        'limit': -1, 'used': 0, 'reserved': 0}


def test_one_resource_is_not_found() -> None:
    status, body = neutron_stub.route('GET', '/v2.0/ports/1234')
    assert status == 404 and body is not None
    assert body['NeutronError']['type'] == 'PortNotFound'


def test_delete_204_other_methods_501() -> None:
    assert neutron_stub.route('DELETE', '/v2.0/ports/1') == (204, None)
    for method in ('POST', 'PUT', 'PATCH'):
        status, _ = neutron_stub.route(method, '/v2.0/ports')
        assert status == 501


def test_version_discovery() -> None:
    status, body = neutron_stub.route('GET', '/', 'http://h:1')
    assert status == 200 and body is not None
    assert body['versions'][0]['links'][0]['href'] == 'http://h:1/v2.0/'


@pytest.fixture
def server() -> Iterator[tuple[str, io.StringIO]]:
    log = io.StringIO()
    srv = neutron_stub.make_server('127.0.0.1', 0, log=log)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield 'http://127.0.0.1:%d' % srv.server_address[1], log
    finally:
        srv.shutdown()
        srv.server_close()


def test_served_over_http(server: tuple[str, io.StringIO]) -> None:
    url, log = server
    with urllib.request.urlopen(url + '/v2.0/ports?device_id=x') as resp:
        assert resp.status == 200
        assert json.load(resp) == {'ports': []}
    req = urllib.request.Request(url + '/v2.0/ports/x', method='DELETE')
    with urllib.request.urlopen(req) as resp:
        assert resp.status == 204
    req = urllib.request.Request(url + '/v2.0/ports', data=b'{}',
                                 method='POST')
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req)
    assert err.value.code == 501
    lines = log.getvalue().splitlines()
    assert len(lines) == 3
    assert 'GET /v2.0/ports [device_id] -> 200' in lines[0]
    assert lines[2].endswith('POST /v2.0/ports -> 501')
