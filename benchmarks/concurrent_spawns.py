"""1, 4 and 16 concurrent spawns of one image: downloads made and wall time.

N instances of one image (128 MiB qcow2, every byte random data) are
spawned at once on a host with an empty image cache: each does what
``_create_image`` does for its root disk, the driver's
``_try_fetch_image_cache`` with stock ``libvirt_utils.fetch_image``, in
its own native thread (a ``ThreadPoolExecutor``, as Nova 34's
nova-compute runs concurrent builds). Wall time is from the first spawn
started to the last root disk made.

- stock: stock Nova's ``LibvirtDriver`` and its Qcow2 backend:
  ``Image.cache()`` takes stock's external lock per template and fetches
  with ``libvirt_utils.fetch_image`` (``images.fetch_to_raw``: download,
  format inspection, qemu-img, and with Nova's default
  ``force_raw_images = True`` a conversion to raw).
- plugin: our ``LibvirtDriver`` with ``images_type = qcow2`` and
  ``images_type_mapping = qcow2:qcow2``: its ``_try_fetch_image_cache``
  goes through the ``downloading`` template handler (its own lock per
  template, inspection, the image kept as qcow2).

Real: the drivers' backends, qemu-img, oslo.concurrency's external locks,
fsync'd files on the local disk. Fake: the image service (``IMAGE_API.get`` and
``download`` serve the image file in glanceclient's 64 KiB chunks, verified by
glanceclient's sha512 check as they are read, paced to 1 Gbit/s with
sleeps, as a network would be, so that the spawns overlap the download: a real
endpoint on loopback would deliver it faster than any network, and the point
here is the overlap) and the driver's libvirt module (no domain is started:
only disks are made). Configurations alternate in one run; medians of several
runs, each from an empty cache; each run is checked (untimed): N disks, each a
qcow2 overlay of the one cached template.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from concurrent import futures
from typing import Any

import nova.conf
from nova import context as nova_context
from nova import objects
from nova.tests import fixtures as nova_fixtures
from nova.virt import fake
from nova.virt import images
from nova.virt.libvirt import driver as stock_driver
from nova.virt.libvirt import imagecache as nova_imagecache
from nova.virt.libvirt import utils as libvirt_utils
from oslo_config import fixture as config_fixture

from benchmarks import fakes
from benchmarks import tables
from nova_imgtype.virt.libvirt import driver as imgtype_driver
from nova_imgtype.virt.libvirt import imagecache
from nova_imgtype.virt.libvirt.template_handlers import downloading
from nova_imgtype_testing import glance as glance_data
from nova_imgtype_testing import libvirtd as real

CONF = nova.conf.CONF
MiB = 1024 ** 2
SIZE = 128 * MiB
#: glanceclient's download chunk size.
CHUNK = 64 * 1024
#: The image service's "network": 1 Gbit/s.
RATE = 125_000_000
SPAWNS = (1, 4, 16)
RUNS = 3
STOCK = 'stock Qcow2, force_raw_images=True'
PLUGIN = 'plugin, qcow2:qcow2, downloading'
#: Config label -> force_raw_images, [libvirt] options.
CONFIGS: dict[str, tuple[bool, dict[str, Any]]] = {
    STOCK: (True, dict(images_type='qcow2')),
    PLUGIN: (True, dict(images_type='qcow2',
                        images_type_mapping='qcow2:qcow2')),
}


class _ImageService:
    """One qcow2 image served from a local file at RATE, hashed as Glance
    does; counts the downloads."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.meta = fakes.image_meta(path, 'qcow2')
        self.image_id = self.meta['id']
        self.downloads = 0

    def get(self, context: Any, image_id: str, *args: Any,
            **kwargs: Any) -> dict[str, Any]:
        return dict(self.meta)

    def download(self, context: Any, image_id: str, data: Any = None,
                 dest_path: str | None = None,
                 trusted_certs: Any = None) -> None:
        self.downloads += 1
        if data is not None:
            self._stream(data)
            return
        # Stock's fetch: glance.API writes dest_path, then flush and fsync.
        assert dest_path is not None
        with open(dest_path, 'wb') as f:
            self._stream(f)
            f.flush()
            os.fsync(f.fileno())

    def _stream(self, out: Any) -> None:
        start, sent = time.monotonic(), 0
        # Verified as glanceclient verifies what Nova reads.
        for chunk in glance_data.chunks(self.path, self.meta, CHUNK):
            sent += len(chunk)
            # The chunk arrives when the link has carried it; other
            # threads run meanwhile.
            time.sleep(max(0.0, start + sent / RATE
                               - time.monotonic()))
            out.write(chunk)


def _image(path: str) -> None:
    """A qcow2 of SIZE virtual bytes, all of them random data."""
    raw = path + '.raw'
    with open(raw, 'wb') as f:
        for _ in range(SIZE // (16 * MiB)):
            f.write(os.urandom(16 * MiB))
    subprocess.run(['qemu-img', 'convert', '-f', 'raw', '-O', 'qcow2', raw,
                    path], check=True)
    os.unlink(raw)


def run() -> list[dict[str, Any]]:
    objects.register_all()
    work = tempfile.mkdtemp(prefix='bench-spawns-', dir='/var/tmp')
    cfg = config_fixture.Config(CONF)
    cfg.setUp()
    apis = (images.IMAGE_API, downloading.IMAGE_API)
    saved = [(api, attr, getattr(api, attr)) for api in apis
             for attr in ('get', 'download')]
    libvirt_fix = nova_fixtures.LibvirtFixture()
    libvirt_fix.setUp()
    privsep = nova_fixtures.PrivsepFixture()
    privsep.setUp()
    try:
        instances = os.path.join(work, 'instances')
        os.makedirs(instances)
        cfg.config(instances_path=instances, host='bench1',
                   use_cow_images=True)
        cfg.config(lock_path=os.path.join(work, 'locks'),
                   group='oslo_concurrency')
        image = os.path.join(work, 'image.qcow2')
        _image(image)
        svc = _ImageService(image)
        for api in apis:
            api.get = svc.get
            api.download = svc.download
        return _measure(cfg, svc, instances)
    finally:
        privsep.cleanUp()
        libvirt_fix.cleanUp()
        for api, attr, fn in saved:
            setattr(api, attr, fn)
        cfg.cleanUp()
        shutil.rmtree(work, ignore_errors=True)


def _driver(cfg: config_fixture.Config, config: str) -> Any:
    force_raw, flags = CONFIGS[config]
    cfg.config(force_raw_images=force_raw)
    cfg.config(group='libvirt', **{'images_type_mapping': '',
                                   'use_storage_pools': False, **flags})
    cls = (imgtype_driver.LibvirtDriver if config == PLUGIN
           else stock_driver.LibvirtDriver)
    return cls(fake.FakeVirtAPI(), False)


def _instance(drv: Any, image_id: str) -> objects.Instance:
    inst = objects.Instance(
        uuid=str(uuid.uuid4()), image_ref=image_id, task_state=None,
        vm_state='building', trusted_certs=None, migration_context=None,
        system_metadata={'image_disk_format': 'qcow2'})
    if isinstance(drv, imgtype_driver.LibvirtDriver):
        drv._resolver.record(inst, drv._resolver.decide('qcow2'))
    return inst


def _spawns(drv: Any, svc: _ImageService, n: int) -> tuple[float, list]:
    """N concurrent root disks from an empty cache: wall time, disks."""
    context = nova_context.get_admin_context()
    filename = nova_imagecache.get_cache_fname(svc.image_id)
    insts = [_instance(drv, svc.image_id) for _ in range(n)]

    def spawn(inst: objects.Instance) -> Any:
        disk = drv.image_backend.by_name(inst, 'disk')
        drv._try_fetch_image_cache(disk, libvirt_utils.fetch_image, context,
                                   filename, svc.image_id, inst, SIZE)
        return disk

    with futures.ThreadPoolExecutor(n) as pool:
        start = time.perf_counter()
        disks = list(pool.map(spawn, insts))
        return time.perf_counter() - start, disks


def _measure(cfg: config_fixture.Config, svc: _ImageService,
             instances: str) -> list[dict[str, Any]]:
    base = os.path.join(instances, '_base')
    templates = {config: nova_imagecache.get_cache_fname(svc.image_id)
                 for config in CONFIGS}
    templates[PLUGIN] = imagecache.native_cache_fname(svc.image_id, 'qcow2')
    formats = {STOCK: 'raw'}
    times: dict[tuple[str, int], list[float]] = {}
    downloads: dict[tuple[str, int], set[int]] = {}
    for _ in range(RUNS):
        for n in SPAWNS:
            for config in CONFIGS:
                drv = _driver(cfg, config)
                before = svc.downloads
                wall, disks = _spawns(drv, svc, n)
                times.setdefault((config, n), []).append(wall)
                downloads.setdefault((config, n), set()).add(
                    svc.downloads - before)
                # Untimed: what was measured is what was meant.
                template = os.path.join(base, templates[config])
                assert os.listdir(base) == [templates[config]], \
                    os.listdir(base)
                assert (real.qemu_img_info(template)['format'] ==
                        formats.get(config, 'qcow2'))
                for disk in disks:
                    info = real.qemu_img_info(disk.path)
                    assert info['format'] == 'qcow2'
                    assert info['full-backing-filename'] == template
                for ent in os.listdir(instances):
                    shutil.rmtree(os.path.join(instances, ent))
                os.sync()       # no writeback of this run in the next one
    rows = []
    for n in SPAWNS:
        reference = statistics.median(times[(STOCK, n)])
        for config in CONFIGS:
            median = statistics.median(times[(config, n)])
            rows.append({
                'benchmark': 'concurrent spawns',
                'image': '%d MiB qcow2' % (SIZE // MiB),
                'file_bytes': svc.meta['size'],
                'config': config,
                'spawns': n,
                'downloads': max(downloads[(config, n)]),
                'runs': RUNS,
                'median_s': round(median, 4),
                'vs_stock': round(median / reference, 4),
            })
    return rows


def to_markdown(rows: list[dict[str, Any]]) -> str:
    """The concurrent spawns section of ``results/latest.md``."""
    lines = [
        '## Concurrent spawns of one image: downloads and wall time', '',
        'N instances of one %s image (all random data) spawned at once on '
        'an empty image cache, each in its own thread calling the '
        "driver's `_try_fetch_image_cache` for its root disk (stock "
        '`libvirt_utils.fetch_image`; Qcow2 overlay). Stock: stock Nova\'s '
        "driver (`Image.cache()`'s lock per template, `fetch_to_raw`). "
        'Plugin: our driver with `images_type_mapping = qcow2:qcow2` and '
        'the `downloading` handler. Fake image service: a local file in '
        '64 KiB chunks paced to 1 Gbit/s. Wall time from the first spawn '
        'to the last root disk; configurations alternated in one run, '
        'median of %d runs; `vs stock` is the ratio of medians to stock '
        'with Nova\'s default `force_raw_images = True` (see '
        '`benchmarks/concurrent_spawns.py`).'
        % (rows[0]['image'] if rows else '128 MiB qcow2',
           rows[0]['runs'] if rows else RUNS),
        '',
        tables.markdown(
            ['config', 'N', 'downloads', 'median wall s', 'vs stock'],
            ([r['config'], '%d' % r['spawns'], '%d' % r['downloads'],
              '%.3f' % r['median_s'], '%.3f' % r['vs_stock']]
             for r in rows),
            left=['config'])]
    return '\n'.join(lines) + '\n'
