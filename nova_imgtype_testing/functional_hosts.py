"""Functional base: computes with storage and a libvirtd of their own.

:class:`SeparateStorageTestBase` is
:class:`~.functional.ImgtypeServersTestBase` whose computes do not share
storage, as computes of a cloud without shared storage don't:

* each sees its own directory at ``CONF.instances_path``
  (:class:`~nova_imgtype_testing.hosts.SeparateHosts`: a mount namespace per
  compute), and has its own ``host``, ``my_ip`` and options while it works,
  with no ``on_compute`` needed;
* each has its own throwaway libvirtd (the real tier's system daemon,
  started inside the compute's mount namespace): its storage pools, and
  the one the other computes reach it by during a cold move
  (``[libvirt]live_migration_uri`` names a socket per compute address).

Domains stay fakelibvirt's (the harness's); everything on disk is real.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from typing import Any
from xml.etree import ElementTree

import fixtures
import libvirt

from nova_imgtype_testing import functional
from nova_imgtype_testing import hosts as hosts_mod
from nova_imgtype_testing import libvirtd


def _close_quietly(conn: Any) -> None:
    try:
        conn.close()
    except libvirt.libvirtError:
        pass


class SeparateStorageTestBase(functional.ImgtypeServersTestBase):
    """Stock libvirt functional base; computes on storage of their own.

    Attributes a test can use, besides the base's:

    ``hosts``
        the :class:`~nova_imgtype_testing.hosts.SeparateHosts` fixture:
        ``hosts.storage(host, ...)`` is where a compute's
        ``instances_path`` is seen from the test, ``hosts.running_as(host)``
        runs a block as the compute.
    ``daemons``
        ``{host: LibvirtDaemon}``; ``connections``: ``{host: virConnect}``.
    """

    def setUp(self) -> None:
        super().setUp()
        self.hosts = self.useFixture(hosts_mod.SeparateHosts(
            self.instances_path, self._own_options))
        # Socket paths are at most 107 bytes: a short directory in /tmp.
        self._sockets = tempfile.mkdtemp(prefix='nisock-', dir='/tmp')
        self.addCleanup(_rmtree, self._sockets)
        self.flags(live_migration_uri='qemu+unix:///system?socket=%s/%%s/'
                   'libvirt-sock' % self._sockets, group='libvirt')
        self.daemons: dict[str, libvirtd.LibvirtDaemon] = {}
        self.connections: dict[str, Any] = {}
        self.useFixture(fixtures.MonkeyPatch(
            'nova_imgtype.virt.libvirt.driver.LibvirtDriver.'
            '_storage_connection', self._storage_connection))

    def _own_options(self, host: str) -> hosts_mod.Options:
        """The options ``host`` was started with (``start_compute``)."""
        return self.compute_flags.get(host, {})

    def _storage_connection(self, driver: Any) -> Any:
        """The driver's storage connection: its compute's own libvirtd."""
        host = self.hosts.current()
        if host is None or host not in self.connections:
            raise AssertionError('storage connection asked for outside a '
                                 'compute (thread of %r)' % host)
        return self.connections[host]

    def _start_daemon(self, hostname: str) -> None:
        """Start ``hostname``'s libvirtd, in its mount namespace."""
        with self.hosts.running_as(hostname):
            daemon = libvirtd.start_libvirtd('system')
        self.addCleanup(daemon.stop)
        self.daemons[hostname] = daemon
        os.symlink(os.path.join(daemon.base, 'run'),
                   os.path.join(self._sockets, self.hosts.ip(hostname)))
        conn = libvirt.open(daemon.uri)
        self.addCleanup(_close_quietly, conn)
        self.addCleanup(functional._remove_nova_pools, conn)
        self.connections[hostname] = conn

    def start_compute(self, hostname: str = 'compute1', *args: Any,
                      **kwargs: Any) -> str:
        """Start compute ``hostname`` on storage of its own.

        The first start gives it its storage and its libvirtd; the service
        (and its driver) then starts as that compute. Arguments are the
        base's.
        """
        self.hosts.add(hostname)
        if hostname not in self.daemons:
            self._start_daemon(hostname)
        with self.hosts.running_as(hostname):
            return super().start_compute(hostname, *args, **kwargs)

    # -- looking at a compute's disks -----------------------------------------

    def listing(self, host: str) -> list[str]:
        """What is in ``host``'s ``instances_path`` (its own files)."""
        return sorted(os.listdir(self.hosts.storage(host)))

    def volumes(self, host: str, pool: str) -> list[str]:
        """The volumes of ``host``'s pool ``pool``."""
        conn = self.connections[host]
        found: list[str] = conn.storagePoolLookupByName(pool).listVolumes()
        return sorted(found)

    def disk_info(self, host: str, path: str) -> dict[str, Any]:
        """``qemu-img info`` of ``path`` on ``host``."""
        with self.hosts.running_as(host):
            return functional.qemu_img_info(path)

    def domain_disks(self, host: str,
                     server: Mapping[str, Any] | str) -> dict[str, str]:
        """``{name: format}`` of each disk (``device='disk'``) of the
        instance's domain on ``host``: a file's base name (``disk``,
        ``disk.eph0``, ``disk.swap``) or a volume's name, and the format
        the domain gives QEMU for it."""
        uuid = server if isinstance(server, str) else server['id']
        conn = self.computes[host].driver._host.get_connection()
        xml = ElementTree.fromstring(
            conn.lookupByUUIDString(uuid).XMLDesc(0))
        disks = {}
        for disk in xml.findall("./devices/disk[@device='disk']"):
            source, driver = disk.find('source'), disk.find('driver')
            assert source is not None and driver is not None
            name = (source.get('volume') or
                    os.path.basename(source.get('file', '')))
            disks[name] = driver.get('type', '')
        return disks


    def qemu_io(self, host: str, path: str, fmt: str, command: str) -> str:
        """Run ``qemu-io -f fmt -c command path`` as ``host`` (so that
        backing files resolve on its storage); returns the output."""
        with self.hosts.running_as(host):
            out = subprocess.run(['qemu-io', '-f', fmt, '-c', command, path],
                                 capture_output=True, text=True)
        if out.returncode != 0:
            raise AssertionError('qemu-io -c %r %s on %s: %s' % (
                command, path, host, out.stderr.strip() or out.stdout))
        return out.stdout

    def write_guest(self, host: str, path: str, fmt: str, offset: int,
                    length: int, pattern: int) -> None:
        """Write ``length`` bytes of ``pattern`` at ``offset`` of the guest
        disk at ``path`` of ``host``, in format ``fmt`` (the domain's)."""
        self.qemu_io(host, path, fmt, 'write -P %d %d %d'
                     % (pattern, offset, length))

    def guest_has(self, host: str, path: str, fmt: str, offset: int,
                  length: int, pattern: int) -> bool:
        """Whether the guest disk at ``path`` of ``host``, read in format
        ``fmt`` (the domain's), holds ``pattern`` over ``[offset, offset +
        length)``."""
        command = 'read -P %d %d %d' % (pattern, offset, length)
        with self.hosts.running_as(host):
            out = subprocess.run(['qemu-io', '-f', fmt, '-c', command, path],
                                 capture_output=True, text=True)
        if 'Pattern verification failed' in out.stdout + out.stderr:
            return False
        if out.returncode != 0:
            raise AssertionError('qemu-io -c %r %s on %s: %s' % (
                command, path, host, out.stderr.strip() or out.stdout))
        return True


def _rmtree(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
