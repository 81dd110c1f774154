"""Fixtures shared by the unit tests."""

from collections.abc import Iterator

import libvirt
import nova.conf
import pytest
from oslo_config import fixture as config_fixture

import nova_imgtype.conf  # noqa: F401  (registers our options)
from nova_imgtype_testing.ceph_fixture import CephClusterFixture

# The embedded test driver prints every error it raises; tests assert them.
libvirt.registerErrorHandler(lambda ctx, err: None, None)


@pytest.fixture
def conf(tmp_path) -> Iterator[config_fixture.Config]:
    """Nova's CONF with our options, reset after the test; instances_path
    is the test's tmp_path and host is host1."""
    fix = config_fixture.Config(nova.conf.CONF)
    fix.setUp()
    fix.config(instances_path=str(tmp_path), host='host1')
    yield fix
    fix.cleanUp()


@pytest.fixture(autouse=True)
def ceph() -> Iterator[CephClusterFixture]:
    """A Ceph cluster's answers (fsid, monitors) to stock's RBDDriver:
    no unit test reaches a cluster."""
    fix = CephClusterFixture()
    fix.setUp()
    yield fix
    fix.cleanUp()


@pytest.fixture
def test_conn() -> Iterator[libvirt.virConnect]:
    """libvirt's embedded test driver (no daemon, no data), with the pools
    our code creates removed afterwards."""
    conn = libvirt.open('test:///default')
    yield conn
    for pool in conn.listAllStoragePools(0):
        if pool.name().startswith('nova-'):
            if pool.isActive():
                pool.destroy()
            pool.undefine()
    conn.close()
