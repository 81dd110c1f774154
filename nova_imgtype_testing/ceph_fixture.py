"""A Ceph cluster's answers without a cluster, for the unit tests.

:func:`nova_imgtype.virt.libvirt.ceph_cluster.identify` asks the cluster
through stock's ``RBDDriver``; this fixture answers for it, as a cluster
would (``get_fsid()``, ``get_mon_addrs()``), and forgets what the host found
before and after. Stock's driver itself is not replaced: the plugin's code
that calls it runs as on a compute.
"""

from __future__ import annotations

from unittest import mock

import fixtures
from nova.storage import rbd_utils

from nova_imgtype.virt.libvirt import ceph_cluster


class CephClusterFixture(fixtures.Fixture):
    """Stock's ``RBDDriver`` answers ``fsid`` and ``monitors``
    (``host:port``) for every cluster; ``calls`` counts the questions."""

    def __init__(self, fsid: str = '6e1d0b4a-2c7e-4d0b-9a51-0c3b5f1a7e01',
                 monitors: tuple[str, ...] = ('192.0.2.7:6789',)) -> None:
        super().__init__()
        self.fsid = fsid
        self.monitors = monitors
        self.calls = 0

    def _fsid(self) -> str:
        self.calls += 1
        return self.fsid

    def _mons(self, strip_brackets: bool = True
              ) -> tuple[list[str], list[str]]:
        pairs = [m.rpartition(':') for m in self.monitors]
        return [h for h, _s, _p in pairs], [p for _h, _s, p in pairs]

    def _setUp(self) -> None:
        ceph_cluster.forget()
        self.addCleanup(ceph_cluster.forget)
        for name, answer in (('get_fsid', self._fsid),
                             ('get_mon_addrs', self._mons)):
            patcher = mock.patch.object(rbd_utils.RBDDriver, name,
                                        side_effect=answer)
            patcher.start()
            self.addCleanup(patcher.stop)
