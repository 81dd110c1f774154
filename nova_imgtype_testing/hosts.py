"""Computes with storage of their own, in one process.

Stock Nova's functional harness runs every service in one process with one
``CONF``, so its computes share ``instances_path``: they look like computes
on shared storage, and the paths a cloud without shared storage takes (the
remote copy of a cold move, ``destroy(destroy_disks=True)`` on the host an
instance left, the clean-up of an evacuated instance when its source comes
back) never run.

:class:`SeparateHosts` gives each compute what it has in production: the
same ``instances_path`` on storage of its own. Each compute gets a Linux
mount namespace in which its own directory is bind-mounted over
``instances_path``, and every thread that works for a compute enters that
namespace for as long as it does:

* an RPC request dispatched to the compute's manager;
* work the compute hands to Nova's thread pools (``spawn_on``), whose
  threads are shared by every service;
* whatever a test runs inside :meth:`SeparateHosts.running_as` (a compute's
  start, a look at its disks).

While a thread works for a compute, that compute's options win over the
global ``CONF``: ``host``, ``my_ip`` and ``[libvirt]migration_inbound_addr``
(a distinct address per compute, so stock's ``_is_path_shared_with`` sees
another host) and whatever the
``options`` callable returns for it. Other threads (API, conductor,
scheduler, the test) see the process's own mount namespace, where the
computes' directories are reachable at :meth:`SeparateHosts.storage`.

Under eventlet (Nova 33's default), where greenthreads share one OS
thread, the namespace follows each greenthread instead: it is set again at
every switch (greenlet's trace hook).

Needs root (``CAP_SYS_ADMIN`` for mount namespaces), as the real tier's
system libvirtd does. Test-only: nothing here runs on a compute node.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import functools
import os
import threading
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from typing import Any

import fixtures
from oslo_config import cfg

#: ``{(group or None, option): value}`` of one compute.
Options = Mapping[tuple[str | None, str], Any]

_CLONE_FS = 0x00000200
_CLONE_NEWNS = 0x00020000
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18

_libc = ctypes.CDLL(None, use_errno=True)

#: The compute the running thread (or task) works for; None: no compute.
_CURRENT: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    'nova_imgtype_testing_host', default=None)


#: Options that are a compute's address (``$my_ip`` by default: oslo.config
#: caches the substituted value, so each is answered here).
_ADDRESS_OPTIONS = frozenset([(None, 'my_ip'),
                              ('libvirt', 'migration_inbound_addr')])


class NamespaceError(OSError):
    """A mount namespace operation failed."""


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise NamespaceError(errno, '%s: %s' % (what, os.strerror(errno)))


def _own_ns() -> int:
    """An fd of the calling thread's mount namespace."""
    return os.open('/proc/thread-self/ns/mnt', os.O_RDONLY | os.O_CLOEXEC)


def _enter(ns_fd: int) -> None:
    """Move the calling thread into the mount namespace ``ns_fd``.

    Each time, the thread first stops sharing filesystem attributes: threads
    it started since share them again (``pthread_create`` passes
    ``CLONE_FS``), and ``setns`` refuses a thread that shares them.
    """
    _check(_libc.unshare(_CLONE_FS), 'unshare(CLONE_FS)')
    _check(_libc.setns(ns_fd, _CLONE_NEWNS), 'setns')


def _make_namespace(storage: str, target: str) -> int:
    """A new mount namespace where ``storage`` is mounted over ``target``.

    Made by a thread of its own, which leaves it at once: the namespace
    lives on through the returned fd.
    """
    result: dict[str, Any] = {}

    def make() -> None:
        try:
            _check(_libc.unshare(_CLONE_FS | _CLONE_NEWNS),
                   'unshare(CLONE_NEWNS)')
            _check(_libc.mount(None, b'/', None, _MS_REC | _MS_PRIVATE, None),
                   'mount --make-rprivate /')
            _check(_libc.mount(os.fsencode(storage), os.fsencode(target),
                               None, _MS_BIND, None),
                   'mount --bind %s %s' % (storage, target))
            result['fd'] = _own_ns()
        except BaseException as e:  # handed to the caller
            result['error'] = e

    thread = _os_thread_class()(target=make, name='imgtype-mkns')
    thread.start()
    thread.join()
    if 'error' in result:
        raise result['error']
    fd: int = result['fd']
    return fd


def _green() -> bool:
    """Whether Nova runs under eventlet here (Nova 33's default)."""
    from nova import monkey_patch

    return bool(getattr(monkey_patch, 'MONKEY_PATCHED', False))


def _os_thread_class() -> type[threading.Thread]:
    """A thread class that makes an OS thread, under eventlet too."""
    if _green():
        import eventlet.patcher

        cls: type[threading.Thread] = eventlet.patcher.original(
            'threading').Thread
        return cls
    return threading.Thread


class _GreenNamespaces:
    """Under eventlet every greenthread runs on one OS thread: the mount
    namespace follows the greenthread, set at each switch (greenlet's
    trace hook) to the one it entered, else the process's own."""

    def __init__(self, process_ns: int) -> None:
        import greenlet

        self._greenlet = greenlet
        self._process_ns = process_ns
        self._of: dict[Any, int] = {}
        self._now = process_ns
        self._previous = greenlet.settrace(self._trace)

    def close(self) -> None:
        self._greenlet.settrace(self._previous)
        self._set(self._process_ns)

    def _set(self, fd: int) -> None:
        if fd != self._now:
            _enter(fd)
            self._now = fd

    def _trace(self, event: str, args: Any) -> None:
        if event in ('switch', 'throw'):
            self._set(self._of.get(args[1], self._process_ns))
        if self._previous is not None:
            self._previous(event, args)

    @contextlib.contextmanager
    def entered(self, ns_fd: int) -> Iterator[None]:
        me = self._greenlet.getcurrent()
        before = self._of.get(me)
        self._of[me] = ns_fd
        self._set(ns_fd)
        try:
            yield
        finally:
            if before is None:
                del self._of[me]
            else:
                self._of[me] = before
            self._set(before if before is not None else self._process_ns)


#: Set by SeparateHosts under eventlet.
_GREEN: _GreenNamespaces | None = None


@contextlib.contextmanager
def _in_namespace(host: str | None, ns_fd: int) -> Iterator[None]:
    """Run the block for ``host`` (None: no compute) in ``ns_fd``."""
    if _GREEN is not None:
        token = _CURRENT.set(host)
        try:
            with _GREEN.entered(ns_fd):
                yield
        finally:
            _CURRENT.reset(token)
        return
    previous = _own_ns()
    token = _CURRENT.set(host)
    try:
        _enter(ns_fd)
        yield
    finally:
        try:
            _enter(previous)
        finally:
            os.close(previous)
            _CURRENT.reset(token)


def _compute_host(endpoint: Any) -> str | None:
    """The host of a compute manager endpoint, as Nova hands it to
    oslo.messaging: the manager or one of its additional endpoints (which
    have a ``manager``), wrapped for tracking (``_endpoint``) since Nova
    34."""
    from nova.compute import manager

    seen = endpoint
    for _ in range(3):
        if isinstance(seen, manager.ComputeManager):
            host: str = seen.host
            return host
        own = vars(seen) if hasattr(seen, '__dict__') else {}
        seen = own.get('_endpoint', own.get('manager'))
        if seen is None:
            break
    return None


class SeparateHosts(fixtures.Fixture):
    """Each compute on storage of its own at the same ``instances_path``.

    :param instances_path: the path every compute sees its own storage at
        (``CONF.instances_path``; must exist).
    :param options: ``options(host)``: the compute's own options, read each
        time an option is looked up for it (so later changes count).
    :param conf: the options that are per compute (Nova's ``CONF``).
    """

    def __init__(self, instances_path: str,
                 options: Callable[[str], Options] | None = None,
                 conf: cfg.ConfigOpts | None = None) -> None:
        super().__init__()
        self.instances_path = instances_path
        self._conf = conf
        self._options = options or (lambda host: {})
        self._storage: dict[str, str] = {}
        self._ns: dict[str, int] = {}
        self._ips: dict[str, str] = {}
        self._process_ns = -1

    def _setUp(self) -> None:
        if os.geteuid() != 0:
            raise NamespaceError(1, 'SeparateHosts needs root (mount '
                                    'namespaces)')
        os.makedirs(self.instances_path, exist_ok=True)
        self._root = self.useFixture(fixtures.TempDir()).path
        self._process_ns = _own_ns()
        self.addCleanup(self._close)
        if _green():
            global _GREEN
            _GREEN = _GreenNamespaces(self._process_ns)
            self.addCleanup(self._stop_green)
        self._patch_dispatch()
        self._patch_spawn()
        self._patch_options()

    @staticmethod
    def _stop_green() -> None:
        global _GREEN
        if _GREEN is not None:
            _GREEN.close()
            _GREEN = None

    def _close(self) -> None:
        for fd in [*self._ns.values(), self._process_ns]:
            os.close(fd)
        self._ns.clear()

    # -- computes -----------------------------------------------------------

    def add(self, host: str) -> str:
        """Give ``host`` storage of its own (once); returns its directory."""
        if host not in self._storage:
            storage = os.path.join(self._root, host)
            os.mkdir(storage)
            self._ns[host] = _make_namespace(storage, self.instances_path)
            self._storage[host] = storage
            self._ips[host] = '192.0.2.%d' % len(self._storage)
        return self._storage[host]

    def storage(self, host: str, *parts: str) -> str:
        """Where ``host``'s ``instances_path[/parts]`` is, seen from here."""
        return os.path.join(self._storage[host], *parts)

    def ip(self, host: str) -> str:
        """``host``'s ``my_ip``: what other computes reach it by."""
        return self._ips[host]

    @staticmethod
    def current() -> str | None:
        """The compute the calling thread works for, if any."""
        return _CURRENT.get()

    @contextlib.contextmanager
    def running_as(self, host: str | None) -> Iterator[None]:
        """Run the block as ``host`` does: its storage, its options.

        ``None``: as no compute (the process's own mount namespace).
        Subprocesses started in the block see what the compute sees.
        """
        fd = self._process_ns if host is None else self._ns[host]
        with _in_namespace(host, fd):
            yield

    # -- what makes threads work for a compute --------------------------------

    def _namespace_of(self, host: str | None) -> int:
        if host is not None and host in self._ns:
            return self._ns[host]
        return self._process_ns

    def _patch_dispatch(self) -> None:
        from oslo_messaging.rpc import dispatcher

        real = dispatcher.RPCDispatcher._do_dispatch

        def _do_dispatch(disp: Any, endpoint: Any, method: Any, ctxt: Any,
                         args: Any) -> Any:
            host = _compute_host(endpoint)
            with _in_namespace(host, self._namespace_of(host)):
                return real(disp, endpoint, method, ctxt, args)

        self.useFixture(fixtures.MonkeyPatch(
            'oslo_messaging.rpc.dispatcher.RPCDispatcher._do_dispatch',
            _do_dispatch))

    def _patch_spawn(self) -> None:
        # Nova 34: nova.thread_pool_factory.spawn_on(executor_type, func,
        # ...); Nova 33: nova.utils.spawn_on(executor, func, ...). Every
        # spawn of the compute manager and the driver goes through it.
        try:
            from nova import thread_pool_factory as where
            target = 'nova.thread_pool_factory.spawn_on'
        except ImportError:
            from nova import utils as where
            target = 'nova.utils.spawn_on'
        real = where.spawn_on

        def spawn_on(executor: Any, func: Callable[..., Any],
                     *args: Any, **kwargs: Any) -> Any:
            host = _CURRENT.get()

            @functools.wraps(func)
            def as_spawner(*a: Any, **kw: Any) -> Any:
                with _in_namespace(host, self._namespace_of(host)):
                    return func(*a, **kw)

            return real(executor, as_spawner, *args, **kwargs)

        self.useFixture(fixtures.MonkeyPatch(target, spawn_on))

    def _patch_options(self) -> None:
        import nova.conf as nova_conf

        real = cfg.ConfigOpts._get

        def _get(conf: cfg.ConfigOpts, name: str, group: Any = None,
                 namespace: Any = None) -> Any:
            host = _CURRENT.get()
            if (host is not None and namespace is None
                    and conf is (self._conf or nova_conf.CONF)):
                key = (group.name if isinstance(group, cfg.OptGroup)
                       else group, name)
                if key == (None, 'host'):
                    return host
                if key in _ADDRESS_OPTIONS:
                    return self._ips[host]
                own = self._options(host)
                if key in own and own[key] is not None:
                    return own[key]
            return real(conf, name, group, namespace)

        self.useFixture(fixtures.MonkeyPatch(
            'oslo_config.cfg.ConfigOpts._get', _get))
