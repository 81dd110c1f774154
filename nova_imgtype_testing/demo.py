"""The demo (``make demo``, ``python -m nova_imgtype_testing``): the plugin
in a whole (in-process) stock Nova.

Runs stock Nova 34 in one process, the way its own functional tests do: API,
conductor, scheduler (nova-imgtype's request filter loaded through
``[filter_scheduler]available_filters``, the toggle on) and real placement,
with three compute nodes on ``imgtype.LibvirtDriver``, each configured
differently. Small real images are made on the fly with ``qemu-img`` and
served by the in-process image service; instance disks are made for real
(qemu-img, files, and storage pools and volumes on a throwaway libvirtd;
libvirt *domains* are the harness's fakes). Then the same images boot on a
compute node running stock Nova's ``libvirt.LibvirtDriver`` with stock
options, without the request filter, and a table shows both side by side.

Only what the harness itself fakes is fake: libvirt domains (fakelibvirt)
and Glance's API (Nova's GlanceFixture, serving the real image bytes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import statistics
import sys
import tempfile
import time
import unittest
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any
from typing import TextIO

from nova.virt.libvirt import imagecache as nova_imagecache

from nova_imgtype import traits as traits_mod
from nova_imgtype.virt.libvirt import backends
from nova_imgtype.virt.libvirt import mapping as mapping_mod

#: The nodes of the plugin's cloud: name -> (what it is, its options).
NODES: dict[str, tuple[str, dict[str, Any]]] = {
    'node-mapped': (
        'images_type=raw, images_type_mapping=qcow2:qcow2',
        {'images_type': 'raw', 'images_type_mapping': 'qcow2:qcow2',
         'force_raw_images': True}),
    'node-pools': (
        'images_type=qcow2 on storage pools, images_type_mapping='
        'qcow2:qcow2',
        {'images_type': 'qcow2', 'images_type_mapping': 'qcow2:qcow2',
         'force_raw_images': True,
         'flags': {'libvirt': {'use_storage_pools': True}}}),
    'node-convert': (
        'images_type=raw, no mapping (converts like stock)',
        {'images_type': 'raw', 'force_raw_images': True}),
}
STOCK_NODE = 'stock-node'
STOCK_DESCRIPTION = ('stock libvirt.LibvirtDriver, stock options '
                     '(images_type=default, force_raw_images=True)')

#: The images booted: disk_format -> (MiB of virtual size, MiB of data).
IMAGES: dict[str, tuple[int, int]] = {
    'raw': (64, 48),
    'qcow2': (512, 384),
    'ploop': (16, 8),
}

MiB = 1024 * 1024

#: Boots of each image on a given node (each from its own copy of the
#: image, so that each is a first boot on an empty cache): the time to
#: make the disks is their median, shown with its spread.
RUNS = 3


@dataclasses.dataclass
class Row:
    """The boots of one image asked for one node (or any): what was asked
    and what happened."""

    cloud: str
    image: str
    requested: str
    host: str = '-'
    status: str = ''
    backend: str = '-'
    template: str = '-'
    converted: str = '-'
    cache_bytes: int | None = None
    prep: list[float] = dataclasses.field(default_factory=list)
    traits: str = '-'


def _write_image_data(path: str, virtual_mb: int, data_mb: int) -> None:
    """A raw disk of ``virtual_mb`` MiB whose first ``data_mb`` MiB hold
    compressible, non-zero data (text, as file systems mostly hold), the
    rest sparse: what a small cloud image looks like."""
    line = b'nova-imgtype demo data: the quick brown fox jumps over it.\n'
    block = (line * (MiB // len(line) + 1))[:MiB]
    with open(path, 'wb') as f:
        for i in range(data_mb):
            f.write(block[:-8] + i.to_bytes(8, 'big'))
        f.truncate(virtual_mb * MiB)


#: Formats every libvirt node boots (raw bytes): left out of the table.
_EVERYWHERE = {'aki', 'ami', 'ari', 'iso'}


def _traits_text(traits: set[str]) -> str:
    """The host's image-type traits, short: the formats it boots (but
    those every node boots) and those it uses natively."""
    formats = sorted(set(mapping_mod.SOURCE_FORMATS) - _EVERYWHERE)
    boots = [f for f in formats if traits_mod.image_type_trait(f) in traits]
    native = [f for f in formats if traits_mod.native_trait(f) in traits]
    return 'boots %s; native %s' % (','.join(boots) or '-',
                                     ','.join(native) or '-')


def make_demo_case(stock: bool, rows: list[Row],
                   progress: Callable[[str], None],
                   libvirt_uri: str | None) -> unittest.TestCase:
    """A TestCase of Nova's harness whose one test runs one cloud's boots.

    :param stock: the stock cloud (stock driver and options, no request
        filter) instead of the plugin's three nodes.
    :param rows: where the boots are recorded.
    :param libvirt_uri: the daemon holding the pools of ``node-pools``.
    """
    # Imported here: the harness pulls in Nova's test fixtures, which only
    # the demo's run needs.
    import fixtures
    from nova import context as nova_context
    from nova import objects
    from nova.tests.functional.api import client as api_client
    from nova.virt.libvirt import driver as stock_driver

    from nova_imgtype.virt.libvirt import pool_specs
    from nova_imgtype.virt.libvirt import resolver as resolver_mod
    from nova_imgtype_testing import functional

    class DemoCloud(functional.ImgtypeServersTestBase):
        if stock:
            driver_class = stock_driver.LibvirtDriver

        def _setup_compute_service(self) -> None:
            if stock:
                self.flags(compute_driver='libvirt.LibvirtDriver')
            else:
                super()._setup_compute_service()

        def start_node(self, host: str, **options: Any) -> None:
            self.start_compute(host, **options)
            # The harness has one CONF for all computes: a build runs with
            # the options of the compute that builds it, whichever host
            # the scheduler chose.
            manager = self.computes[host].manager
            build = manager._do_build_and_run_instance

            def build_on_node(*args: Any, **kwargs: Any) -> Any:
                with self.on_compute(host):
                    return build(*args, **kwargs)

            manager._do_build_and_run_instance = build_on_node

        def setUp(self) -> None:
            super().setUp()
            self.flags(instances=100, cores=100, ram=100 * 1024,
                       group='quota')
            self.prep: dict[str, float] = {}
            real_create = vars(stock_driver.LibvirtDriver)['_create_image']

            def timed(drv: Any, context: Any, instance: Any,
                      *args: Any, **kwargs: Any) -> Any:
                start = time.perf_counter()
                try:
                    return real_create(drv, context, instance, *args,
                                       **kwargs)
                finally:
                    self.prep[instance.uuid] = time.perf_counter() - start

            self.useFixture(fixtures.MonkeyPatch(
                'nova.virt.libvirt.driver.LibvirtDriver._create_image',
                timed))
            if stock:
                return
            self.enable_image_type_filter()
            if libvirt_uri:
                self.conn = self.use_real_pools(libvirt_uri)

        def serve(self, fmt: str, copy: int) -> dict[str, Any]:
            virtual_mb, data_mb = IMAGES[fmt]
            raw = os.path.join(self._image_dir, 'demo-%s.raw' % fmt)
            if not os.path.exists(raw):
                _write_image_data(raw, virtual_mb, data_mb)
            return self.serve_file(raw, fmt, name='demo-%s-%d' % (fmt, copy),
                                   virtual_size=virtual_mb * MiB,
                                   compressed=fmt == 'qcow2')

        def _node_instances_path(self, host: str) -> str:
            return os.path.join(self.instances_path, host)

        def runTest(self) -> None:
            nodes = ({STOCK_NODE: (STOCK_DESCRIPTION, {})} if stock
                     else NODES)
            for host, (_what, options) in nodes.items():
                progress('starting %s: %s' % (host, _what))
                options = dict(options)
                flags = {k: dict(v) for k, v in
                         options.pop('flags', {}).items()}
                # Each node its own instances_path: its own image cache.
                flags.setdefault('DEFAULT', {})['instances_path'] = (
                    self._node_instances_path(host))
                os.makedirs(self._node_instances_path(host))
                self.start_node(host, flags=flags, **options)
            # Each boot on a given node from its own copy of the image: a
            # first boot each time. "Any host" (the scheduler's choice,
            # one boot) shows where an image can go; the stock cloud has
            # one node, which every boot there gets.
            copies = {fmt: [self.serve(fmt, n) for n in range(RUNS)]
                      for fmt in IMAGES}
            requests: list[tuple[str, str | None]] = [
                (fmt, None) for fmt in IMAGES]
            if not stock:
                requests += [(fmt, host) for fmt in IMAGES for host in nodes]
            for n, (fmt, target) in enumerate(requests, 1):
                runs = RUNS if (stock or target) else 1
                progress('[%d/%d] boot %s image on %s%s' % (
                    n, len(requests), fmt, target or 'any host',
                    ' (%d times)' % runs if runs > 1 else ''))
                row = Row('nova-imgtype' if not stock else 'stock Nova',
                          '%s (%d MiB)' % (fmt, IMAGES[fmt][0]),
                          target or 'any')
                rows.append(row)
                for image in copies[fmt][:runs]:
                    if not self._boot(image, target, row):
                        break

        def _boot(self, image: dict[str, Any], host: str | None,
                  row: Row) -> bool:
            """One boot of ``image`` into ``row``; whether it went ACTIVE
            (the first one fills the row, each adds its time)."""
            body = self._build_server(None, image['id'], '1', 'none', None,
                                      host)
            try:
                server = self._wait_done(
                    self.admin_api.post_server({'server': body}))
            except api_client.OpenStackApiException as e:
                row.status = 'API: %s' % e
                return False
            row.status = server['status']
            if server['status'] != 'ACTIVE':
                fault = server.get('fault', {}).get('message', '')
                # "Build of instance <uuid> aborted: <why>": the why.
                why = fault.rpartition(' aborted: ')[2]
                row.status = 'ERROR: %s' % why.strip().replace(
                    'Image %s is' % image['id'], 'image is')
                return False
            if server['id'] in self.prep:
                row.prep.append(self.prep[server['id']])
            if row.host != '-':
                return True
            row.host = server['OS-EXT-SRV-ATTR:host']
            row.traits = _traits_text(set(self._get_provider_traits(
                self._get_provider_uuid_by_host(row.host))))
            with self.on_compute(row.host):
                inst = self._instance(server['id'])
                sysmeta = inst.system_metadata
                storage = sysmeta.get(resolver_mod.SYSMETA_STORAGE, '')
                # Stock: images_type, as stock resolves 'default'.
                row.backend = sysmeta.get(
                    resolver_mod.SYSMETA_BACKEND, backends.resolve_name(
                        functional.CONF.libvirt.images_type,
                        functional.CONF.use_cow_images))
                if storage == resolver_mod.POOLS:
                    row.backend += ' (pool)'
                disk = self._root_disk(row.host, server['id'], storage)
                template = self._template(row.host, image['id'], disk)
            if template and os.path.exists(template):
                tfmt = functional.qemu_img_info(template)['format']
                row.template = tfmt
                row.converted = ('yes' if tfmt != image['disk_format']
                                 else 'no')
                row.cache_bytes = os.stat(template).st_blocks * 512
            return True

        def _wait_done(self, server: dict[str, Any]) -> dict[str, Any]:
            """The server once its build is over (ACTIVE or ERROR)."""
            for _ in range(600):
                server = self.admin_api.get_server(server['id'])
                if (server['status'] in ('ACTIVE', 'ERROR') and
                        not server.get('OS-EXT-STS:task_state')):
                    return server
                time.sleep(0.1)
            raise AssertionError('server %s still building' % server['id'])

        def _instance(self, server_id: str) -> Any:
            return objects.Instance.get_by_uuid(
                nova_context.get_admin_context(), server_id,
                expected_attrs=['system_metadata'])

        def _root_disk(self, host: str, server_id: str, storage: str) -> str:
            if storage == resolver_mod.POOLS:
                pool = self.conn.storagePoolLookupByName(
                    pool_specs.DISKS_POOL)
                return str(pool.storageVolLookupByName(
                    pool_specs.volume_name(server_id, 'disk')).path())
            return os.path.join(self._node_instances_path(host), server_id,
                                'disk')

        def _template(self, host: str, image_id: str,
                      disk: str) -> str | None:
            """The image cache file the disk was made from."""
            if not os.path.exists(disk):
                return None     # a volume of libvirt's test driver
            backing = functional.qemu_img_info(disk).get(
                'full-backing-filename')
            if backing:
                return str(backing)
            # A copy (flat): the cache file of the image.
            base = os.path.join(self._node_instances_path(host), '_base')
            stock_name = nova_imagecache.get_cache_fname(image_id)
            for name in sorted(os.listdir(base)):
                if name.startswith(stock_name) and not name.endswith(
                        '.part'):
                    return os.path.join(base, name)
            return None

    return DemoCloud('runTest')


#: The widest the table may be (a terminal of 120 columns).
WIDTH = 120


def _errors(rows: list[Row]) -> list[str]:
    """The error messages of the rows, each once, in order: the table
    names them by number."""
    return list(dict.fromkeys(r.status for r in rows
                              if r.status != 'ACTIVE'))


def prep_text(times: list[float]) -> str:
    """The time to make the disks: one boot's, or the median of several
    with their range."""
    if not times:
        return '-'
    if len(times) == 1:
        return '%.2f s' % times[0]
    return '%.2f s (%.2f-%.2f)' % (statistics.median(times), min(times),
                                   max(times))


def format_rows(rows: list[Row]) -> str:
    """The table: one line per image and node asked, grouped by image,
    stock's next to ours; errors by number (:func:`notes`)."""
    from nova_imgtype.cmd.manage import format_table

    def mib(n: int | None) -> str:
        return '-' if n is None else '%.1f MiB' % (n / MiB)

    errors = _errors(rows)
    order = {image: n for n, image in
             enumerate(dict.fromkeys(r.image for r in rows))}
    table = []
    def cache_file(r: Row) -> str:
        if r.template == '-':
            return '-'
        return r.template + (', converted' if r.converted == 'yes' else '')

    for r in sorted(rows, key=lambda r: order[r.image]):
        table.append({
            'image': r.image.split(' ')[0], 'asked': r.requested,
            'host': r.host,
            'result': ('ACTIVE' if r.status == 'ACTIVE' else
                       'ERROR (%d)' % (errors.index(r.status) + 1)),
            'backend': r.backend, 'cache file': cache_file(r),
            'cache': mib(r.cache_bytes), 'disk prep': prep_text(r.prep)})
    return format_table(table)


def notes(rows: list[Row]) -> list[str]:
    """What the table's numbers and columns mean."""
    lines = ['(%d) %s' % (n, error)
             for n, error in enumerate(_errors(rows), 1)]
    traits = {r.host: r.traits for r in rows if r.host != '-'}
    if traits:
        lines.append('Image-type traits each host reports to placement:')
        lines += ['  %-13s %s' % (host, text)
                  for host, text in sorted(traits.items())]
    return lines


def collect(progress: Callable[[str], None]) -> tuple[list[Row], list[str]]:
    """Boot the matrix on both clouds.

    :returns: the rows, and the tracebacks of whatever went wrong.
    """
    import libvirt

    from nova_imgtype_testing import libvirtd
    # libvirt's default handler prints every error (a pool looked up
    # before it is made, a socket polled before it is there) on stderr.
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    progress('starting a throwaway libvirtd for the storage pools')
    daemon = None
    try:
        daemon = libvirtd.start_libvirtd()
        uri = daemon.uri
        progress('libvirtd up (%s mode): %s' % (daemon.mode, uri))
    except libvirtd.DaemonStartError as e:
        uri = 'test:///default'
        progress('!!! NO LIBVIRTD COULD START: node-pools uses the libvirt '
                 'TEST DRIVER (test:///default): its volumes hold no data '
                 'and are not measured. %s' % str(e).splitlines()[0])
    rows: list[Row] = []
    failed: list[str] = []
    try:
        # The stock cloud has no request filter and no imgtype driver.
        for stock in (False, True):
            progress('--- %s ---' % ('stock Nova' if stock else
                                     'nova-imgtype'))
            result = unittest.TestResult()
            case = make_demo_case(stock, rows, progress, uri)
            try:
                case.run(result)
            except KeyboardInterrupt:
                # unittest leaves a test's clean-ups to its end, which an
                # interrupt skips: the services, the files and the pools
                # are removed here.
                case.doCleanups()
                raise
            failed += [trace for _case, trace in
                       result.errors + result.failures]
    finally:
        if daemon is not None:
            daemon.stop()
    return rows, failed


@contextlib.contextmanager
def _logged_to(path: str) -> Iterator[None]:
    """Within the block, every log record (Nova's, its libraries',
    warnings) and whatever they or libvirt print on the standard output or
    error go to the file at ``path`` instead of the terminal: the demo
    prints its progress and its results, nothing else."""
    log = open(path, 'a', buffering=1)  # noqa: SIM115 - closed below
    handler = logging.StreamHandler(log)
    handler.setFormatter(logging.Formatter(
        '%(asctime)s %(levelname)s %(name)s %(message)s'))
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    for old in handlers:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    streams = sys.stdout, sys.stderr
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log
    try:
        yield
    finally:
        log.flush()
        sys.stdout, sys.stderr = streams
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        logging.captureWarnings(False)
        root.removeHandler(handler)
        for old in handlers:
            root.addHandler(old)
        root.setLevel(level)
        log.close()


def run(out: TextIO | None = None, log: bool = True) -> int:
    """Run the demo; print progress and the table to ``out`` (the terminal
    by default), and Nova's log to a file it names (unless ``log`` is
    False).

    :returns: 0, 1 if anything went wrong (said after the table), 130
        when interrupted (one line, once everything is cleaned up).
    """
    if out is None:
        # The terminal as it is now: the standard output goes to the log
        # while the demo runs.
        out = os.fdopen(os.dup(sys.stdout.fileno()), 'w', buffering=1)
    started = time.perf_counter()

    def progress(msg: str) -> None:
        assert out is not None
        out.write('[%5.1fs] %s\n' % (time.perf_counter() - started, msg))
        out.flush()

    quiet: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if log:
        fd, path = tempfile.mkstemp(prefix='nova-imgtype-demo-',
                                    suffix='.log')
        os.close(fd)
        progress("Nova's log: %s" % path)
        quiet = _logged_to(path)
    try:
        with quiet:
            rows, failed = collect(progress)
    except KeyboardInterrupt:
        out.write('\nInterrupted: the demo stopped and removed what it '
                  'made.\n')
        return 130
    out.write('\nNodes of the nova-imgtype cloud (request filter on):\n')
    for host, (what, _options) in NODES.items():
        out.write('  %-13s %s\n' % (host, what))
    out.write('  %-13s %s\n' % (STOCK_NODE, STOCK_DESCRIPTION))
    out.write('Images: %s.\n\n' % ', '.join(
        '%s (%d MiB, %d MiB of data)' % (fmt, size, data)
        for fmt, (size, data) in IMAGES.items()))
    out.write(format_rows(rows) + '\n')
    for line in notes(rows):
        out.write(line + '\n')
    out.write(
        '\n"asked" any: the scheduler\'s choice among the nodes that can '
        'serve the image (they weigh the same here, so the choice may '
        'differ from run to run); a node: the image booted there %d '
        'times, '
        'each from its own copy of the image (a first boot each time); '
        'stock-node is stock Nova\'s only node. "disk prep" is the time to '
        'make the instance disks (download and conversion included): the '
        'median of those boots (fastest-slowest), one boot for "any". '
        '"cache file" is the format of the image cache file the disk was '
        'made from (and whether the image was converted into it), "cache" '
        'what it takes on disk. Every node boots aki, ami, ari and iso '
        'images (raw bytes). Finished in %.0f s.\n'
        % (RUNS, time.perf_counter() - started))
    for trace in failed:
        out.write('\nThe demo failed:\n%s\n' % trace)
    return 1 if failed or not rows else 0
