"""pytest set-up for the real tier: one throwaway libvirtd for the tier.

The tier's daemons (libvirtd, Ceph) are package-scoped: they stop when the
tier's last test ends, not at the end of the pytest session, so that the
gate's tier after it (``tests/gate``, a whole cloud whose boot times are
measured) runs with none of them left in the background.

See :mod:`tests.real.fixtures` for how the daemon is started. A daemon that
does not come up is an error, never a skip: the real tier runs on every
machine that has the packages of ``bindep.txt``.
"""

from __future__ import annotations

import os
import pathlib
import tempfile
from collections.abc import Iterator
from typing import Any

import libvirt
import pytest

from gate import ceph
from nova_imgtype_testing import libvirtd as fixtures


def _quiet_libvirt_error(_ctx: object, _err: object) -> None:
    """Errors still raise libvirtError; do not also print them."""


libvirt.registerErrorHandler(_quiet_libvirt_error, None)


@pytest.fixture(scope='package')
def libvirt_daemon() -> Iterator[fixtures.LibvirtDaemon]:
    """The throwaway libvirtd of the real tier (stopped at its end)."""
    daemon = fixtures.start_libvirtd()
    try:
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture(scope='package')
def libvirt_uri(libvirt_daemon: fixtures.LibvirtDaemon) -> str:
    """URI of the tier's throwaway libvirtd (started on first use)."""
    return libvirt_daemon.uri


@pytest.fixture(scope='package')
def libvirt_conn(libvirt_uri: str) -> Iterator[libvirt.virConnect]:
    """A connection to the throwaway libvirtd, closed at the tier's end."""
    conn = libvirt.open(libvirt_uri)
    try:
        yield conn
    finally:
        conn.close()


@pytest.fixture(scope='package')
def kvm_available(libvirt_conn: libvirt.virConnect) -> bool:
    """Whether the daemon can run x86_64 domains of type kvm."""
    return fixtures.kvm_usable(libvirt_conn)


@pytest.fixture
def libvirt_tmp_path(libvirt_daemon: fixtures.LibvirtDaemon,
                     tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """A fresh directory the daemon (and QEMU) can reach.

    ``tmp_path`` unless the daemon runs as another user (the session
    fallback as root), then a directory of the daemon's base owned by it;
    files made in it must be handed over with ``libvirt_daemon.give()``
    before the daemon or QEMU write to them.
    """
    if libvirt_daemon.uid in (0, os.geteuid()):
        yield tmp_path
        return
    path = pathlib.Path(tempfile.mkdtemp(dir=libvirt_daemon.base))
    path.chmod(0o755)
    libvirt_daemon.give(path)
    yield path


@pytest.fixture(scope='package')
def ceph_cluster() -> Iterator[ceph.CephCluster]:
    """A throwaway one-node Ceph cluster (memstore, no auth) with an
    initialised rbd pool, stopped at the tier's end
    (:mod:`gate.ceph`)."""
    yield from ceph.ceph_cluster_fixture()


class Processes(list):  # type: ignore[type-arg]
    """The commands run through oslo's ``processutils.execute`` (Nova's,
    os-brick's and the plugin's) or the plugin's :func:`.spawn.execute`
    between :meth:`start` and the test's end
    (or :meth:`stop`); ``inspected``: the files Nova's format inspector
    (``images.get_image_format``) read meanwhile."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__()
        self._monkeypatch = monkeypatch
        self.inspected: list[str] = []

    def start(self) -> None:
        from nova.virt import images
        from oslo_concurrency import processutils

        from nova_imgtype.virt.libvirt import spawn
        inspect = images.get_image_format

        def recorder(execute: Any) -> Any:
            def recording(*cmd: object, **kwargs: object) -> object:
                self.append(' '.join(str(c) for c in cmd))
                return execute(*cmd, **kwargs)
            return recording

        def inspecting(path: str) -> object:
            self.inspected.append(path)
            return inspect(path)

        for owner in (processutils, spawn):
            self._monkeypatch.setattr(owner, 'execute',
                                      recorder(owner.execute))
        self._monkeypatch.setattr(images, 'get_image_format', inspecting)

    def stop(self) -> None:
        self._monkeypatch.undo()


@pytest.fixture
def processes(monkeypatch: pytest.MonkeyPatch) -> Processes:
    return Processes(monkeypatch)
