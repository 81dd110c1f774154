"""A minimal network endpoint for a cloud without Neutron.

Neutron is not part of nova-imgtype's gate. Servers boot without a NIC, but
Nova still calls the network API on boot, show, list and delete (ports of
the instance, networks, security groups, quotas); with no endpoint those
calls fail (show answers 500, delete leaves the instance in ERROR). This
stub answers them the way an empty Neutron would:

* ``GET`` of a collection (``/v2.0/ports``, ``/v2.0/networks``,
  ``/v2.0/security-groups``, ...): an empty list under the collection's
  key (``{"ports": []}``, ``{"security_groups": []}``);
* ``GET /v2.0/quotas/<project>``: every quota unlimited (-1), and
  ``.../details`` the same with ``used`` and ``reserved`` 0;
* ``GET`` of one resource (``/v2.0/ports/<id>``): 404 in Neutron's error
  shape;
* ``GET /`` and ``GET /v2.0``: version discovery;
* ``DELETE`` anything: 204;
* anything else (``POST``, ``PUT``, ...): 501.

Every request is logged to standard output, one line each.

Usage::

    python -m gate.neutron_stub --host 127.0.0.1 --port 9696
"""

from __future__ import annotations

import argparse
import json
import socketserver
import sys
import threading
import time
from collections.abc import Callable
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qs
from wsgiref import simple_server

StartResponse = Callable[..., Any]
Environ = dict[str, Any]

#: Quota names Neutron reports; all unlimited here.
QUOTA_NAMES = ('network', 'subnet', 'subnetpool', 'port', 'router',
               'floatingip', 'security_group', 'security_group_rule',
               'rbac_policy', 'trunk')

_STATUS = {
    200: '200 OK',
    204: '204 No Content',
    404: '404 Not Found',
    501: '501 Not Implemented',
}


def collection_key(name: str) -> str:
    """The JSON key of a collection: ``security-groups`` ->
    ``security_groups`` (Neutron's URLs use dashes, its bodies
    underscores)."""
    return name.replace('-', '_')


def _strip_format(segment: str) -> str:
    """``ports.json`` -> ``ports`` (older clients append the format)."""
    return segment[:-5] if segment.endswith('.json') else segment


def versions(base_url: str) -> dict[str, Any]:
    """Body of ``GET /``: the one API version, v2.0."""
    return {'versions': [{
        'id': 'v2.0', 'status': 'CURRENT',
        'links': [{'href': base_url.rstrip('/') + '/v2.0/', 'rel': 'self'}],
    }]}


def unlimited_quota(details: bool = False) -> dict[str, Any]:
    """Body of ``GET /v2.0/quotas/<project>[/details]``."""
    if details:
        return {'quota': {name: {'limit': -1, 'used': 0, 'reserved': 0}
                          for name in QUOTA_NAMES}}
    return {'quota': {name: -1 for name in QUOTA_NAMES}}


def not_found(kind: str, ident: str) -> dict[str, Any]:
    """Neutron's error body for a resource that does not exist."""
    kind_name = ''.join(part.capitalize()
                        for part in kind.rstrip('s').split('_'))
    message = '%s %s could not be found.' % (kind_name, ident)
    return {'NeutronError': {'type': '%sNotFound' % kind_name,
                             'message': message, 'detail': ''}}


def route(method: str, path: str,
          base_url: str = 'http://127.0.0.1:9696'
          ) -> tuple[int, dict[str, Any] | None]:
    """(status, JSON body or None) of a request: the whole stub's logic.

    Pure, so that it can be tested without a server.
    """
    method = method.upper()
    if method == 'HEAD':
        method = 'GET'
    parts = [_strip_format(p) for p in path.split('/') if p]
    if method == 'DELETE':
        return 204, None
    if method != 'GET':
        return 501, {'NeutronError': {
            'type': 'NotImplemented',
            'message': 'The gate network stub implements GET and DELETE '
                       'only (%s %s)' % (method, path),
            'detail': ''}}
    if not parts:
        return 200, versions(base_url)
    if parts[0] != 'v2.0':
        return 404, not_found('resource', '/'.join(parts))
    rest = parts[1:]
    if not rest:
        # The v2.0 root lists no resources: nothing is really there.
        return 200, {'resources': []}
    collection = collection_key(rest[0])
    if collection == 'quotas':
        if len(rest) == 1:
            return 200, {'quotas': []}
        if len(rest) == 2 and rest[1] == 'tenant':
            return 200, {'tenant': {'tenant_id': ''}}
        return 200, unlimited_quota(details=rest[-1] == 'details')
    if len(rest) == 1:
        return 200, {collection: []}
    if len(rest) == 2:
        return 404, not_found(collection, rest[1])
    # Sub-collections (/v2.0/ports/<id>/bindings, ...) of nothing.
    return 404, not_found(collection, rest[1])


class NeutronStub:
    """The WSGI application around :func:`route`."""

    def __init__(self, base_url: str, log: Any = None) -> None:
        self.base_url = base_url
        self.log = log if log is not None else sys.stdout
        self._lock = threading.Lock()
        self.requests = 0

    def __call__(self, environ: Environ,
                 start_response: StartResponse) -> Iterable[bytes]:
        method = environ.get('REQUEST_METHOD', 'GET')
        path = environ.get('PATH_INFO', '/') or '/'
        query = environ.get('QUERY_STRING', '')
        status, body = route(method, path, self.base_url)
        payload = b'' if body is None else json.dumps(body).encode()
        headers = [('Content-Length', str(len(payload)))]
        if body is not None:
            headers.append(('Content-Type', 'application/json'))
        start_response(_STATUS[status], headers)
        self._log_request(method, path, query, status)
        if method.upper() == 'HEAD':
            return [b'']
        return [payload]

    def _log_request(self, method: str, path: str, query: str,
                     status: int) -> None:
        filters = sorted(parse_qs(query)) if query else []
        line = '%s %s %s%s -> %d\n' % (
            time.strftime('%H:%M:%S'), method, path,
            ' [%s]' % ','.join(filters) if filters else '', status)
        with self._lock:
            self.requests += 1
            self.log.write(line)
            self.log.flush()


class _ThreadingWSGIServer(socketserver.ThreadingMixIn,
                           simple_server.WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(simple_server.WSGIRequestHandler):
    """The application logs; wsgiref's own access log is off."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


def make_server(host: str, port: int,
                log: Any = None) -> simple_server.WSGIServer:
    """A threaded server of the stub (``port`` 0: any free port)."""
    server = simple_server.make_server(
        host, port, NeutronStub('', log), server_class=_ThreadingWSGIServer,
        handler_class=_QuietHandler)
    app = server.get_app()
    assert isinstance(app, NeutronStub)
    app.base_url = 'http://%s:%d' % (host, server.server_address[1])
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog='python -m gate.neutron_stub', description=__doc__.split(
            '\n\n')[0])
    parser.add_argument('--host', default='127.0.0.1')
    parser.add_argument('--port', type=int, default=9696)
    args = parser.parse_args(argv)
    server = make_server(args.host, args.port)
    print('gate.neutron_stub listening on http://%s:%d'
          % (args.host, server.server_address[1]), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == '__main__':
    sys.exit(main())
