"""Where everything of one gate cloud lives, and the fixed facts about it.

One cloud per machine at a time: the services listen on fixed loopback
ports (keystone on 127.0.0.1:5000, ...). Everything else (databases,
queues, keys, instances, logs) is under one temporary directory, the
cloud's *base*, kept short because unix socket paths are at most 107 bytes.
"""

from __future__ import annotations

import dataclasses
import os
import sys

HOST = '127.0.0.1'
REGION = 'RegionOne'
PASSWORD = 'gate-secret'
ADMIN = {
    'username': 'admin',
    'password': PASSWORD,
    'project_name': 'admin',
    'user_domain_name': 'Default',
    'project_domain_name': 'Default',
}
DB_USER = 'gate'
RABBIT_NODE = 'gate@localhost'

PORTS = {
    'mysql': 3306,
    'epmd': 4369,
    'rabbit': 5672,
    'rabbit_dist': 25672,
    'keystone': 5000,
    'nova': 8774,
    'placement': 8778,
    'glance': 9292,
    'neutron': 9696,
}
ENDPOINTS = {
    'identity': 'http://%s:%d/v3' % (HOST, PORTS['keystone']),
    'compute': 'http://%s:%d/v2.1' % (HOST, PORTS['nova']),
    'placement': 'http://%s:%d' % (HOST, PORTS['placement']),
    'image': 'http://%s:%d' % (HOST, PORTS['glance']),
    'network': 'http://%s:%d' % (HOST, PORTS['neutron']),
}
AUTH_URL = ENDPOINTS['identity']
DATABASES = ('keystone', 'glance', 'placement', 'nova_api', 'nova',
             'nova_cell0')
# Service users (project "service", roles admin and service).
SERVICE_USERS = ('nova', 'placement', 'glance', 'neutron')

# Inside every compute's mount namespace.
INSTANCES_PATH = '/var/lib/nova/instances'
LIBVIRT_PORT = 16509
SSH_PORT = 22
LIBVIRT_MOUNTS = (
    ('etc', '/etc/libvirt'),
    ('run', '/run/libvirt'),
    ('lib', '/var/lib/libvirt'),
    ('cache', '/var/cache/libvirt'),
    ('log', '/var/log/libvirt'),
)


@dataclasses.dataclass(frozen=True)
class Compute:
    """One compute "host": a name, an address, and its configuration.

    ``stock_images_type`` is the same on every compute: stock converts no
    format on a move, so stock computes of different ``images_type`` fail
    moves between them in one direction only (a resize's ``qemu-img resize
    -f qcow2`` of a raw disk, a live block migration's overlay), and the
    gate would blame stock for its own configuration.

    ``snapshot_image_format`` is ``[libvirt]snapshot_image_format`` on
    both drivers ('' leaves stock's default, the disk's own format).
    Both are qcow2, as an operator of raw disks sets it to keep snapshots
    small: raw disks would otherwise upload their whole size to Glance per
    snapshot, where stock's, on qcow2 disks on both hosts, upload their
    data only. compute1 keeps raw volumes of instances that came from
    compute2: a raw snapshot of one whose guest wrote a qcow2 header at its
    start is refused by Glance's own format check, as stock's would be.
    """

    host: str
    ip: str
    pools: bool
    images_type: str
    mapping: str
    stock_images_type: str
    host_uuid: str
    snapshot_image_format: str = ''


COMPUTES = (
    Compute('compute1', '127.0.0.11', True, 'qcow2', 'qcow2:qcow2', 'qcow2',
            '0ea7e1a1-0000-4000-8000-000000000011', 'qcow2'),
    Compute('compute2', '127.0.0.12', False, 'flat', 'raw:flat', 'qcow2',
            '0ea7e1a1-0000-4000-8000-000000000012', 'qcow2'),
)
#: The ``ceph`` profile: both computes share a one-node Ceph cluster
#: (:mod:`gate.ceph`) with Glance. compute1 keeps stock's rbd disks and
#: makes qcow2 images local overlays (``qcow2:qcow2``, files); compute2 has
#: its rbd disks as volumes of an rbd storage pool. Stock: rbd on both.
CEPH_COMPUTES = (
    Compute('compute1', '127.0.0.11', False, 'rbd', 'qcow2:qcow2', 'rbd',
            '0ea7e1a1-0000-4000-8000-000000000011'),
    Compute('compute2', '127.0.0.12', True, 'rbd', '', 'rbd',
            '0ea7e1a1-0000-4000-8000-000000000012'),
)
PROFILES = {'default': COMPUTES, 'ceph': CEPH_COMPUTES}
DEFAULT_PROFILE = 'default'
#: The Ceph cluster of the ``ceph`` profile: its monitor (msgr2), Nova's
#: pool and Glance's.
CEPH_MON_PORT = 3300
CEPH_POOL = 'vms'
GLANCE_POOL = 'images'


def computes(profile: str = DEFAULT_PROFILE) -> tuple[Compute, ...]:
    """The computes of a gate profile."""
    try:
        return PROFILES[profile]
    except KeyError:
        raise ValueError('unknown gate profile %r (profiles: %s)' % (
            profile, ', '.join(PROFILES))) from None

PLUGIN_DRIVER = 'imgtype.LibvirtDriver'
STOCK_DRIVER = 'libvirt.LibvirtDriver'
DRIVERS = {'plugin': PLUGIN_DRIVER, 'stock': STOCK_DRIVER}


def venv() -> str:
    """The venv the gate runs from (its ``bin`` has every service)."""
    return sys.prefix


def venv_bin(name: str) -> str:
    return os.path.join(venv(), 'bin', name)


@dataclasses.dataclass(frozen=True)
class Layout:
    """Paths of one cloud under its base directory."""

    base: str

    def path(self, *parts: str) -> str:
        return os.path.join(self.base, *parts)

    @property
    def logs(self) -> str:
        return self.path('logs')

    def log(self, name: str) -> str:
        return os.path.join(self.logs, name + '.log')

    @property
    def state(self) -> str:
        return self.path('state.json')

    @property
    def cloud_json(self) -> str:
        return self.path('cloud.json')

    @property
    def openrc(self) -> str:
        return self.path('openrc')

    @property
    def nova_conf(self) -> str:
        return self.path('nova', 'nova.conf')

    @property
    def ssh(self) -> str:
        return self.path('ssh')

    def compute_dir(self, host: str) -> str:
        return self.path(host)

    def compute_conf(self, host: str) -> str:
        return self.path(host, 'nova-compute.conf')

    def host_instances(self, host: str) -> str:
        return self.path(host, 'instances')

    def libvirt_dir(self, host: str, sub: str = '') -> str:
        return os.path.join(self.path(host, 'libvirt'), sub) if sub else \
            self.path(host, 'libvirt')

    @property
    def ceph_dir(self) -> str:
        return self.path('ceph')

    @property
    def ceph_conf(self) -> str:
        """The ``ceph`` profile's ceph.conf (what every client reads)."""
        return os.path.join(self.ceph_dir, 'ceph.conf')

    def libvirt_sock(self, host: str) -> str:
        """The compute's libvirtd socket, as seen from the host."""
        return os.path.join(self.libvirt_dir(host, 'run'), 'libvirt-sock')


def db_url(name: str) -> str:
    return 'mysql+pymysql://%s:%s@%s:%d/%s?charset=utf8' % (
        DB_USER, PASSWORD, HOST, PORTS['mysql'], name)


def transport_url() -> str:
    return 'rabbit://guest:guest@%s:%d/' % (HOST, PORTS['rabbit'])
