"""Functional test base: stock Nova services running *our* libvirt driver.

:class:`ImgtypeServersTestBase` is stock Nova's libvirt functional base
(:class:`nova.tests.functional.libvirt.base.ServersTestBase`: in-process API,
conductor, scheduler and placement, fakelibvirt domains) with three
differences:

1. Computes load ``compute_driver = imgtype.LibvirtDriver`` through Nova's own
   ``load_compute_driver`` (the installed ``nova/virt/imgtype`` shim), each
   with its own config options (``images_type``, ``use_cow_images``,
   ``force_raw_images``, ``[libvirt]images_type_mapping``, anything else).
2. Instance disks are real files made by the real image backends with real
   ``qemu-img`` under a fresh ``CONF.instances_path`` per test: the mocks of
   ``LibvirtImageBackendFixture`` and of ``LibvirtDriver._create_image`` are
   undone, and privsep'd calls run in-process (we run as root).
3. Glance serves real image bytes: :meth:`create_image` makes a raw or qcow2
   file with ``qemu-img`` and registers it in Nova's ``GlanceFixture``.

Config is global (one ``CONF`` per process), see :meth:`start_compute` and
:meth:`on_compute` for how per-compute options are handled.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from collections.abc import Mapping
from typing import Any
from unittest import mock
from xml.etree import ElementTree

import fixtures
import libvirt
import nova.conf
from nova.scheduler import request_filter
from nova.tests import fixtures as nova_fixtures
from nova.tests.functional.libvirt import base as libvirt_base
from nova.virt.libvirt import driver as libvirt_driver
from nova.virt.libvirt import imagebackend
from nova.virt.libvirt import imagecache
from nova.virt.libvirt import utils as libvirt_utils

import nova_imgtype.conf  # noqa: F401  registers [libvirt]images_type_mapping
from nova_imgtype.virt.libvirt import driver as imgtype_driver
from nova_imgtype_testing.functional_images import IMAGE_MARKER  # noqa: F401
from nova_imgtype_testing.functional_images import ImagesMixin
from nova_imgtype_testing.libvirtd import qemu_img_info  # noqa: F401 (tests)

CONF = nova.conf.CONF

#: Nova's ConfFixture defaults ``[wsgi]api_paste_config`` to
#: ``$pybasedir/etc/nova/api-paste.ini``, which does not exist for a wheel
#: install (the wheel puts it under ``<venv>/etc/nova/``). oslo.config reads
#: ``OS_WSGI__API_PASTE_CONFIG`` from the environment, which beats that
#: default; an explicit value in the environment is kept.
_PASTE = os.path.join(sys.prefix, 'etc', 'nova', 'api-paste.ini')
if os.path.exists(_PASTE):
    os.environ.setdefault('OS_WSGI__API_PASTE_CONFIG', _PASTE)

#: What stock Nova's ``load_compute_driver`` is given: it imports
#: ``nova.virt.imgtype``, the shim this package installs into Nova.
COMPUTE_DRIVER = 'imgtype.LibvirtDriver'

#: Config options, ``{(group or None, option): value}``.
FlagDict = dict[tuple[str | None, str], Any]

#: The attributes ``ServersTestBase`` (directly, or through
#: ``LibvirtImageBackendFixture``) replaces so that no disk is made. Their
#: real values are taken here, when this module is imported, before any test
#: patches them; :meth:`ImgtypeServersTestBase._unmock_image_creation` puts
#: them back for the duration of each test.
_UNMOCK = (
    # ServersTestBase: MockPatch(..., return_value=(False, False)).
    (libvirt_driver.LibvirtDriver, '_create_image'),
    # LibvirtImageBackendFixture: every Image is a Mock ...
    (imagebackend.Backend, 'backend'),
    # ... the fetch functions handed to Image.cache() are autospec mocks ...
    (libvirt_utils, 'fetch_image'),
    (libvirt_utils, 'fetch_raw_image'),
    # ... and so are ephemeral and swap disk creation.
    (libvirt_driver.LibvirtDriver, '_create_ephemeral'),
    (libvirt_driver.LibvirtDriver, '_create_swap'),
)
_REAL = {(owner, name): vars(owner)[name] for owner, name in _UNMOCK}
assert not any(isinstance(v, mock.Mock) for v in _REAL.values()), (
    'nova_imgtype_testing.functional imported while Nova is patched')

def _remove_nova_pools(conn: Any) -> None:
    """Stop and undefine every ``nova-*`` storage pool of ``conn``."""
    for pool in conn.listAllStoragePools(0):
        if pool.name().startswith('nova-'):
            if pool.isActive():
                pool.destroy()
            pool.undefine()


def _flag_dict(flags: Mapping[str | None, Mapping[str, Any]] | None,
               **common: Any) -> FlagDict:
    """Flatten ``{group: {option: value}}`` plus the common shortcuts."""
    result: FlagDict = {}
    for group, opts in (flags or {}).items():
        group = None if group in (None, '', 'DEFAULT') else group
        for name, value in opts.items():
            result[(group, name)] = value
    shortcuts = {
        'images_type': 'libvirt', 'images_type_mapping': 'libvirt',
        'use_cow_images': None, 'force_raw_images': None,
    }
    for name, value in common.items():
        if value is not None:
            result[(shortcuts[name], name)] = value
    return result


class ImgtypeServersTestBase(ImagesMixin, libvirt_base.ServersTestBase):
    """Stock libvirt functional base running ``imgtype.LibvirtDriver``.

    No compute is started by ``setUp``: a test starts its own with
    :meth:`start_compute`, gets images with :meth:`create_image`, boots with
    :meth:`boot_server` (or the stock ``_create_server``), and inspects the
    real files with :meth:`instance_path`, :meth:`cache_path` and
    :func:`qemu_img_info`.

    Attributes a test can use:

    ``instances_path``
        ``CONF.instances_path``: a fresh temporary directory per test.
    ``compute_flags``
        ``{hostname: {(group, option): value}}``, the options each compute
        was started with.
    ``active_compute``
        The compute whose options are in ``CONF`` right now.
    ``image_files``
        ``{image_id: path}`` of the files served by :meth:`create_image`.
    """

    #: Microversion of API requests: 'latest' lets ``networks='none'`` and
    #: ``host=`` be used without further ado.
    microversion = 'latest'
    #: The driver class computes must be running: ``compute_driver`` is
    #: set by :meth:`_setup_compute_service`.
    driver_class: type = imgtype_driver.LibvirtDriver
    #: nova-scheduler, started by the stock harness.
    scheduler: Any

    def setUp(self) -> None:
        super().setUp()
        self.instances_path: str = CONF.instances_path
        self.compute_flags: dict[str, FlagDict] = {}
        self.active_compute: str | None = None
        self._flag_baseline: FlagDict = {}
        self.image_files: dict[str, str] = {}
        self._image_dir = self.useFixture(fixtures.TempDir()).path
        self._unmock_image_creation()
        # Ephemeral disks of an image without os_type get vfat by default,
        # whose mkfs (dosfstools) is not on these machines; ext4's is.
        self.flags(default_ephemeral_format='ext4')
        # fakelibvirt (the harness's libvirt) has no storage pool API: the
        # computes keep stock image files unless a test turns pools on and
        # points the driver's storage connection at a real libvirtd
        # (tests/functional/test_storage_pools.py).
        self.flags(use_storage_pools=False, group='libvirt')
        # Privsep'd functions (qemu-img convert, utime, ...) run in this
        # process instead of asking a privsep daemon, which the harness
        # forbids (PrivsepNoHelperFixture). The tests run as root.
        self.useFixture(nova_fixtures.PrivsepFixture())

    # -- set-up ---------------------------------------------------------------

    def _setup_compute_service(self) -> None:
        """Only choose the driver; tests start computes themselves.

        Replaces ServersTestBase's, which chooses ``libvirt.LibvirtDriver``.
        The compute service then loads the driver the stock way:
        ``nova.virt.driver.load_compute_driver`` imports
        ``nova.virt.imgtype`` and instantiates its ``LibvirtDriver``.
        """
        self.flags(compute_driver=COMPUTE_DRIVER)

    def _unmock_image_creation(self) -> None:
        """Put back the real image creation code ServersTestBase mocked.

        Each attribute in ``_UNMOCK`` is set back to its real value and the
        mock is restored at cleanup (before the mock's own fixture restores
        the real value again), so nothing leaks out of the test.
        """
        for (owner, name), real in _REAL.items():
            current = vars(owner)[name]
            setattr(owner, name, real)
            self.addCleanup(setattr, owner, name, current)

    def restart_scheduler(self) -> None:
        """Restart nova-scheduler: it reads ``[filter_scheduler]`` options
        (``available_filters``, where request filters come in) at start."""
        self.scheduler.stop()
        self.scheduler = self.start_service('scheduler')

    def enable_image_type_filter(self) -> None:
        """Load nova-imgtype's request filter the stock way and turn it on.

        ``[filter_scheduler]available_filters`` gets
        ``nova_imgtype.scheduler.filters.all_filters`` next to Nova's
        default (which adds our request filters to Nova's list), the toggle
        is set, and the scheduler restarted to read them. Nova's list of
        request filters is put back afterwards.
        """
        saved = list(request_filter.ALL_REQUEST_FILTERS)
        self.addCleanup(request_filter.ALL_REQUEST_FILTERS.__setitem__,
                        slice(None), saved)
        self.flags(available_filters=[
            'nova.scheduler.filters.all_filters',
            'nova_imgtype.scheduler.filters.all_filters'],
            group='filter_scheduler')
        self.flags(filter_hosts_by_image_type_support=True,
                   group='scheduler')
        self.restart_scheduler()

    def use_real_pools(self, uri: str) -> Any:
        """Manage the computes' storage pools on the libvirtd at ``uri``.

        fakelibvirt (the harness's libvirt) has no storage pool API: the
        driver's storage connection is pointed at a real daemon. The pools
        made there are removed afterwards.

        :returns: the connection.
        """
        conn = libvirt.open(uri)
        self.addCleanup(conn.close)
        self.addCleanup(_remove_nova_pools, conn)
        self.useFixture(fixtures.MockPatch(
            'nova_imgtype.virt.libvirt.driver.LibvirtDriver.'
            '_storage_connection', return_value=conn))
        return conn

    # -- computes and their options -------------------------------------------

    def start_compute(
            self, hostname: str = 'compute1', *args: Any,
            images_type: str | None = None,
            use_cow_images: bool | None = None,
            force_raw_images: bool | None = None,
            images_type_mapping: str | None = None,
            flags: Mapping[str | None, Mapping[str, Any]] | None = None,
            **kwargs: Any) -> str:
        """Start compute ``hostname`` running ``imgtype.LibvirtDriver``.

        :param hostname: the compute's host name (also its node name).
        :param args: ServersTestBase.start_compute's other positional
            arguments (host_info, pci_info, ...), as
            ``restart_compute_service`` passes them.
        :param kwargs: ServersTestBase.start_compute's keyword arguments.
        :param images_type, use_cow_images, force_raw_images,
            images_type_mapping, flags: this compute's options, see
            :meth:`set_compute_flags`.
        :returns: the hostname.

        The options are recorded with :meth:`set_compute_flags` (merged into
        what was recorded before: ``restart_compute_service`` keeps them)
        and put in the global CONF with :meth:`apply_compute_flags` before
        the service starts. They *stay* in CONF after this returns, so
        after starting compute1 then compute2, CONF holds compute2's (as
        stock Nova's harness leaves ``CONF.host`` at the last compute
        started). What is read when the driver is created is per compute;
        what stock Nova and our driver read at call time (``images_type``
        in ``_create_image``, ``force_raw_images`` in ``fetch_to_raw``, the
        mapping in the resolver, ``CONF.host``) is whatever CONF holds
        then: run operations served by another compute inside
        ``with self.on_compute(hostname):`` (``boot_server(host=...)`` does).
        """
        self.set_compute_flags(
            hostname, images_type=images_type, use_cow_images=use_cow_images,
            force_raw_images=force_raw_images,
            images_type_mapping=images_type_mapping, flags=flags)
        self.apply_compute_flags(hostname)
        started = super().start_compute(hostname, *args, **kwargs)
        driver = self.computes[hostname].manager.driver
        self.assertIsInstance(driver, self.driver_class)
        return started

    def set_compute_flags(
            self, hostname: str, *,
            images_type: str | None = None,
            use_cow_images: bool | None = None,
            force_raw_images: bool | None = None,
            images_type_mapping: str | None = None,
            flags: Mapping[str | None, Mapping[str, Any]] | None = None
    ) -> None:
        """Record options of compute ``hostname``, without applying them.

        :param images_type: ``[libvirt]images_type``.
        :param use_cow_images: ``[DEFAULT]use_cow_images``.
        :param force_raw_images: ``[DEFAULT]force_raw_images``.
        :param images_type_mapping: ``[libvirt]images_type_mapping`` as
            written in nova.conf (e.g. ``'qcow2:qcow2'``).
        :param flags: any other options, ``{group: {option: value}}``;
            group ``None`` or ``'DEFAULT'`` is the DEFAULT group.

        ``None`` leaves an option as recorded before. Merged into
        ``self.compute_flags[hostname]``; they take effect at the next
        :meth:`apply_compute_flags` (``start_compute``,
        ``restart_compute_service``, :meth:`on_compute`).
        """
        new = _flag_dict(flags, images_type=images_type,
                         use_cow_images=use_cow_images,
                         force_raw_images=force_raw_images,
                         images_type_mapping=images_type_mapping)
        self.compute_flags.setdefault(hostname, {}).update(new)

    def apply_compute_flags(self, hostname: str) -> None:
        """Make CONF hold ``hostname``'s options, and ``CONF.host``.

        Every option recorded for *any* compute (``self.compute_flags``,
        which a test may also edit directly) gets ``hostname``'s value if it
        has one, else its baseline: the value CONF had when the option was
        first applied (its default, or what ``self.flags`` set before). An
        option given to a compute is owned by these records from then on:
        a later ``self.flags`` of it lasts only until the next apply.
        """
        for host_flags in self.compute_flags.values():
            for group, name in host_flags:
                if (group, name) not in self._flag_baseline:
                    section = getattr(CONF, group) if group else CONF
                    self._flag_baseline[(group, name)] = getattr(section,
                                                                 name)
        own = self.compute_flags.get(hostname, {})
        for (group, name), baseline in self._flag_baseline.items():
            value = own.get((group, name), baseline)
            if value is None:
                CONF.clear_override(name, group)
            else:
                CONF.set_override(name, value, group)
        CONF.set_override('host', hostname)
        self.active_compute = hostname

    @contextlib.contextmanager
    def on_compute(self, hostname: str) -> Iterator[None]:
        """Run the block with ``hostname``'s options in CONF.

        For an operation served by a compute other than the one whose
        options are active (e.g. booting onto compute1 after compute2 was
        started). The options active before are put back afterwards.

        Wait for the operation to finish *inside* the block: RPC casts are
        calls in this harness (CastAsCallFixture), but the compute manager
        still runs some work (a build, for one) in its own worker thread
        after the call returned.
        """
        previous = self.active_compute
        self.apply_compute_flags(hostname)
        try:
            yield
        finally:
            if previous is not None:
                self.apply_compute_flags(previous)

    # -- servers ------------------------------------------------------------

    def boot_server(self, image_id: str, *, host: str | None = None,
                    flavor_id: str | None = '1',
                    expected_state: str = 'ACTIVE',
                    **kwargs: Any) -> dict[str, Any]:
        """Boot a server from ``image_id`` through the API and wait for it.

        :param host: ask for this compute (admin API, microversion >= 2.74);
            when given, the block runs under :meth:`on_compute`.
        :param flavor_id: defaults to ``'1'`` (m1.tiny: 1 GiB root disk,
            no ephemeral, no swap).
        :param kwargs: passed to ``_create_server`` (``name``, ``networks``,
            ...); ``networks`` defaults to ``'none'``.
        :returns: the server as the API shows it in ``expected_state``.
        """
        kwargs.setdefault('networks', 'none')
        with (self.on_compute(host) if host else contextlib.nullcontext()):
            server: dict[str, Any] = self._create_server(
                image_uuid=image_id, flavor_id=flavor_id, host=host,
                expected_state=expected_state, **kwargs)
        return server

    # -- files --------------------------------------------------------------

    def domain_format(self, host: str, server: Mapping[str, Any] | str,
                      device: str = 'disk') -> str:
        """The format the instance's domain on ``host`` gives QEMU for its
        first disk of ``device`` (``<driver type>``): a guest's data are
        read and written in it, never in a format probed from the disk's
        bytes (a raw disk holding a qcow2 header is raw to its guest)."""
        uuid = server if isinstance(server, str) else server['id']
        conn = self.computes[host].driver._host.get_connection()
        xml = ElementTree.fromstring(
            conn.lookupByUUIDString(uuid).XMLDesc(0))
        disk = xml.find("./devices/disk[@device='%s']" % device)
        driver = disk.find('driver') if disk is not None else None
        fmt = driver.get('type') if driver is not None else None
        if not fmt:
            raise AssertionError('no format for the %s of %s on %s: %s' % (
                device, uuid, host, ElementTree.tostring(xml).decode()))
        return fmt

    def instance_path(self, server: Mapping[str, Any] | str,
                      *parts: str) -> str:
        """``<instances_path>/<uuid>[/parts...]`` of a server (or uuid)."""
        server_id = server if isinstance(server, str) else server['id']
        return os.path.join(self.instances_path, server_id, *parts)

    @property
    def base_dir(self) -> str:
        """The image cache: ``<instances_path>/_base``."""
        return os.path.join(self.instances_path,
                            CONF.image_cache.subdirectory_name)

    def cache_path(self, image_id: str) -> str:
        """Stock Nova's cached base file of an image (sha1 of its id)."""
        return os.path.join(self.base_dir,
                            imagecache.get_cache_fname(image_id))

    # -- uploads ------------------------------------------------------------

    def snapshot_and_wait(self, server: dict[str, Any], name: str) -> None:
        """Snapshot and wait for the compute's snapshot.end notification.

        Not by polling the API: the harness's one SQLite connection is shared
        by the API and the compute's snapshot thread, and polling while the
        snapshot saves its task states can lose one of those writes.
        """
        self._snapshot_server(server, name)
        self.notifier.wait_for_versioned_notifications(
            'instance.snapshot.end')
        self._wait_for_server_parameter(
            server, {'status': 'ACTIVE', 'OS-EXT-STS:task_state': None})
