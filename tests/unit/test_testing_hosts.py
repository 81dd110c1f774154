"""The functional tier's separate-storage fixture keeps computes apart.

:class:`nova_imgtype_testing.hosts.SeparateHosts` is what makes the
multi-host functional tests (``tests/functional/test_separate_storage.py``)
run on storage that is not shared; if it leaked, those tests would pass on
shared storage again. Real mount namespaces (the tests run as root).
"""

from __future__ import annotations

import os
import threading

import fixtures
import nova.conf
import testtools
from nova.tests import fixtures as nova_fixtures

from nova_imgtype_testing import hosts

try:  # Nova 34
    from nova.thread_pool_factory import spawn
except ImportError:  # Nova 33
    from nova.utils import spawn  # type: ignore[attr-defined,no-redef]

CONF = nova.conf.CONF


class SeparateHostsTest(testtools.TestCase):

    def setUp(self) -> None:
        super().setUp()
        # Nova's executors for this test only (spawn below), as Nova's own
        # test base gives every test.
        self.useFixture(nova_fixtures.IsolatedExecutorFixture(self.id()))
        self.path = self.useFixture(fixtures.TempDir()).path
        self.own = {'c1': {('libvirt', 'images_type'): 'flat'}}
        self.hosts = self.useFixture(hosts.SeparateHosts(
            self.path, lambda host: self.own.get(host, {})))
        for host in ('c1', 'c2'):
            self.hosts.add(host)

    def _write_as(self, host: str, name: str) -> None:
        with self.hosts.running_as(host):
            with open(os.path.join(self.path, name), 'w') as f:
                f.write(host)

    def test_same_path_other_storage(self) -> None:
        self._write_as('c1', 'a')
        self._write_as('c2', 'b')
        self.assertEqual(['a'], os.listdir(self.hosts.storage('c1')))
        self.assertEqual(['b'], os.listdir(self.hosts.storage('c2')))
        # Outside a compute: the directory itself, untouched.
        self.assertEqual([], os.listdir(self.path))
        with self.hosts.running_as('c2'):
            self.assertEqual(['b'], os.listdir(self.path))
            # Nested, then back.
            with self.hosts.running_as('c1'):
                self.assertEqual(['a'], os.listdir(self.path))
            self.assertEqual(['b'], os.listdir(self.path))

    def test_threads_of_other_computes_stay_apart(self) -> None:
        seen: dict[str, list[str]] = {}
        barrier = threading.Barrier(2)

        def work(host: str) -> None:
            with self.hosts.running_as(host):
                barrier.wait()
                seen[host] = os.listdir(self.path)
                barrier.wait()

        self._write_as('c1', 'a')
        threads = [threading.Thread(target=work, args=(h,))
                   for h in ('c1', 'c2')]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual({'c1': ['a'], 'c2': []}, seen)

    def test_work_spawned_by_a_compute_runs_as_it(self) -> None:
        self._write_as('c2', 'b')

        def look() -> tuple[str | None, list[str]]:
            return hosts.SeparateHosts.current(), os.listdir(self.path)

        with self.hosts.running_as('c2'):
            future = spawn(look)
        self.assertEqual(('c2', ['b']), future.result(timeout=10))
        self.assertEqual((None, []), spawn(look).result(
            timeout=10))

    def test_options_are_the_computes(self) -> None:
        CONF.set_override('images_type', 'qcow2', 'libvirt')
        self.addCleanup(CONF.clear_override, 'images_type', 'libvirt')
        with self.hosts.running_as('c1'):
            self.assertEqual(('c1', 'flat', '192.0.2.1', '192.0.2.1'), (
                CONF.host, CONF.libvirt.images_type, CONF.my_ip,
                CONF.libvirt.migration_inbound_addr))
        with self.hosts.running_as('c2'):
            self.assertEqual(('c2', 'qcow2', '192.0.2.2'), (
                CONF.host, CONF.libvirt.images_type, CONF.my_ip))
        self.assertEqual('qcow2', CONF.libvirt.images_type)
        self.assertNotIn(CONF.host, ('c1', 'c2'))
