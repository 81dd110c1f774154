"""Time to first instance disk, template handler against template handler.

``downloading`` against ``volume-based-linking``.

From an empty image cache to a qcow2 overlay instance disk: the handler's
``fetch_image`` puts the template into ``_base`` (loaded through stevedore
as the driver loads it, called with the image used natively as qcow2, as
the driver does with ``images_type_mapping = qcow2:qcow2``), then stock
``nova.virt.libvirt.utils.create_image`` makes the qcow2 overlay on it, as
the Qcow2 backend does. Images are qcow2 of 1 GiB and 10 GiB virtual size,
each holding a tenth of its size in random data (the rest sparse), so the
bytes to download grow with the image.

Real: the handlers, glanceclient's hash check (sha512), format inspection,
qemu-img, oslo.concurrency's external locks, fsync'd writes to the local disk,
os-brick (privsep in-process) connecting the image file as "the volume" through
its local connector. Fake: the image service (``IMAGE_API.get`` and
``download`` serve the image file from the local disk in glanceclient's 64 KiB
chunks: every byte goes through the handler, but no network, so that the
handlers' own costs are what differs; the time to first disk benchmark
downloads from a real glance-api), and Cinder's attachment API (recorded in a
dict: no Cinder runs here). So downloading is timed without a network and
linking without Cinder's API or a real iSCSI/rbd attach: both are lower bounds.

The two handlers are measured alternately in the same run; medians of
several runs, each from an empty cache (removal through the handler's
``remove_image``, then ``sync``, untimed). Each run is checked, untimed:
one download for ``downloading``, none for linking, and the overlay backed
by the cached copy or by the volume. Cache bytes are the handler's
``cached_bytes`` of the template.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
import time
from typing import Any

import nova.conf
from nova import context as nova_context
from nova.virt import images
from nova.virt.libvirt import utils as libvirt_utils
from oslo_config import fixture as config_fixture

from benchmarks import fakes
from benchmarks import sampling
from benchmarks import tables
from nova_imgtype.virt.libvirt import imagecache
from nova_imgtype.virt.libvirt import template_handlers
from nova_imgtype.virt.libvirt.template_handlers import downloading
from nova_imgtype.virt.libvirt.template_handlers import volume_linking
from nova_imgtype_testing import glance as glance_data

CONF = nova.conf.CONF
GiB = 1024 ** 3
MiB = 1024 ** 2
#: Share of the virtual size that holds (random) data.
FILL = 10
#: glanceclient's download chunk size.
CHUNK = 64 * 1024
RUNS = 3
HANDLERS = ('downloading', 'volume-based-linking')


class _ImageService:
    """One qcow2 image served from a local file, hashed as Glance does."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.meta = fakes.image_meta(path, 'qcow2', cinder_location=True)
        self.image_id = self.meta['id']
        self.downloads = 0

    def get(self, context: Any, image_id: str,
            include_locations: bool = False) -> dict[str, Any]:
        return dict(self.meta)

    def download(self, context: Any, image_id: str, data: Any = None,
                 trusted_certs: Any = None) -> None:
        self.downloads += 1
        # Verified as glanceclient verifies what Nova reads.
        for chunk in glance_data.chunks(self.path, self.meta, CHUNK):
            data.write(chunk)


def _image(path: str, size: int) -> int:
    """A qcow2 of ``size`` virtual bytes holding size/FILL random bytes;
    returns the data bytes."""
    data = size // FILL // MiB * MiB
    raw = path + '.raw'
    with open(raw, 'wb') as f:
        f.truncate(size)
        for _ in range(data // (16 * MiB)):
            f.write(os.urandom(16 * MiB))
        f.write(os.urandom(data % (16 * MiB)))
    subprocess.run(['qemu-img', 'convert', '-f', 'raw', '-O', 'qcow2', raw,
                    path], check=True)
    os.unlink(raw)
    return data


def run() -> list[dict[str, Any]]:
    from os_brick import privileged
    rows: list[dict[str, Any]] = []
    work = tempfile.mkdtemp(prefix='bench-handlers-', dir='/var/tmp')
    cfg = config_fixture.Config(CONF)
    cfg.setUp()
    saved = {(m, a): getattr(m.IMAGE_API, a)
             for m in (downloading, volume_linking)
             for a in ('get', 'download')}
    privileged.default.set_client_mode(False)
    try:
        instances = os.path.join(work, 'instances')
        os.makedirs(os.path.join(instances, '_base'))
        cfg.config(instances_path=instances, host='bench1')
        cfg.config(lock_path=os.path.join(work, 'locks'),
                   group='oslo_concurrency')
        for size in (GiB, 10 * GiB):
            image = os.path.join(work, 'image.qcow2')
            data = _image(image, size)
            rows += _measure(size, data, image, instances)
            os.unlink(image)
    finally:
        privileged.default.set_client_mode(True)
        for (module, attr), fn in saved.items():
            setattr(module.IMAGE_API, attr, fn)
        cfg.cleanUp()
        shutil.rmtree(work, ignore_errors=True)
    return rows


def _measure(size: int, data: int, image: str,
             instances: str) -> list[dict[str, Any]]:
    svc = _ImageService(image)
    for module in (downloading, volume_linking):
        module.IMAGE_API.get = svc.get
    downloading.IMAGE_API.download = svc.download
    cinder = fakes.Cinder(image)
    handlers = {name: template_handlers.load(name) for name in HANDLERS}
    handlers['volume-based-linking'].volume_api = cinder  # type: ignore
    context = nova_context.get_admin_context()
    target = os.path.join(instances, '_base', imagecache.native_cache_fname(
        svc.image_id, 'qcow2'))
    disk = os.path.join(instances, 'instance', 'disk')
    os.makedirs(os.path.dirname(disk), exist_ok=True)
    times: dict[str, list[float]] = {name: [] for name in HANDLERS}
    cached: dict[str, int] = {}
    while any(sampling.more(times[name], RUNS) for name in HANDLERS):
        for name, handler in handlers.items():
            if not sampling.more(times[name], RUNS):
                continue
            downloads = svc.downloads
            start = time.perf_counter()
            handler.fetch_image(context, svc.image_id, target, 'qcow2')
            libvirt_utils.create_image(disk, 'qcow2', size,
                                       backing_file=target)
            times[name].append(time.perf_counter() - start)
            # Untimed: what was measured is what was meant.
            backing = images.qemu_img_info(disk).backing_file
            assert backing == target, backing
            if name == 'downloading':
                assert svc.downloads == downloads + 1
                assert not os.path.islink(target)
                assert os.path.getsize(target) == os.path.getsize(image)
            else:
                assert svc.downloads == downloads, 'fell back to download'
                assert os.path.realpath(target) == image
            cached[name] = handler.cached_bytes(target)
            os.unlink(disk)
            handler.remove_image(target)
            assert not os.path.lexists(target) and not cinder.attachments
            os.sync()       # no writeback of this run in the next one
    reference = statistics.median(times['downloading'])
    rows = []
    for name in HANDLERS:
        median = statistics.median(times[name])
        rows.append({
            'benchmark': 'template handlers',
            'image': '%d GiB qcow2' % (size // GiB),
            'data_bytes': data,
            'file_bytes': os.path.getsize(image),
            'handler': name,
            'runs': len(times[name]),
            'median_s': round(median, 4),
            'vs_downloading': round(median / reference, 4),
            'cache_bytes': cached[name],
        })
    return rows


def to_markdown(rows: list[dict[str, Any]]) -> str:
    """The template handlers section of ``results/latest.md``."""
    lines = [
        '## Template handlers: time to first instance disk', '',
        'From an empty `_base` to a qcow2 overlay instance disk: the '
        "handler's `fetch_image` (image used natively as qcow2), then "
        "stock `libvirt_utils.create_image`. qcow2 images holding a tenth "
        'of their virtual size in random data. `downloading` streams every '
        "byte of the image file (glanceclient's sha512 check, inspection, "
        'fsync) from a fake '
        'image service reading a local file (no network); '
        '`volume-based-linking` attaches the same file as the volume '
        "through os-brick's local connector, with a fake Cinder attachment "
        'API (no real Cinder, iSCSI or rbd attach): both lower bounds. '
        "Linking's work does not grow with the image (header inspection, "
        "qemu-img info, os-brick's connector probes, a symlink): its rows "
        'differ by run-to-run noise. '
        'Handlers alternated in one run; median of `runs` runs (%d, more '
        'for a handler under %.1f s: `benchmarks/sampling.py`); `vs '
        'downloading` is the ratio of medians; cache bytes are what `_base` '
        'holds for the template (see `benchmarks/template_handlers.py`).'
        % (RUNS, sampling.FAST_S),
        '',
        tables.markdown(
            ['image', 'data MiB', 'handler', 'runs',
             'median s to first disk', 'vs downloading', 'cache bytes'],
            ([r['image'], '%d' % (r['data_bytes'] // MiB), r['handler'],
              '%d' % r['runs'], '%.4f' % r['median_s'],
              '%.3f' % r['vs_downloading'], '%d' % r['cache_bytes']]
             for r in rows),
            left=['image', 'handler'])]
    return '\n'.join(lines) + '\n'
