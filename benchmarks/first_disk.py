"""Time to first instance disk against image size, cold and warm cache.

Images: raw and compressed qcow2 of 256 MiB, 1 GiB and 4 GiB virtual size,
whose first 40% hold non-zero data that compresses about 2:1 (half text,
half random bytes in each qcow2 cluster), the rest sparse. A raw image is
served whole (Glance streams its every byte, zeros included); a compressed
qcow2 holds about a fifth of the virtual size.

Methods, each through the real code of whom it belongs to:

* ``stock Flat (force_raw)``, ``stock Qcow2 (force_raw)``: stock Nova's
  ``nova.virt.libvirt.driver.LibvirtDriver._try_fetch_image_cache`` with
  stock ``libvirt_utils.fetch_image`` (``images.fetch_to_raw``: download,
  inspection, qcow2 -> raw conversion under ``force_raw_images``) and
  stock's ``Flat`` (a ``cp`` of the template) or ``Qcow2`` (an overlay).
* the plugin's: ``nova_imgtype``'s ``LibvirtDriver._try_fetch_image_cache``
  (the template image handler, the per-instance image backend):
  ``native`` (``images_type = qcow2``, ``images_type_mapping =
  qcow2:qcow2``: a qcow2 image cached as it is, a raw one as stock caches
  it, a qcow2 overlay on it), ``pool COW`` (the same on storage pools: a
  ``<backingStore>`` overlay volume made by the throwaway libvirtd),
  ``pool copy`` (``images_type = flat`` on storage pools, Nova's default
  ``force_raw_images``: the template made raw at download as stock makes
  it, a raw volume made by libvirt's ``createXMLFrom``: stock ``Flat``'s
  counterpart) and
  ``linking`` (``native`` with ``template_image_handler =
  volume-based-linking``: the image file is "the volume", attached through
  a fake Cinder attachment API and os-brick's real local connector, and
  linked into the cache).

Cold: an empty image cache, so the image is fetched (stock: Nova's own
``glance`` download code; plugin: the ``downloading`` handler) and
converted where the method converts, then the disk is made. Warm: the
template is cached, only the disk is made. The image service is real:
each image is uploaded to a glance-api on loopback
(:mod:`benchmarks.glance_endpoint`: file store, SQLite, no keystone), which
records its sha512, and Nova's own image API downloads it through
glanceclient over HTTP, which checks that sha512 as it reads, for stock
and plugin alike (loopback: downloads are lower bounds). The image
metadata the drivers read carry a cinder location added for linking.

Each cold round, methods alternate; per method a cold disk, then warm ones
on its template (a new instance each), the cache emptied before the cold
one, untimed, and each disk checked (format, backing file, downloads
made). ``sync`` once per image, after its files are made, and before each
cold disk, untimed: a method does not pay for what the one before it left
to write back or discard (a copy's pages, a deleted template's
blocks). Cache bytes are ``st_blocks * 512`` of what ``_base`` holds for
the image after the cold disk (a link takes none).

Cut to keep the module within ~10 minutes on 2 cores (``RUNS``): the
256 MiB images get 3 cold and 3 warm disks per method, the 1 GiB ones one
cold and 3 warm, the 4 GiB ones 3 cold and a warm one after each;
linking, whose cold disk downloads nothing, gets at least 11 cold disks
per image
(``LINKING_COLD_RUNS``), and a method whose warm disks take under half a
second gets 11 of them (:mod:`benchmarks.sampling`, in the last cold
round: a figure of a few milliseconds over 3 runs is the machine's
noise). The 4 GiB qcow2 gets 3 cold disks: there stock Flat and the pool
copy pay the same conversion to raw, whose time varies by a third from one
conversion to the next, and one cold disk each left that row to the noise
(about 90 s more). The 4 GiB raw image gets 3 too: a cold round of it
streams and hashes 4 GiB per downloading method (about 85 s), and one
such disk per method moved the native and pool COW rows by 10-12% between
two runs of the same code (``benchmarks.compare``; about 170 s more). With 3
cold disks for the 1 GiB images the module took 7 minutes here; with 3
warm ones for the 4 GiB images too, and before the cuts below, 10. The
qcow2 images are compressed with zstd
(``compression_type=zstd``), not qemu-img's default zlib, which took 10 s
per GiB of data to make here; converting one to raw costs about the same
either way (the writes dominate).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

import nova.conf
from nova import context as nova_context
from nova import objects
from nova.image import glance
from nova.virt import images
from nova.virt.libvirt import imagecache as nova_imagecache
from nova.virt.libvirt import utils as libvirt_utils
from oslo_config import fixture as config_fixture
from oslo_utils import fileutils

from benchmarks import fakes
from benchmarks import glance_endpoint
from benchmarks import sampling
from benchmarks import tables
from nova_imgtype.virt.libvirt import imagecache
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import pools
from nova_imgtype.virt.libvirt.template_handlers import downloading
from nova_imgtype.virt.libvirt.template_handlers import volume_linking
from nova_imgtype_testing import drivers
from nova_imgtype_testing import glance as glance_data
from nova_imgtype_testing import libvirtd as real

CONF = nova.conf.CONF
LABEL = 'time to first disk'
MiB = 1024 ** 2
GiB = 1024 ** 3
SIZES = (256 * MiB, GiB, 4 * GiB)
#: Share of the virtual size that holds data (percent).
DATA_PERCENT = 40
#: Disks per image and method by virtual size: (cold, warm).
RUNS = {256 * MiB: (3, 3), GiB: (1, 3), 4 * GiB: (1, 1)}
#: ... but for these images, by (virtual size, format).
IMAGE_RUNS = {(4 * GiB, 'qcow2'): (3, 1), (4 * GiB, 'raw'): (3, 1)}
#: Cold disks of ``linking`` per image at least, whatever ``RUNS`` says:
#: it downloads nothing, a cold disk costs it no more than a warm one.
LINKING_COLD_RUNS = sampling.FAST_RUNS
#: glanceclient's download chunk size.
CHUNK = 64 * 1024

STOCK_FLAT = 'stock Flat (force_raw)'
STOCK_QCOW2 = 'stock Qcow2 (force_raw)'
NATIVE = 'native (mapping qcow2:qcow2 / raw)'
POOL_COW = 'pool COW'
POOL_COPY = 'pool copy'
LINKING = 'linking'

#: Method -> the options it runs with ([libvirt] ones, then DEFAULT).
_PLUGIN = {'images_type': 'qcow2', 'images_type_mapping': 'qcow2:qcow2',
           'use_storage_pools': False}
METHODS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    STOCK_FLAT: ({'images_type': 'flat'}, {'force_raw_images': True}),
    STOCK_QCOW2: ({'images_type': 'qcow2'}, {'force_raw_images': True}),
    NATIVE: (_PLUGIN, {'force_raw_images': True}),
    POOL_COW: (dict(_PLUGIN, use_storage_pools=True),
               {'force_raw_images': True}),
    POOL_COPY: ({'images_type': 'flat', 'images_type_mapping': '',
                 'use_storage_pools': True}, {'force_raw_images': True}),
    LINKING: (_PLUGIN, {'force_raw_images': True}),
}


class _Chunks:
    """What glanceclient's ``data`` call returns: the image's chunks,
    verified against ``os_hash_value`` as they are read."""

    def __init__(self, path: str, meta: dict[str, Any]) -> None:
        self.path = path
        self.meta = meta
        self.wrapped = path

    def __iter__(self) -> Any:
        return glance_data.chunks(self.path, self.meta, CHUNK)


class _ImageService:
    """One image, served from a local file; metadata as Glance gives it
    (sha512, a cinder location for linking)."""

    def __init__(self, path: str, fmt: str, sha512: str) -> None:
        self.path = path
        self.meta = fakes.image_meta(path, fmt, sha512,
                                     cinder_location=True)
        self.image_id = self.meta['id']
        self.downloads = 0
        # Nova's real download code, on a client that reads the file.
        self.session = glance.GlanceImageServiceV2(client=self)

    def call(self, context: Any, version: int, method: str,
             args: tuple[Any, ...] = (), kwargs: Any = None) -> _Chunks:
        assert method == 'data' and args == (self.image_id,), method
        self.downloads += 1
        return _Chunks(self.path, self.meta)

    def get(self, context: Any, image_id: str, *args: Any,
            **kwargs: Any) -> dict[str, Any]:
        return dict(self.meta)

    def session_for(self, context: Any, image_id: str) -> tuple[Any, str]:
        return self.session, image_id


class _GlanceImage:
    """One image uploaded to a real glance-api (:mod:`.glance_endpoint`),
    downloaded by Nova's own image API through glanceclient over HTTP; its
    metadata as Glance gives it, plus a cinder location for linking (the
    image file is "the volume" there). Counts Nova's downloads of it."""

    def __init__(self, path: str, fmt: str,
                 endpoint: glance_endpoint.GlanceEndpoint) -> None:
        self.path = path
        self.meta = dict(endpoint.upload(path, fmt), locations=[{
            'url': 'cinder://%s' % fakes.VOLUME_ID, 'metadata': {}}])
        self.image_id = self.meta['id']
        self.downloads = 0
        self._endpoint = endpoint

    def get(self, context: Any, image_id: str, *args: Any,
            **kwargs: Any) -> dict[str, Any]:
        return dict(self.meta)

    def counting(self) -> Callable[[], None]:
        """Count Nova's downloads of the image; returns the undo."""
        download = glance.GlanceImageServiceV2.download

        def counted(session: Any, context: Any, image_id: str,
                    *args: Any, **kwargs: Any) -> Any:
            if image_id == self.image_id:
                self.downloads += 1
            return download(session, context, image_id, *args, **kwargs)

        glance.GlanceImageServiceV2.download = counted

        def undo() -> None:
            glance.GlanceImageServiceV2.download = download
        return undo

    def delete(self) -> None:
        self._endpoint.delete(self.image_id)


def _make_image(work: str, size: int) -> tuple[str, str]:
    """The raw image of ``size`` virtual bytes and its sha512.

    Its first DATA_PERCENT are data that compress about 2:1, as an OS
    image's do: each 64 KiB (a qcow2 cluster, the unit qcow2 compresses)
    is half text, half random bytes (drawn from a small pool: clusters are
    compressed one by one, a repeat across clusters is never seen). The
    rest is sparse.
    """
    path = os.path.join(work, 'image-%d.raw' % size)
    cluster = 64 * 1024
    line = b'nova-imgtype benchmark data: the quick brown fox jumps over.\n'
    text = (line * (cluster // len(line) + 1))[:cluster // 2 - 8]
    noise = [os.urandom(cluster // 2) for _ in range(61)]
    clusters = size * DATA_PERCENT // 100 // cluster
    with open(path, 'wb') as f:
        for i in range(clusters):
            f.write(text + i.to_bytes(8, 'big') + noise[i % len(noise)])
        f.truncate(size)
    return path, fakes.sha512_of(path)


class _Bench:
    """The drivers, pools and cache of one benchmark run."""

    def __init__(self, work: str, conn: Any) -> None:
        from nova.tests import fixtures as nova_fixtures
        from nova.virt import fake
        from nova.virt.libvirt import driver as stock_driver

        from nova_imgtype.virt.libvirt import driver as imgtype_driver

        self.work = work
        self.instances = os.path.join(work, 'instances')
        self.base = os.path.join(self.instances, '_base')
        os.makedirs(self.base)
        self.cfg = config_fixture.Config(CONF)
        self.cfg.setUp()
        self.cfg.config(instances_path=self.instances, host='bench1',
                        use_cow_images=True)
        self.cfg.config(lock_path=os.path.join(work, 'locks'),
                        group='oslo_concurrency')
        self.fixtures = [nova_fixtures.LibvirtFixture(),
                         nova_fixtures.PrivsepFixture()]
        for fix in self.fixtures:
            fix.setUp()
        self.storage = pools.StoragePools(lambda: conn)
        self.made_pools = [
            self.storage.ensure(spec, autostart=False)
            for spec in pool_specs.default_specs(self.instances)]
        self.cinder = fakes.Cinder()
        self.drivers: dict[str, Any] = {}
        for method in METHODS:
            self.configure(method)
            if method.startswith('stock'):
                drv = stock_driver.LibvirtDriver(fake.FakeVirtAPI(), False)
            else:
                drv = imgtype_driver.LibvirtDriver(fake.FakeVirtAPI(), False)
                drivers.use_pools(drv, self.storage)
                if method == LINKING:
                    handler = drv._template_handler
                    assert isinstance(
                        handler,
                        volume_linking.VolumeLinkingTemplateImageHandler)
                    # The fake of Cinder's attachment API (no real Cinder).
                    handler.volume_api = self.cinder  # type: ignore[assignment]
            self.drivers[method] = drv
        self.linker = self.drivers[LINKING]._template_handler
        # A request's context, with a token for the image endpoint (which
        # checks none).
        self.context = nova_context.get_admin_context()
        self.context.auth_token = 'benchmark'

    def configure(self, method: str) -> None:
        libvirt_opts, default_opts = METHODS[method]
        self.cfg.config(group='libvirt', **libvirt_opts)
        self.cfg.config(**default_opts)
        self.cfg.config(group='image_cache', template_image_handler=(
            'volume-based-linking' if method == LINKING else 'downloading'))

    def close(self) -> None:
        for pool in reversed(self.made_pools):
            pool.destroy()
            pool.undefine()
        for fix in reversed(self.fixtures):
            fix.cleanUp()
        self.cfg.cleanUp()

    # -- one disk ---------------------------------------------------------

    def make_disk(self, method: str, svc: Any,
                  size: int) -> tuple[Any, Any]:
        """What ``_create_image`` does for the root disk of a boot."""
        drv = self.drivers[method]
        fmt = svc.meta['disk_format']
        inst = objects.Instance(
            uuid=str(uuid.uuid4()), image_ref=svc.image_id, task_state=None,
            vm_state='building', trusted_certs=None, migration_context=None,
            system_metadata={'image_disk_format': fmt})
        if not method.startswith('stock'):
            # As the driver's spawn() records it.
            drv._resolver.record(inst, drv._resolver.decide(fmt))
        fileutils.ensure_tree(libvirt_utils.get_instance_path(inst))
        disk = drv.image_backend.by_name(inst, 'disk')
        drv._try_fetch_image_cache(
            disk, libvirt_utils.fetch_image,
            self.context,
            nova_imagecache.get_cache_fname(svc.image_id), svc.image_id,
            inst, size)
        return inst, disk

    def remove_disk(self, method: str, inst: Any) -> None:
        if method in (POOL_COW, POOL_COPY):
            pool = self.storage.get(pool_specs.DISKS_POOL)
            pool.storageVolLookupByName(
                pool_specs.volume_name(inst.uuid, 'disk')).delete(0)
        shutil.rmtree(libvirt_utils.get_instance_path(inst))

    def templates(self) -> list[str]:
        return sorted(os.path.join(self.base, name)
                      for name in os.listdir(self.base)
                      if not name.startswith('.'))

    def clear_cache(self) -> None:
        for path in self.templates():
            # Releases a linked template's attachment; deletes a file.
            self.linker.remove_image(path)
        assert not self.templates() and not self.cinder.attachments
        self.storage.refresh(pool_specs.BASE_POOL)

    def cache_bytes(self) -> int:
        return sum(os.lstat(p).st_blocks * 512 for p in self.templates())

    def check(self, method: str, svc: Any, disk: Any,
              template: bool) -> None:
        """Untimed: what was measured is what was meant (the disk, and
        with ``template`` the cache)."""
        fmt = svc.meta['disk_format']
        info = real.qemu_img_info(disk.path)
        templates = self.templates()
        assert len(templates) == 1, templates
        if method in (STOCK_FLAT, POOL_COPY):
            assert info['format'] == 'raw', info
            assert 'backing-filename' not in info, info
        else:
            assert info['format'] == 'qcow2', info
            assert info['full-backing-filename'] == templates[0], info
        if not template:
            return
        template_fmt = real.qemu_img_info(templates[0])['format']
        if method.startswith('stock') or method == POOL_COPY:
            # force_raw_images, for what the mapping does not keep.
            assert template_fmt == 'raw', template_fmt
        else:
            assert template_fmt == fmt, (method, template_fmt)
        if method == LINKING:
            assert os.path.realpath(templates[0]) == svc.path, templates
        elif fmt == 'qcow2' and method != POOL_COPY and \
                not method.startswith('stock'):
            assert templates[0].endswith(imagecache.native_cache_fname(
                svc.image_id, 'qcow2')), templates


def _image_label(size: int, fmt: str) -> str:
    if size >= GiB:
        return '%d GiB %s' % (size // GiB, fmt)
    return '%d MiB %s' % (size // MiB, fmt)


def _measure(bench: _Bench, svc: Any,
             size: int) -> tuple[list[dict[str, Any]], float]:
    """The rows of one image, and the seconds timed."""
    fmt = svc.meta['disk_format']
    cold_runs, warm_runs = IMAGE_RUNS.get((size, fmt),
                                          RUNS.get(size, (3, 3)))
    times: dict[tuple[str, str], list[float]] = {
        (cache, method): [] for method in METHODS
        for cache in ('cold', 'warm')}
    cached: dict[str, int] = {}

    def timed(method: str) -> tuple[float, Any, Any]:
        start = time.perf_counter()
        inst, disk = bench.make_disk(method, svc, size)
        return time.perf_counter() - start, inst, disk

    # Each cold disk is followed by warm ones on its template.
    warm_each = -(-warm_runs // cold_runs)
    linking_each = -(-max(cold_runs, LINKING_COLD_RUNS) // cold_runs)
    for run in range(cold_runs):
        # The last round samples fast warm disks more (:mod:`.sampling`).
        last = run == cold_runs - 1
        for method in METHODS:
            bench.configure(method)
            for _cold in range(linking_each if method == LINKING else 1):
                bench.clear_cache()
                # Untimed: what the previous method left to write back (a
                # copy's pages, a deleted template's discards) is not this
                # method's to pay.
                os.sync()
                downloads = svc.downloads
                seconds, inst, disk = timed(method)
                times['cold', method].append(seconds)
                assert svc.downloads == downloads + (method != LINKING)
                bench.check(method, svc, disk, template=True)
                cached[method] = bench.cache_bytes()
                bench.remove_disk(method, inst)
            warm = 0
            while warm < warm_each or (
                    last and sampling.more(times['warm', method], warm_runs)):
                warm += 1
                seconds, inst, disk = timed(method)
                times['warm', method].append(seconds)
                assert svc.downloads == downloads + (method != LINKING), (
                    'a warm cache downloaded')
                bench.check(method, svc, disk, template=False)
                bench.remove_disk(method, inst)
    bench.clear_cache()
    rows = []
    for cache in ('cold', 'warm'):
        reference = statistics.median(times[cache, STOCK_QCOW2])
        flat = statistics.median(times[cache, STOCK_FLAT])
        for method in METHODS:
            median = statistics.median(times[cache, method])
            rows.append({
                'benchmark': LABEL,
                'image': _image_label(size, fmt),
                'virtual_bytes': size,
                'format': fmt,
                'data_bytes': size * DATA_PERCENT // 100 // MiB * MiB,
                'file_bytes': os.path.getsize(svc.path),
                'cache': cache,
                'method': method,
                'runs': len(times[cache, method]),
                'median_s': round(median, 4),
                'vs_stock_qcow2': round(median / reference, 3),
                'vs_stock_flat': round(median / flat, 3),
                'cache_bytes': cached[method],
            })
    return rows, sum(sum(t) for t in times.values())


def _patch_image_apis(svc: Any) -> Callable[[], None]:
    """Serve ``svc`` through stock's and the handlers' image APIs; returns
    the undo."""
    saved = []
    patches: list[tuple[str, Any]] = [('get', svc.get)]
    if hasattr(svc, 'session_for'):
        patches.append(('_get_session_and_image_id', svc.session_for))
    for api in {id(a): a for a in (images.IMAGE_API, downloading.IMAGE_API,
                                   volume_linking.IMAGE_API)}.values():
        for name, fn in patches:
            saved.append((api, name, vars(api).get(name)))
            setattr(api, name, fn)

    def undo() -> None:
        for api, name, old in reversed(saved):
            if old is None:
                delattr(api, name)
            else:
                setattr(api, name, old)
    return undo


@contextlib.contextmanager
def running(prefix: str) -> Iterator[_Bench]:
    """The drivers of a run on a throwaway libvirtd, in a work directory
    named ``prefix``; os-brick's privileged calls in this process (we are
    root). All of it gone afterwards."""
    import libvirt
    from os_brick import privileged

    objects.register_all()
    # Errors still raise; libvirt's default handler would also print the
    # expected ones (a volume looked up before it is made).
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    daemon = real.start_libvirtd()
    work = tempfile.mkdtemp(prefix=prefix, dir='/var/tmp')
    conn = None
    bench = None
    privileged.default.set_client_mode(False)
    try:
        conn = libvirt.open(daemon.uri)
        bench = _Bench(work, conn)
        yield bench
    finally:
        privileged.default.set_client_mode(True)
        if bench is not None:
            bench.close()
        if conn is not None:
            conn.close()
        daemon.stop()
        shutil.rmtree(work, ignore_errors=True)


def run() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with running('bench-first-disk-') as bench:
        endpoint = glance_endpoint.GlanceEndpoint(bench.work)
        try:
            endpoint.start()
            bench.cfg.config(group='glance', endpoint_override=endpoint.url)
            for size in SIZES:
                rows += _measure_size(bench, endpoint, size)
        finally:
            endpoint.stop()
    return rows


def _measure_size(bench: _Bench, endpoint: glance_endpoint.GlanceEndpoint,
                  size: int) -> list[dict[str, Any]]:
    """The rows of the raw and qcow2 images of ``size``."""
    rows: list[dict[str, Any]] = []
    raw, _ = _make_image(bench.work, size)
    qcow2 = raw[:-len('.raw')] + '.qcow2'
    real.qemu_img('convert', '-c', '-o', 'compression_type=zstd',
                  '-f', 'raw', '-O', 'qcow2', raw, qcow2)
    for fmt, path in (('raw', raw), ('qcow2', qcow2)):
        svc = _GlanceImage(path, fmt, endpoint)
        bench.cinder.device = path
        undo = _patch_image_apis(svc)
        uncount = svc.counting()
        # No writeback of the image files during the runs; the runs leave
        # none to each other (each cold disk starts after a sync).
        os.sync()
        start = time.perf_counter()
        try:
            measured, timed = _measure(bench, svc, size)
        finally:
            uncount()
            undo()
            svc.delete()
        rows += measured
        sys.stderr.write(
            'first-disk: %s measured in %.1f s (%.1f s timed)\n' % (
                _image_label(size, fmt), time.perf_counter() - start,
                timed))
    os.unlink(raw)
    os.unlink(qcow2)
    return rows


def to_markdown(rows: list[dict[str, Any]]) -> str:
    """The time to first disk section of ``results/latest.md``."""
    lines = [
        '## Time to first instance disk, against image size', '',
        'Raw and compressed (zstd) qcow2 images whose first 40% hold data '
        'compressing about 2:1, the rest sparse. Cold: an empty image '
        'cache; '
        'the image downloaded from a real glance-api on loopback (file '
        "store) by Nova's image API and glanceclient over HTTP (which checks "
        'the sha512 Glance recorded as it reads; fsyncs included: stock '
        'syncs every download, the plugin what it keeps, not a download '
        'it converts to raw and deletes) by '
        'stock `images.fetch_to_raw` (qcow2 converted to raw: '
        '`force_raw_images`) or by the plugin\'s `downloading` handler, '
        'then the disk made. `linking` attaches the image file as the '
        "volume (os-brick's local connector, fake Cinder API) and links "
        'it. Warm: the template cached, only the disk made. Stock: stock '
        "Nova's driver, `Flat` (a cp of the template) and `Qcow2` (an "
        'overlay). `native`: `images_type_mapping = qcow2:qcow2` (a raw '
        'image is cached as stock caches it), a qcow2 overlay; `pool COW`: '
        'the same as an overlay volume on storage pools; `pool copy`: '
        '`images_type = flat` on pools (Nova\'s default '
        '`force_raw_images`: the template raw, as stock\'s), copied by '
        "libvirt's `createXMLFrom` into a raw volume. Methods alternated; "
        'median of '
        '`runs` disks (fewer for the larger images, to keep within '
        'time); '
        '`vs stock Qcow2` and `vs stock Flat` are ratios of medians for '
        'the same image and cache: an overlay (native, pool COW, linking) '
        'is stock Qcow2\'s counterpart, a copy (pool copy) stock Flat\'s; '
        'cache bytes are what `_base` holds for the image (see '
        '`benchmarks/first_disk.py`).',
        '',
        tables.markdown(
            ['image', 'file MiB', 'cache', 'method', 'runs', 'median s',
             'vs stock Qcow2', 'vs stock Flat', 'cache bytes'],
            ([r['image'], '%.1f' % (r['file_bytes'] / MiB), r['cache'],
              r['method'], '%d' % r['runs'], '%.4f' % r['median_s'],
              '%.3f' % r['vs_stock_qcow2'],
              '%.3f' % r['vs_stock_flat'] if 'vs_stock_flat' in r
              else '-', '%d' % r['cache_bytes']] for r in rows),
            left=['image', 'cache', 'method'])]
    by_image: dict[str, dict[str, int]] = {}
    for r in rows:
        if r['cache'] == 'cold':
            by_image.setdefault(r['image'], {})[r['method']] = (
                r['cache_bytes'])
    cache_rows = []
    for image, cached in by_image.items():
        stock, native = cached.get(STOCK_QCOW2), cached.get(NATIVE)
        if stock is None or native is None:
            continue
        cache_rows.append([image, '%d' % stock, '%d' % native,
                           '%.3f' % (native / stock) if stock else '-'])
    lines += ['', '### Cache bytes per image, stock against native', '',
              tables.markdown(
                  ['image', 'stock (force_raw)', 'native', 'native / stock'],
                  cache_rows, left=['image'])]
    return '\n'.join(lines) + '\n'
