"""A pool refresh during another request's volume job (issue 29, found by
the Ceph profile's third run of session 22: a build on an rbd pool failed
with "pool 'nova-disks-pool' has asynchronous jobs running" while another
build's clone ran, and was rescheduled).

libvirt refuses ``virStoragePoolRefresh`` while it builds or copies a
volume of the pool; the pool here is a stand-in that refuses as libvirt
does (the embedded test driver runs no asynchronous job)."""

from unittest import mock

import libvirt
import pytest

from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import pools as pools_mod

BUSY = ("internal error: pool 'nova-disks-pool' has asynchronous jobs "
        "running.")


class _Pool:
    """Refuses ``refreshes`` times with ``error``, then refreshes."""

    def __init__(self, refusals, error=BUSY):
        self.refusals = refusals
        self.error = error
        self.calls = 0

    def refresh(self, flags):
        assert flags == 0
        self.calls += 1
        if self.calls <= self.refusals:
            raise libvirt.libvirtError(self.error)


def test_a_refresh_waits_for_another_requests_volume_job():
    pool = _Pool(refusals=3)
    storage = pools_mod.StoragePools(lambda: None)
    with mock.patch.object(storage, 'get', return_value=pool):
        storage.refresh('nova-disks-pool')
    assert pool.calls == 4


def test_another_refusal_is_raised_at_once():
    pool = _Pool(refusals=1, error='internal error: rbd is gone')
    with pytest.raises(libvirt.libvirtError, match='rbd is gone'):
        pool_specs.refresh(pool)
    assert pool.calls == 1


def test_jobs_that_do_not_end_are_a_failure_after_the_wait():
    pool = _Pool(refusals=10 ** 6)
    with pytest.raises(libvirt.libvirtError, match='asynchronous jobs'):
        pool_specs.refresh(pool, wait=0.3)
    assert 2 <= pool.calls < 10
