"""Image cache audit cost at 100 and 1,000 instance disks.

The step of the image cache manager's periodic ``update()`` that finds
which cached templates instance disks are backed by
(``_list_backing_images()``), with the manager's state set as ``update()``
sets it (``_reset_state``, ``_scan_base_images`` of ``_base``, the
instances' names), untimed:

- stock: stock Nova's ``nova.virt.libvirt.imagecache.ImageCacheManager``,
  which runs ``qemu-img info`` (through stock's ``images.qemu_img_info``,
  as nova-compute runs it) on each ``<instances_path>/<uuid>/disk``: here
  N real qcow2 overlay files on four cached templates (two raw, two
  qcow2 kept natively).
- plugin: our ``ImageCacheManager`` as our ``LibvirtDriver`` builds it,
  with the driver's ``InstanceDisks.pool_backing_paths``: the
  ``<backingStore>`` of each volume of ``nova-disks-pool``, read from
  libvirt: here N qcow2 overlay volumes on the same templates, in a dir
  pool of a throwaway libvirtd
  (the instances' directories exist, without disk files, as for pool
  instances).

Real: qemu-img, the files, libvirtd and its pools and volumes. Fake: the
driver's libvirt module for domains (none is started). To keep the setup
short, the overlay files are copies of an overlay ``qemu-img create`` made
on each template (the same bytes as stock's ``create_image`` makes), and
the volumes beyond the first four (made by libvirt: ``create_cow``,
``createXML`` with a ``<backingStore>``) are copies of those, found by a
pool refresh as libvirt finds volumes after a restart.
Each run is checked (untimed): exactly the four templates in use, none
left unexplained. Stock and plugin alternate; medians of several runs
(one run of stock at 1,000 disks, which takes about two minutes alone).
"""

from __future__ import annotations

import logging
import os
import shutil
import statistics
import tempfile
import time
import uuid
from typing import Any

import nova.conf
from nova.tests import fixtures as nova_fixtures
from nova.virt import fake
from nova.virt.libvirt import imagecache as nova_imagecache
from oslo_config import fixture as config_fixture

from benchmarks import sampling
from benchmarks import tables
from nova_imgtype.virt.libvirt import driver as imgtype_driver
from nova_imgtype.virt.libvirt import imagecache
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import pools
from nova_imgtype_testing import drivers
from nova_imgtype_testing import libvirtd as real

CONF = nova.conf.CONF
MiB = 1024 ** 2
GiB = 1024 ** 3
DISKS = (100, 1000)
#: Runs per number of disks: stock's qemu-img info per disk is ~0.1 s.
RUNS = {'stock': {100: 2, 1000: 1}, 'plugin': {100: 3, 1000: 3}}
CONFIGS = {
    'stock': 'stock: qemu-img info per disk file',
    'plugin': "plugin: pool volumes' backingStore",
}


def run() -> list[dict[str, Any]]:
    import libvirt
    # Connections refused while the daemon starts and lookups of volumes
    # not made yet are expected; and stock warns of each template no
    # instance's image_ref explains (no image service here).
    libvirt.registerErrorHandler(lambda ctx, err: None, None)
    daemon = real.start_libvirtd()
    work = tempfile.mkdtemp(prefix='bench-audit-', dir='/var/tmp')
    cfg = config_fixture.Config(CONF)
    cfg.setUp()
    libvirt_fix = nova_fixtures.LibvirtFixture()
    libvirt_fix.setUp()
    conn = None
    made: list[Any] = []
    stock_log = logging.getLogger(nova_imagecache.__name__)
    level = stock_log.level
    stock_log.setLevel(logging.ERROR)
    try:
        daemon.give(work)
        conn = libvirt.open(daemon.uri)
        instances = os.path.join(work, 'instances')
        os.makedirs(os.path.join(instances, '_base'))
        daemon.give(instances)
        cfg.config(instances_path=instances, host='bench1',
                   use_cow_images=True)
        cfg.config(lock_path=os.path.join(work, 'locks'),
                   group='oslo_concurrency')
        cfg.config(group='libvirt', images_type='flat',
                   images_type_mapping='qcow2:qcow2', use_storage_pools=True)
        drv = imgtype_driver.LibvirtDriver(fake.FakeVirtAPI(), False)
        drivers.use_pools(drv, pools.StoragePools(
            lambda: conn))
        made = [drv._pools.ensure(spec, autostart=False)
                for spec in pool_specs.default_specs(instances)]
        return _measure(drv, instances, daemon.give)
    finally:
        for pool in made:
            try:
                pool.destroy()
                pool.undefine()
            except libvirt.libvirtError:
                pass
        if conn is not None:
            conn.close()
        daemon.stop()
        stock_log.setLevel(level)
        libvirt.registerErrorHandler(None, None)
        libvirt_fix.cleanUp()
        cfg.cleanUp()
        shutil.rmtree(work, ignore_errors=True)


def _templates(base: str) -> list[tuple[str, str]]:
    """Four cached templates: (path, format)."""
    out = []
    for fmt in ('raw', 'raw', 'qcow2', 'qcow2'):
        image_id = str(uuid.uuid4())
        name = (nova_imagecache.get_cache_fname(image_id) if fmt == 'raw'
                else imagecache.native_cache_fname(image_id, fmt))
        path = os.path.join(base, name)
        real.make_image(path, fmt, 64 * MiB)
        out.append((path, fmt))
    return out


def _audit(mgr: Any, base: str, names: set[str]) -> tuple[float, list]:
    """What update() does before and in finding the templates in use;
    only _list_backing_images() is timed."""
    mgr._reset_state()
    mgr._scan_base_images(base)
    mgr.instance_names = set(names)
    start = time.perf_counter()
    in_use = mgr._list_backing_images()
    return time.perf_counter() - start, in_use


def _measure(drv: Any, instances: str,
             give: Any) -> list[dict[str, Any]]:
    base = os.path.join(instances, '_base')
    templates = _templates(base)
    storage = drv._pools
    storage.refresh(pool_specs.BASE_POOL)
    disks_pool = storage.get(pool_specs.DISKS_POOL)
    # One overlay per template, made as stock makes instance disks.
    seeds = []
    volume_seeds: list[str] = []
    for i, (path, fmt) in enumerate(templates):
        seed = os.path.join(os.path.dirname(instances), 'seed-%d' % i)
        real.qemu_img('create', '-q', '-f', 'qcow2', '-b', path, '-F', fmt,
                      seed, str(GiB))
        seeds.append(seed)
    managers = {
        'stock': nova_imagecache.ImageCacheManager(),
        'plugin': drv.image_cache_manager,
    }
    assert isinstance(managers['plugin'], imagecache.ImageCacheManager)
    names: dict[str, set[str]] = {'stock': set(), 'plugin': set()}
    expected = sorted(path for path, _ in templates)
    rows = []
    for n in DISKS:
        setup = time.perf_counter()
        while len(names['stock']) < n:
            i = len(names['stock'])
            inst = str(uuid.uuid4())
            os.makedirs(os.path.join(instances, inst))
            shutil.copyfile(seeds[i % len(seeds)],
                            os.path.join(instances, inst, 'disk'))
            names['stock'].add(inst)
        target = pool_specs.pool_target(disks_pool)
        while len(names['plugin']) < n:
            i = len(names['plugin'])
            inst = str(uuid.uuid4())
            os.makedirs(os.path.join(instances, inst))
            volume = pool_specs.volume_name(inst, 'disk')
            if i < len(templates):
                path, fmt = templates[i]
                storage.create_cow(disks_pool, volume, path, fmt, GiB)
                volume_seeds.append(volume)
            else:
                shutil.copyfile(
                    os.path.join(target, volume_seeds[i % len(templates)]),
                    os.path.join(target, volume))
            names['plugin'].add(inst)
        give(target)
        disks_pool.refresh(0)
        setup = time.perf_counter() - setup
        assert len(disks_pool.listAllVolumes(0)) == n
        times: dict[str, list[float]] = {'stock': [], 'plugin': []}
        while any(sampling.more(times[config], RUNS[config][n])
                  for config in managers):
            for config, mgr in managers.items():
                if not sampling.more(times[config], RUNS[config][n]):
                    continue
                elapsed, in_use = _audit(mgr, base, names[config])
                times[config].append(elapsed)
                # Untimed: what was measured is what was meant.
                assert sorted(in_use) == expected, in_use
                assert mgr.unexplained_images == [], mgr.unexplained_images
        reference = statistics.median(times['stock'])
        for config, label in CONFIGS.items():
            median = statistics.median(times[config])
            rows.append({
                'benchmark': 'image cache audit',
                'config': label,
                'disks': n,
                'templates': len(templates),
                'runs': len(times[config]),
                'median_s': round(median, 4),
                'per_disk_ms': round(median / n * 1000, 3),
                'vs_stock': round(median / reference, 4),
                'setup_s': round(setup, 1),
            })
    return rows


def to_markdown(rows: list[dict[str, Any]]) -> str:
    """The image cache audit section of ``results/latest.md``."""
    lines = [
        '## Image cache audit: finding the templates in use', '',
        "The image cache manager's `_list_backing_images()` (the step of "
        'its periodic `update()` that reads what each instance disk is '
        'backed by), with N instance disks on %d cached templates. Stock: '
        "stock Nova's manager, `qemu-img info` (as nova-compute runs it) "
        'on each `<instances_path>/<uuid>/disk`, real qcow2 overlay files. '
        "Plugin: our manager with the driver's "
        "`InstanceDisks.pool_backing_paths`, each "
        "`nova-disks-pool` volume's `<backingStore>` read from a throwaway "
        'libvirtd (real dir pool, real qcow2 overlay volumes). Stock and '
        'plugin alternated in one run; median of the runs shown; `vs '
        'stock` is the ratio of medians (see `benchmarks/cache_audit.py`).'
        % (rows[0]['templates'] if rows else 4),
        '',
        tables.markdown(
            ['config', 'disks', 'runs', 'median s', 'ms per disk',
             'vs stock'],
            (['%s' % r['config'], '%d' % r['disks'], '%d' % r['runs'],
              '%.4f' % r['median_s'], '%.3f' % r['per_disk_ms'],
              '%.4f' % r['vs_stock']] for r in rows),
            left=['config'])]
    return '\n'.join(lines) + '\n'
