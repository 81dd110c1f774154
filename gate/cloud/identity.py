"""Keystone's objects for the cloud, in one script, and admin API access."""

from __future__ import annotations

from typing import Any

from keystoneauth1 import session as ks_session
from keystoneauth1.identity import v3

from gate.cloud import layout as L
from gate.cloud import proc as P

# service type -> (name, endpoint URL)
SERVICES = {
    'compute': ('nova', L.ENDPOINTS['compute']),
    'placement': ('placement', L.ENDPOINTS['placement']),
    'image': ('glance', L.ENDPOINTS['image']),
    'network': ('neutron', L.ENDPOINTS['network']),
}
INTERFACES = ('public', 'internal', 'admin')


def admin_session() -> ks_session.Session:
    a = L.ADMIN
    auth = v3.Password(auth_url=L.AUTH_URL, username=a['username'],
                       password=a['password'], project_name=a['project_name'],
                       user_domain_name=a['user_domain_name'],
                       project_domain_name=a['project_domain_name'])
    return ks_session.Session(auth=auth)


def create_objects() -> None:
    """Service project, service users (admin + service roles), services
    and their endpoints; what is there already is kept."""
    from keystoneclient.v3 import client

    ks = client.Client(session=admin_session(), interface='public')
    domain = ks.domains.get('default')
    projects = {p.name: p for p in ks.projects.list(domain=domain)}
    service = projects.get('service') or ks.projects.create(
        'service', domain, description='Service project')
    roles = {r.name: r for r in ks.roles.list()}
    for name in ('admin', 'service'):
        if name not in roles:
            roles[name] = ks.roles.create(name)
    users = {u.name: u for u in ks.users.list(domain=domain)}
    for name in L.SERVICE_USERS:
        user = users.get(name) or ks.users.create(
            name, domain=domain, password=L.PASSWORD,
            default_project=service)
        for role in ('admin', 'service'):
            ks.roles.grant(roles[role], user=user, project=service)
    services = {s.type: s for s in ks.services.list()}
    endpoints = {(e.service_id, e.interface)
                 for e in ks.endpoints.list()}
    for stype, (name, url) in SERVICES.items():
        svc = services.get(stype) or ks.services.create(
            name, type=stype, enabled=True)
        for interface in INTERFACES:
            if (svc.id, interface) not in endpoints:
                ks.endpoints.create(svc, url, interface=interface,
                                    region=L.REGION, enabled=True)
    P.progress('keystone: service project, users, services and endpoints')


def compute_get(sess: ks_session.Session, path: str,
                microversion: str = '2.1') -> Any:
    r = sess.get(L.ENDPOINTS['compute'] + path,
                 headers={'OpenStack-API-Version': 'compute ' + microversion},
                 raise_exc=True)
    return r.json()


def services_up(sess: ks_session.Session) -> dict[tuple[str, str], bool]:
    """(binary, host) -> up, from the os-services API."""
    out: dict[tuple[str, str], bool] = {}
    for s in compute_get(sess, '/os-services')['services']:
        out[(s['binary'], s['host'])] = (
            s['state'] == 'up' and s['status'] == 'enabled')
    return out


def hypervisors(sess: ks_session.Session) -> dict[str, str]:
    """hypervisor hostname -> state."""
    data = compute_get(sess, '/os-hypervisors/detail', '2.53')
    return {h['hypervisor_hostname']: h['state']
            for h in data['hypervisors']}


def resource_providers(sess: ks_session.Session) -> set[str]:
    r = sess.get(L.ENDPOINTS['placement'] + '/resource_providers',
                 headers={'OpenStack-API-Version': 'placement 1.14'},
                 raise_exc=True)
    return {rp['name'] for rp in r.json()['resource_providers']}
