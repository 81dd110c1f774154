"""Time to make an instance disk from a cached template.

Stock Nova (its own functions: ``libvirt_utils.create_image`` for Qcow2
overlays, ``libvirt_utils.copy_image`` for Flat copies, and the raw
conversion ``force_raw_images`` does at download for qcow2 images) against
LibvirtStorage on a throwaway libvirtd (``<backingStore>`` overlays and
``createXMLFrom`` copies), for 1 GiB and 10 GiB images, raw and qcow2.
Each image holds 256 MiB of random data (the rest is sparse, as cloud
images are). Medians of 5 runs, 11 for a disk made in under half a
second (:mod:`benchmarks.sampling`); the cache bytes are what the image
cache keeps for the image.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any

from nova.virt import images
from nova.virt.libvirt import utils as libvirt_utils

from benchmarks import sampling
from benchmarks import tables
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import pools
from nova_imgtype_testing import libvirtd as real

GiB = 1024 ** 3
MiB = 1024 ** 2
DATA = 256 * MiB
RUNS = 5


def _template(path: str, fmt: str, size: int) -> None:
    raw = path + '.src'
    with open(raw, 'wb') as f:
        f.truncate(size)
        for _ in range(DATA // (16 * MiB)):
            f.write(os.urandom(16 * MiB))
    if fmt == 'raw':
        os.rename(raw, path)
    else:
        real.qemu_img('convert', '-c', '-O', fmt, raw, path)
        os.unlink(raw)


def _sparse_copy(src: str, dest: str) -> None:
    subprocess.run(['cp', '--sparse=always', src, dest], check=True)


def _median(fn: Callable[[int], None],
            cleanup: Callable[[int], None] | None = None) -> float:
    """Median wall time of RUNS calls (more for a fast one:
    :mod:`.sampling`); ``cleanup`` (untimed) after each, and the
    machine settled (untimed) before each."""
    times: list[float] = []
    run = 0
    while sampling.more(times, RUNS):
        sampling.settle()
        start = time.perf_counter()
        fn(run)
        times.append(time.perf_counter() - start)
        if cleanup is not None:
            cleanup(run)
        run += 1
    return statistics.median(times)


def _cache_bytes(path: str) -> int:
    return os.stat(path).st_blocks * 512


def run() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    daemon = real.start_libvirtd()
    work = tempfile.mkdtemp(prefix='bench-', dir='/var/tmp')
    try:
        import libvirt
        conn = libvirt.open(daemon.uri)
        storage = pools.StoragePools(lambda: conn)
        base_spec, disks_spec = pool_specs.default_specs(work)
        base_pool = storage.ensure(base_spec, autostart=False)
        disks = storage.ensure(disks_spec, autostart=False)
        for size in (GiB, 10 * GiB):
            for fmt in ('raw', 'qcow2'):
                image = os.path.join(work, 'image.%s' % fmt)
                _template(image, fmt, size)
                label = '%d GiB %s' % (size // GiB, fmt)
                rows += _measure(label, image, fmt, size, work, storage,
                                 base_pool, disks)
                os.unlink(image)
        for pool in (disks, base_pool):
            pool.destroy()
            pool.undefine()
        conn.close()
    finally:
        daemon.stop()
        shutil.rmtree(work, ignore_errors=True)
    return rows


def _measure(label: str, image: str, fmt: str, size: int, work: str,
             storage: pools.StoragePools, base_pool: Any,
             disks: Any) -> list[dict[str, Any]]:
    cache = os.path.join(work, '_base')
    native = os.path.join(cache, 'native')
    converted = os.path.join(cache, 'converted')
    _sparse_copy(image, native)

    def stock_convert(run: int) -> None:
        # force_raw_images at download: stock's path for non-raw images.
        if os.path.exists(converted):
            os.unlink(converted)
        if fmt == 'raw':
            _sparse_copy(native, converted)
        else:
            images.convert_image(native, converted, fmt, 'raw')

    convert_s = _median(stock_convert) if fmt != 'raw' else 0.0
    if fmt == 'raw':
        stock_convert(0)
    storage.refresh(pool_specs.BASE_POOL)
    native_vol = base_pool.storageVolLookupByName('native')
    inst_dir = os.path.join(work, 'instance')
    os.makedirs(inst_dir, exist_ok=True)

    def stock_qcow2(run: int) -> None:
        libvirt_utils.create_image(os.path.join(inst_dir, 'disk'), 'qcow2',
                                   size, backing_file=converted)

    def stock_flat(run: int) -> None:
        libvirt_utils.copy_image(converted, os.path.join(inst_dir, 'disk'))

    def remove_file(run: int) -> None:
        os.unlink(os.path.join(inst_dir, 'disk'))

    def pool_cow(run: int) -> None:
        storage.create_cow(disks, 'disk', native, fmt, size)

    def pool_copy(run: int) -> None:
        storage.copy(disks, 'disk', native_vol, fmt, 'raw', size)

    def remove_volume(run: int) -> None:
        disks.storageVolLookupByName('disk').delete(0)

    results = {
        'stock Qcow2 (force_raw_images)':
            convert_s + _median(stock_qcow2, remove_file),
        'stock Flat (force_raw_images)':
            convert_s + _median(stock_flat, remove_file),
        'pool COW (native template)': _median(pool_cow, remove_volume),
        'pool copy (createXMLFrom to raw)': _median(pool_copy,
                                                    remove_volume),
    }
    stock_ref = results['stock Qcow2 (force_raw_images)']
    flat_ref = results['stock Flat (force_raw_images)']
    rows = []
    for method, seconds in results.items():
        native_cache = method.startswith('pool COW')
        rows.append({
            'benchmark': 'disk creation',
            'image': label,
            'method': method,
            'median_s': round(seconds, 4),
            'vs_stock_qcow2': round(seconds / stock_ref, 3) if stock_ref
            else None,
            'vs_stock_flat': round(seconds / flat_ref, 3) if flat_ref
            else None,
            'cache_bytes': _cache_bytes(native if native_cache
                                        else converted),
        })
    shutil.rmtree(inst_dir)
    for path in (native, converted):
        os.unlink(path)
    storage.refresh(pool_specs.BASE_POOL)
    return rows


def to_markdown(rows: list[dict[str, Any]]) -> str:
    """The disk creation section of ``results/latest.md``."""
    lines = ['## Disk creation from a cached template', '',
             'An overlay (pool COW) is stock Qcow2\'s counterpart, a copy '
             '(pool copy) stock Flat\'s; stock\'s times include their '
             'share of the conversion to raw at download (see '
             '`benchmarks/disk_creation.py`).', '',
             tables.markdown(
                 ['image', 'method', 'median s', 'vs stock Qcow2',
                  'vs stock Flat', 'cache bytes'],
                 ([r['image'], r['method'], '%.4f' % r['median_s'],
                   r['vs_stock_qcow2'], r.get('vs_stock_flat', '-'),
                   '%d' % r['cache_bytes']] for r in rows),
                 left=['image', 'method'])]
    return '\n'.join(lines) + '\n'
