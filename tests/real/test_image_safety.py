"""Real: image safety on every path a template takes into an instance disk.

Real: the driver's per-instance backends, qemu-img, Nova's format
inspector, files, the throwaway libvirtd's pools, os-brick's local
connector (a file stands for the attached image volume). Fake: the image
service and Cinder's API (no Glance or Cinder runs here), as in
:mod:`tests.real.test_template_handlers`.

The matrix runs every crafted image of
:mod:`nova_imgtype_testing.crafted_images` through every path, with deep
inspection on and off, and asserts that no template or instance disk ever
references a file outside the image cache, that a hostile image is refused,
and that a refusal leaves nothing in ``_base`` and no disk.
"""

import hashlib
import logging
import os

import pytest
from nova import context as nova_context
from nova import exception as nova_exception
from nova import objects
from nova.virt.libvirt import imagebackend as nova_imagebackend
from nova.virt.libvirt import imagecache as nova_imagecache
from nova.virt.libvirt import utils as libvirt_utils

from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import pools
from nova_imgtype.virt.libvirt import storage
from nova_imgtype.virt.libvirt.template_handlers import volume_linking
from nova_imgtype_testing import crafted_images as crafted
from nova_imgtype_testing import drivers
from nova_imgtype_testing import libvirtd as real
from nova_imgtype_testing.cinder import Cinder
from tests.real.test_native_images import MiB
from tests.real.test_native_images import conf  # noqa: F401
from tests.real.test_native_images import driver  # noqa: F401
from tests.real.test_template_handlers import ImageService
from tests.real.test_template_handlers import _instance
from tests.real.test_template_handlers import brick_in_process  # noqa: F401
from tests.real.test_template_handlers import serve  # noqa: F401

objects.register_all()
ROOT = 64 * MiB
CINDER = 'cinder://5b3f0c1e-7d2a-4c8e-9f61-2a4b6c8d0e13'

#: path -> (libvirt options, template handler)
PATHS = {
    'native': (dict(images_type='qcow2', images_type_mapping='qcow2:qcow2'),
               'downloading'),
    'converted': (dict(images_type='flat'), 'downloading'),
    'linking': (dict(images_type='flat', images_type_mapping='qcow2:qcow2'),
                'volume-based-linking'),
    'pool-cow': (dict(images_type='qcow2', images_type_mapping='qcow2:qcow2',
                      use_storage_pools=True), 'downloading'),
    'pool-copy': (dict(images_type='flat', use_storage_pools=True),
                  'downloading'),
}


def _sha256(path):
    with open(path, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()


def build_root_disk(drv, inst, image_id, size=ROOT):
    """What _create_image does for the root disk of an image-backed boot."""
    os.makedirs(libvirt_utils.get_instance_path(inst), exist_ok=True)
    disk = drv.image_backend.by_name(
        inst, 'disk', disk_info_mapping={'bus': 'virtio', 'dev': 'vda',
                                         'type': 'disk'})
    drv._try_fetch_image_cache(
        disk, libvirt_utils.fetch_image, nova_context.get_admin_context(),
        nova_imagecache.get_cache_fname(image_id), image_id, inst, size)
    return disk


def cache_entries(config):
    base = os.path.join(config.conf.instances_path, "_base")
    if not os.path.isdir(base):
        return []
    return sorted(os.path.join(base, e) for e in os.listdir(base)
                  if e != volume_linking.STATE_DIR)


def referenced_files(path):
    """Every file the image at ``path`` reads: its backing chain and any
    data-file, as qemu-img resolves them."""
    files = []
    for layer in real.qemu_img_info(path, backing_chain=True):
        files.append(layer['filename'])
        data = layer.get('format-specific', {}).get('data', {})
        if data.get('data-file'):
            files.append(data['data-file'])
    return files


@pytest.fixture
def on_path(driver, conf, serve, tmp_path, request,  # noqa: F811
            brick_in_process):  # noqa: F811
    """``on_path(name, image)``: a driver of that path serving ``image``
    (a local file) as the image service, and for linking as the volume."""
    made = []

    def on_path(name, path, claimed):
        flags, handler = PATHS[name]
        if flags.get('use_storage_pools'):
            libvirt_conn = request.getfixturevalue('libvirt_conn')
            where = request.getfixturevalue('libvirt_tmp_path')
            conf.config(instances_path=str(where / 'instances'))
        conf.config(template_image_handler=handler, group='image_cache')
        locations = ([{'url': CINDER, 'metadata': {}}]
                     if handler == 'volume-based-linking' else [])
        svc = serve(ImageService(path, claimed, locations=locations))
        drv = driver(**flags)
        if flags.get('use_storage_pools'):
            drivers.use_pools(drv, pools.StoragePools(
                lambda: libvirt_conn))
            made.extend(drv._pools.ensure(spec) for spec in
                        pool_specs.default_specs(conf.conf.instances_path))
        if handler == 'volume-based-linking':
            drv._template_handler.volume_api = Cinder(path)
        return drv, svc

    yield on_path
    for pool in made:
        pool.destroy()
        pool.undefine()


@pytest.mark.parametrize('deep', [True, False], ids=['deep', 'no-deep'])
@pytest.mark.parametrize('path_name', sorted(PATHS))
@pytest.mark.parametrize('image', crafted.CRAFTED, ids=lambda c: c.name)
def test_crafted_images_never_reach_outside_the_cache(
        image, path_name, deep, on_path, conf, tmp_path):  # noqa: F811
    conf.config(disable_deep_image_inspection=not deep, group='workarounds')
    host = tmp_path / 'host'
    host.mkdir()
    secret = crafted.make_secret(str(host))
    secret_sum = _sha256(secret)
    src = crafted.make(image, str(host), secret)
    drv, svc = on_path(path_name, src, image.claimed)
    inst = _instance(drv, svc.image_id, image.claimed)

    try:
        disk = build_root_disk(drv, inst, svc.image_id)
    except (nova_exception.NovaException, OSError) as e:
        refused = e
    else:
        refused = None

    if image.hostile:
        assert refused is not None, 'a hostile image was used'
    disk = drv.image_backend.by_name(inst, 'disk')
    instances = os.path.realpath(conf.conf.instances_path)
    allowed = {os.path.realpath(src)} if path_name == 'linking' else set()
    entries = cache_entries(conf)
    if refused is not None:
        # Nothing of the instance; a template that passed inspection and
        # was refused for its size only (the flavor's disk is smaller than
        # the image) stays cached, as stock keeps it.
        assert not disk.exists()
        if not isinstance(refused, nova_exception.FlavorDiskSmallerThanImage):
            assert entries == [], refused
    images_made = entries + ([disk.path] if disk.exists() else [])
    for made in images_made:
        for ref in referenced_files(made):
            real_ref = os.path.realpath(ref)
            assert (real_ref.startswith(instances + os.sep) or
                    real_ref in allowed), (made, ref)
    assert _sha256(secret) == secret_sum
    assert not [e for e in entries if e.endswith(('.part', '.converted'))]


def test_two_instances_of_a_linked_raw_image_on_flat_have_own_disks(
        on_path, conf, tmp_path):  # noqa: F811
    # The image volume, as Glance's cinder store wrote it (a file here).
    volume = str(tmp_path / 'volume')
    real.make_image(volume, 'raw', 32 * MiB)
    volume_sum = _sha256(volume)
    drv, svc = on_path('linking', volume, 'raw')
    a, b = (_instance(drv, svc.image_id, 'raw') for _ in range(2))
    disk_a = build_root_disk(drv, a, svc.image_id)
    disk_b = build_root_disk(drv, b, svc.image_id)

    assert svc.downloads == 0                  # linked, not downloaded
    template = cache_entries(conf)[0]
    assert os.path.realpath(template) == volume
    for disk in (disk_a, disk_b):
        assert not os.path.islink(disk.path)
        assert os.path.getsize(disk.path) == ROOT     # resized: its own
    # Instance A writes; B and the image volume do not see it.
    with open(disk_a.path, 'r+b') as f:
        f.write(b'tenant A was here')
    with open(disk_b.path, 'rb') as f:
        assert f.read(17) != b'tenant A was here'
    assert os.path.getsize(volume) == 32 * MiB
    assert _sha256(volume) == volume_sum


def test_a_backend_copying_links_gets_downloaded_templates(
        on_path, conf, tmp_path, caplog):  # noqa: F811
    caplog.set_level(logging.INFO)
    volume = str(tmp_path / 'volume')
    real.make_image(volume, 'raw', 32 * MiB)
    drv, svc = on_path('linking', volume, 'raw')
    # Ploop (parallels only here) copies its template with cp -r too.
    handler = drv._templates.handler_for(nova_imagebackend.Ploop, 'x',
                                         svc.image_id)
    assert handler.name == 'downloading'
    assert 'copies templates as files' in caplog.text
    # Under a name already linked, it is refused rather than aliased.
    build_root_disk(drv, _instance(drv, svc.image_id, 'raw'), svc.image_id)
    name = os.path.basename(cache_entries(conf)[0])
    assert os.path.islink(cache_entries(conf)[0])
    with pytest.raises(nova_exception.Invalid, match='linked to an image'):
        drv._templates.handler_for(nova_imagebackend.Ploop, name,
                                   svc.image_id)


@pytest.mark.parametrize('deep', [True, False], ids=['deep', 'no-deep'])
def test_linking_refuses_a_data_file_qcow2(on_path, conf, tmp_path,  # noqa
                                           deep):
    conf.config(disable_deep_image_inspection=not deep, group='workarounds')
    secret = crafted.make_secret(str(tmp_path))
    volume = str(tmp_path / 'volume')
    crafted.make(crafted.CRAFTED[2], str(tmp_path), secret)
    os.rename(str(tmp_path / 'data-file.img'), volume)
    drv, svc = on_path('linking', volume, 'qcow2')
    cinder = drv._template_handler.volume_api
    inst = _instance(drv, svc.image_id, 'qcow2')

    with pytest.raises(nova_exception.ImageUnacceptable,
                       match='data-file|safety check'):
        build_root_disk(drv, inst, svc.image_id)
    assert cinder.attachments == {}            # not linked, released
    assert svc.downloads == 1                  # the fallback refused it too
    assert cache_entries(conf) == []


@pytest.mark.parametrize('how', ['device-moved', 'link-removed'])
def test_a_lost_link_is_rebuilt_and_the_build_goes_on(on_path, conf,  # noqa
                                                      tmp_path, how):
    volume = str(tmp_path / 'volume')
    chunks = real.make_image(volume, 'qcow2', 32 * MiB)
    drv, svc = on_path('linking', volume, 'qcow2')
    cinder = drv._template_handler.volume_api
    build_root_disk(drv, _instance(drv, svc.image_id, 'qcow2'), svc.image_id)
    template = cache_entries(conf)[0]
    first = set(cinder.attachments)

    if how == 'device-moved':
        # The device went away and came back elsewhere (a host reboot, a
        # reconnect under another name): the link dangles.
        moved = str(tmp_path / 'volume-again')
        os.rename(volume, moved)
        cinder.device = moved
    else:
        os.unlink(template)
        moved = volume
    disk = build_root_disk(drv, _instance(drv, svc.image_id, 'qcow2'),
                           svc.image_id)

    assert os.path.realpath(template) == moved
    assert real.sha256_of_guest_data(disk.path, 'qcow2') == (
        real.sha256_of_chunks(ROOT, chunks))
    assert svc.downloads == 0
    assert len(cinder.attachments) == 1        # nothing leaked
    if how == 'link-removed':
        assert set(cinder.attachments) == first    # reconnected, kept
    state = drv._template_handler.linked(template)
    assert state['device_path'] == moved


def test_pool_disks_of_a_linked_template_are_private(on_path, conf,  # noqa
                                                     tmp_path):
    volume = str(tmp_path / 'volume')
    real.make_image(volume, 'raw', 32 * MiB)
    volume_sum = _sha256(volume)
    drv, svc = on_path('pool-copy', volume, 'raw')
    conf.config(template_image_handler='volume-based-linking',
                group='image_cache')
    from nova_imgtype.virt.libvirt import template_handlers
    drv._template_handler = drv._templates.handler = template_handlers.load(
        'volume-based-linking')
    drv._template_handler.volume_api = Cinder(volume)
    svc.meta['locations'] = [{'url': CINDER, 'metadata': {}}]
    disks = [build_root_disk(drv, _instance(drv, svc.image_id, 'raw'),
                             svc.image_id) for _ in range(2)]
    assert svc.downloads == 0
    for disk in disks:
        assert isinstance(disk, storage.LibvirtStorage)
        assert os.path.realpath(disk.path) != volume
        assert real.qemu_img_info(disk.path)['virtual-size'] == ROOT
    assert _sha256(volume) == volume_sum
