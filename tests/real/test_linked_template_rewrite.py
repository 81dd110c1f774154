"""Real: a linked template whose volume is rewritten after it was linked
(issue 27, item 3).

An image volume of ``volume-based-linking`` is a multiattach Cinder volume
owned by the image's project: its owner can rewrite it while hosts keep it
linked. Here the linked raw template is rewritten in place (as a write to
the device would) to hold a qcow2 header, with or without a backing file
naming a root-only host file. No new instance disk may then hold the host
file's data, whatever backend makes it; the build fails naming the image
and the template. The link stays (disks made before use the volume); once
the volume holds the image again, the next build, checked again, uses it.
An overlay made before the rewrite names its backing format and never
reads the host file.

Real: qemu-img, files, oslo.concurrency's locks, os-brick's local
connector (a file stands for the attached device), the driver's Flat and
Qcow2 backends. Fake: the image service and Cinder's API (as in
``test_template_handlers``).
"""

import os

import pytest
from nova import exception as nova_exception
from nova.virt.libvirt import utils as libvirt_utils

from nova_imgtype import exception
from nova_imgtype import record as record_mod
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import pools
from nova_imgtype.virt.libvirt import storage
from nova_imgtype.virt.libvirt.template_handlers import volume_linking
from nova_imgtype_testing import drivers
from nova_imgtype_testing import libvirtd as real
from nova_imgtype_testing.cinder import Cinder
from tests.real.test_native_images import MiB
from tests.real.test_native_images import conf  # noqa: F401
from tests.real.test_native_images import driver  # noqa: F401
from tests.real.test_template_handlers import VOLUME_ID
from tests.real.test_template_handlers import ImageService
from tests.real.test_template_handlers import _base
from tests.real.test_template_handlers import _instance
from tests.real.test_template_handlers import _root_disk as _stock_root_disk
from tests.real.test_template_handlers import brick_in_process  # noqa: F401
from tests.real.test_template_handlers import serve  # noqa: F401

SIZE = 8 * MiB
MARKER = b'ROOT-ONLY-HOST-FILE-MARKER\n'


@pytest.fixture
def host_file(tmp_path):
    """A root-only host file holding the marker (what must never leak)."""
    secret_dir = tmp_path / 'root-only'
    secret_dir.mkdir(mode=0o700)
    path = secret_dir / 'secret'
    path.write_bytes(MARKER * (MiB // len(MARKER)))
    path.chmod(0o600)
    return str(path)


def _root_disk(drv, inst, image_id):
    """The root disk, in its instance directory (which _create_image
    makes before it)."""
    os.makedirs(libvirt_utils.get_instance_path(inst), exist_ok=True)
    return _stock_root_disk(drv, inst, image_id)


def _rewrite(device, kind, host_file, tmp_path):
    """Write a qcow2 image over the start of the volume, in place (the
    device keeps its size, as a block device would)."""
    new = str(tmp_path / 'rewrite.qcow2')
    if kind == 'qcow2-backed-by-host-file':
        real.qemu_img('create', '-q', '-f', 'qcow2', '-b', host_file,
                      '-F', 'raw', new, str(SIZE))
    elif kind == 'qcow2-data-file-host-file':
        # Made on a file of its own, then pointed at the host file (a
        # create would write to its data file).
        real.qemu_img('create', '-q', '-f', 'qcow2', '-o',
                      'data_file=%s,data_file_raw=on' % (new + '.data'),
                      new, str(SIZE))
        real.qemu_img('amend', '-q', '-f', 'qcow2', '-o',
                      'data_file=%s' % host_file, new)
        os.unlink(new + '.data')
    else:
        real.make_image(new, 'qcow2', SIZE, pattern=b'tenant qcow2\n')
    with open(new, 'rb') as src, open(device, 'r+b') as dst:
        dst.write(src.read())
    os.unlink(new)


def _restore(device, original):
    with open(device, 'wb') as f:
        f.write(original)


def _guest_data(path, fmt, tmp_path):
    """The data QEMU reads from ``path`` opened as ``fmt``."""
    out = str(tmp_path / 'guest.raw')
    real.qemu_img('convert', '-U', '-f', fmt, '-O', 'raw', path, out)
    with open(out, 'rb') as f:
        data = f.read()
    os.unlink(out)
    return data


def _files_holding(root, needle):
    """Regular files under ``root`` (links not followed) holding
    ``needle``."""
    found = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            with open(path, 'rb') as f:
                if needle in f.read():
                    found.append(path)
    return found


def _drop_pools(made):
    """Remove the pools a test made, the image cache pool's volumes kept
    (they are the image volumes' links)."""
    for pool in made:
        if pool.name() != pool_specs.BASE_POOL:
            for vol in pool.listAllVolumes(0):
                vol.delete(0)
        pool.destroy()
        pool.undefine()


def _linked_volume(driver, conf, serve, tmp_path, **flags):  # noqa: F811
    """A raw image whose volume the driver links; (the device standing
    for the attached volume, its chunks, the image service, the driver,
    the fake Cinder)."""
    device = str(tmp_path / 'volume')
    chunks = real.make_image(device, 'raw', SIZE)
    svc = serve(ImageService(device, 'raw', locations=[
        {'url': 'cinder://%s' % VOLUME_ID, 'metadata': {}}]))
    conf.config(template_image_handler='volume-based-linking',
                group='image_cache')
    drv = driver(**flags)
    cinder = drv._template_handler.volume_api = Cinder(device)
    return device, chunks, svc, drv, cinder


def _template(conf):  # noqa: F811
    (name,) = [f for f in os.listdir(_base(conf))
               if f != volume_linking.STATE_DIR]
    return os.path.join(_base(conf), name)


@pytest.mark.parametrize('kind', ['qcow2-backed-by-host-file', 'qcow2'])
@pytest.mark.parametrize('backend', ['flat', 'qcow2'])
def test_a_rewritten_linked_template_is_refused(
        driver, conf, serve, tmp_path, brick_in_process,  # noqa: F811
        host_file, backend, kind, caplog):
    device, chunks, svc, drv, cinder = _linked_volume(
        driver, conf, serve, tmp_path, images_type=backend)
    with open(device, 'rb') as f:
        original = f.read()
    # The format each backend's disks are given to QEMU with: the Qcow2
    # backend's are qcow2; a Flat disk is a copy of the raw template.
    disk_fmt = 'qcow2' if backend == 'qcow2' else 'raw'

    first = _root_disk(drv, _instance(drv, svc.image_id, 'raw'),
                       svc.image_id)
    template = _template(conf)
    assert os.path.islink(template)
    expected = real.sha256_of_chunks(64 * MiB, chunks)
    assert real.sha256_of_guest_data(first.path, disk_fmt) == expected

    _rewrite(device, kind, host_file, tmp_path)
    # The disk made before the rewrite does not read the host file (an
    # overlay names its backing file's format: raw).
    assert MARKER not in _guest_data(first.path, disk_fmt, tmp_path)

    inst = _instance(drv, svc.image_id, 'raw')
    disk_path = os.path.join(libvirt_utils.get_instance_path(inst), 'disk')
    error = None
    try:
        _root_disk(drv, inst, svc.image_id)
    except nova_exception.NovaException as e:
        error = e
    # The host file's data is nowhere in the instances' files (read as
    # bytes: raw, the format the template was accepted in).
    assert _files_holding(conf.conf.instances_path, MARKER) == []
    # The changed template was refused, logged naming it: the build
    # failed naming the image and the template, no disk is left behind.
    # The link stays: the first disk still uses the volume.
    assert 'Refused, never followed' in caplog.text
    assert isinstance(error, nova_exception.ImageUnacceptable), error
    assert svc.image_id in str(error) and template in str(error)
    assert not os.path.lexists(disk_path)
    assert os.path.islink(template) and len(cinder.attachments) == 1

    # The volume's owner puts the image back: the next build, checked
    # again, uses the link and its disk holds the image.
    _restore(device, original)
    again = _root_disk(drv, _instance(drv, svc.image_id, 'raw'),
                       svc.image_id)
    assert os.path.islink(template) and len(cinder.attachments) == 1
    assert svc.downloads == 0
    assert real.sha256_of_guest_data(again.path, disk_fmt) == expected


@pytest.mark.parametrize('backend', ['flat', 'qcow2'])
def test_a_link_of_an_earlier_release_gets_its_format_at_first_use(
        driver, conf, serve, tmp_path, brick_in_process,  # noqa: F811
        backend):
    """A link recorded without a format (an earlier release's) is
    inspected at its first use as at linking, and the format found
    recorded: the build goes on."""
    _device, chunks, svc, drv, cinder = _linked_volume(
        driver, conf, serve, tmp_path, images_type=backend)
    disk_fmt = 'qcow2' if backend == 'qcow2' else 'raw'
    _root_disk(drv, _instance(drv, svc.image_id, 'raw'), svc.image_id)
    template = _template(conf)
    handler = drv._template_handler
    state = handler.linked(template)
    del state['format']
    handler._record(template, state)

    disk = _root_disk(drv, _instance(drv, svc.image_id, 'raw'), svc.image_id)
    assert handler.linked(template)['format'] == 'raw'
    assert len(cinder.attachments) == 1 and svc.downloads == 0
    assert real.sha256_of_guest_data(disk.path, disk_fmt) == (
        real.sha256_of_chunks(64 * MiB, chunks))


def test_the_copy_of_a_linked_template_is_checked_as_accepted(
        driver, conf, serve, tmp_path, brick_in_process,  # noqa: F811
        host_file, monkeypatch):
    """A volume rewritten between the check of the template and its copy
    into a Flat disk: the copy (bytes, never read as a format) is checked
    too, and refused; no disk is left."""
    from nova.virt import images

    device, _chunks, svc, drv, cinder = _linked_volume(
        driver, conf, serve, tmp_path, images_type='flat')
    _root_disk(drv, _instance(drv, svc.image_id, 'raw'), svc.image_id)

    convert = images.convert_image

    def rewritten_first(src, dest, *args, **kwargs):
        _rewrite(device, 'qcow2-backed-by-host-file', host_file, tmp_path)
        return convert(src, dest, *args, **kwargs)

    monkeypatch.setattr(images, 'convert_image', rewritten_first)
    inst = _instance(drv, svc.image_id, 'raw')
    disk_path = os.path.join(libvirt_utils.get_instance_path(inst), 'disk')
    with pytest.raises(nova_exception.ImageUnacceptable,
                       match=svc.image_id):
        _root_disk(drv, inst, svc.image_id)
    assert not os.path.lexists(disk_path)
    assert len(cinder.attachments) == 1         # the first disk's
    assert _files_holding(conf.conf.instances_path, MARKER) == []


def test_no_qemu_img_probes_a_linked_template(
        driver, conf, serve, tmp_path, brick_in_process,  # noqa: F811
        processes):
    """Every qemu-img run that reads a linked template names its format
    (``-f``, or ``backing_fmt`` for an overlay on it): none is taken from
    the volume's content."""
    device = str(tmp_path / 'volume')
    real.make_image(device, 'raw', SIZE)
    svc = serve(ImageService(device, 'raw', locations=[
        {'url': 'cinder://%s' % VOLUME_ID, 'metadata': {}}]))
    conf.config(template_image_handler='volume-based-linking',
                group='image_cache')
    for backend in ('flat', 'qcow2'):
        drv = driver(images_type=backend)
        drv._template_handler.volume_api = Cinder(device)
        _root_disk(drv, _instance(drv, svc.image_id, 'raw'), svc.image_id)
        processes.start()
        _root_disk(drv, _instance(drv, svc.image_id, 'raw'), svc.image_id)
        processes.stop()
        runs = [r for r in processes
                if 'qemu-img' in r and _base(conf) in r]
        assert runs, processes
        for run in runs:
            assert ' -f raw ' in run or 'backing_fmt=raw' in run, run
        del processes[:]


@pytest.mark.parametrize('images_type', ['flat', 'qcow2'])
def test_a_rewritten_linked_template_makes_no_pool_volume(
        driver, conf, serve, tmp_path, brick_in_process,  # noqa: F811
        host_file, libvirt_conn, images_type):
    """The pool path: a raw volume (createXMLFrom copy) or a qcow2 overlay
    volume of a linked template takes its recorded format, checked again
    first; rewritten, it is refused like a file's."""
    device, chunks, svc, drv, _cinder = _linked_volume(
        driver, conf, serve, tmp_path, images_type=images_type,
        use_storage_pools=True)
    drivers.use_pools(drv, pools.StoragePools(
        lambda: libvirt_conn))
    made = [drv._pools.ensure(spec) for spec in pool_specs.host_specs(
        conf.conf, drv._resolver.pool_backends())]
    try:
        first = _root_disk(drv, _instance(drv, svc.image_id, 'raw'),
                           svc.image_id)
        fmt = first.volume_format
        assert isinstance(first, storage.LibvirtStorage)
        assert (real.sha256_of_guest_data(first.path, fmt) ==
                real.sha256_of_chunks(64 * MiB, chunks))

        _rewrite(device, 'qcow2-backed-by-host-file', host_file, tmp_path)
        inst = _instance(drv, svc.image_id, 'raw')
        with pytest.raises(nova_exception.ImageUnacceptable,
                           match=svc.image_id):
            _root_disk(drv, inst, svc.image_id)
        disks = drv._pools.get(drv._resolver.decision_for(inst).pool)
        assert drv._pools.find_volume(
            disks, pool_specs.volume_name(inst.uuid, 'disk')) is None
        assert _files_holding(conf.conf.instances_path, MARKER) == []
        assert MARKER not in _guest_data(first.path, fmt, tmp_path)
    finally:
        _drop_pools(made)


def test_a_rewritten_linked_qcow2_template_starts_no_guest_through_it(
        driver, conf, serve, tmp_path, brick_in_process,  # noqa: F811
        host_file):
    """A qcow2 image used natively: its disks are qcow2 overlays on the
    linked template, opened as qcow2, whose own header QEMU reads at each
    open. Rewritten with a backing file, the template would hand the host
    file to the guest at its next start: the guest XML is refused, naming
    the image, until the volume holds what was accepted again."""
    device, original, svc, drv, _cinder = _qcow2_linked(
        driver, conf, serve, tmp_path)
    inst = _instance(drv, svc.image_id, 'qcow2')
    disk = _root_disk(drv, inst, svc.image_id)
    template = _template(conf)
    assert os.path.islink(template)
    # The root disk's template is recorded as made.
    assert record_mod.template(inst.system_metadata) == (
        svc.image_id, os.path.basename(template))
    drv._templates.check_linked_root_template(inst)          # as accepted

    _rewrite(device, 'qcow2-backed-by-host-file', host_file, tmp_path)
    # What QEMU would now read through the disk, opened as its domain
    # opens it: the host file.
    assert MARKER in _guest_data(disk.path, 'qcow2', tmp_path)
    with pytest.raises(exception.LinkedTemplateChanged, match=svc.image_id):
        drv._get_guest_xml(None, inst, [], {'mapping': {}}, None)
    assert os.path.islink(template)

    _restore(device, original)
    drv._templates.check_linked_root_template(inst)
    assert MARKER not in _guest_data(disk.path, 'qcow2', tmp_path)


@pytest.mark.parametrize('deep', [True, False], ids=['deep', 'no-deep'])
def test_a_link_records_the_inspectors_reading_reading_the_volume_once(
        driver, conf, serve, tmp_path, brick_in_process,  # noqa: F811
        monkeypatch, deep):
    """What each use compares with is what Nova's inspector reads in the
    volume; with the deep inspection the link takes it from that
    inspection (one read of the volume's content at linking, one at the
    check before the first use), without it the link reads it."""
    from nova.virt import images

    from nova_imgtype.virt.libvirt import sizes

    conf.config(disable_deep_image_inspection=not deep, group='workarounds')
    device, chunks, svc, drv, _cinder = _linked_volume(
        driver, conf, serve, tmp_path, images_type='qcow2')
    reads = []
    get_image_format = images.get_image_format

    def counted(path, *args, **kwargs):
        reads.append(path)
        return get_image_format(path, *args, **kwargs)

    monkeypatch.setattr(images, 'get_image_format', counted)
    disk = _root_disk(drv, _instance(drv, svc.image_id, 'raw'),
                      svc.image_id)
    monkeypatch.setattr(images, 'get_image_format', get_image_format)

    state = drv._template_handler.linked(_template(conf))
    assert state[volume_linking.INSPECTED] == sizes.template_format(
        images.get_image_format(device)) == 'raw'
    assert [os.path.realpath(p) for p in reads] == [device, device]
    assert real.sha256_of_guest_data(disk.path, 'qcow2') == (
        real.sha256_of_chunks(64 * MiB, chunks))


# -- every read of a linked template (issue 54, defect 3) ----------------

def _qcow2_linked(driver, conf, serve, tmp_path, **flags):  # noqa: F811
    """A qcow2 image whose volume the driver links and keeps natively:
    (the device, its original bytes, the image service, the driver, the
    fake Cinder)."""
    device = str(tmp_path / 'volume')
    real.make_image(device, 'qcow2', SIZE, pattern=b'the image\n')
    with open(device, 'rb') as f:
        original = f.read()
    svc = serve(ImageService(device, 'qcow2', locations=[
        {'url': 'cinder://%s' % VOLUME_ID, 'metadata': {}}]))
    conf.config(template_image_handler='volume-based-linking',
                group='image_cache')
    flags.setdefault('images_type', 'qcow2')
    drv = driver(images_type_mapping='qcow2:qcow2', **flags)
    cinder = drv._template_handler.volume_api = Cinder(device)
    return device, original, svc, drv, cinder


def _with_domain(drv, inst, disk):
    """The instance's domain (defined, shut off) with its root disk as
    the driver gives it to QEMU: what stock's snapshot reads the root
    disk's path and format from."""
    inst.id = 4242
    inst.project_id = inst.user_id = 'p'
    inst.kernel_id = inst.ramdisk_id = ''
    inst.os_type = None
    inst.instance_type_id = 1
    source = ("<source pool='%s' volume='%s'/>" % (
        disk.pool_name, disk.volume_name)
        if isinstance(disk, storage.LibvirtStorage)
        else "<source file='%s'/>" % disk.path)
    drv._host.get_connection().defineXML(
        "<domain type='kvm'><name>%s</name><uuid>%s</uuid>"
        "<memory>131072</memory><vcpu>1</vcpu>"
        "<os><type arch='x86_64'>hvm</type></os><devices>"
        "<disk type='%s' device='disk'><driver name='qemu' type='qcow2'/>"
        "%s<target dev='vda' bus='virtio'/></disk></devices></domain>" % (
            inst.name, inst.uuid,
            'volume' if isinstance(disk, storage.LibvirtStorage) else 'file',
            source))
    return inst


def _left(directory):
    """What a snapshot left in its directory (made by stock's snapshot
    when it starts its copy)."""
    return os.listdir(directory) if os.path.exists(directory) else []


class _Uploads:
    """The image service's upload of snapshots (the bytes of each) and
    the task states the compute manager is told."""

    def __init__(self, drv, monkeypatch):
        self.images = {}
        self.states = []
        api = drv._image_api
        monkeypatch.setattr(api, 'get', lambda ctx, image_id: {
            'id': image_id, 'name': 'snap'})

        def update(ctx, image_id, metadata, data=None, **kwargs):
            if data is not None:
                self.images[image_id] = data.read()

        monkeypatch.setattr(api, 'update', update)

    def update_task_state(self, task_state, expected_state=None):
        self.states.append(task_state)


def _snapshot(drv, inst, uploads, image_id='snap-1'):
    drv.snapshot(None, inst, image_id, uploads.update_task_state)
    return uploads.images.get(image_id)


def _legacy_linked(driver, conf, serve, tmp_path, monkeypatch):  # noqa
    """A legacy qcow2 instance on a linked template, its domain defined,
    its snapshots' uploads caught."""
    device, original, svc, drv, _cinder = _qcow2_linked(
        driver, conf, serve, tmp_path)
    inst = _instance(drv, svc.image_id, 'qcow2')
    disk = _root_disk(drv, inst, svc.image_id)
    _with_domain(drv, inst, disk)
    return device, original, svc, drv, inst, disk, _Uploads(drv, monkeypatch)


@pytest.mark.parametrize('kind', ['qcow2-backed-by-host-file',
                                  'qcow2-data-file-host-file'])
def test_a_snapshot_of_a_legacy_instance_is_refused_on_a_rewritten_template(
        driver, conf, serve, tmp_path, brick_in_process,  # noqa: F811
        host_file, monkeypatch, kind):
    """A cold snapshot of an instance on files (stock's snapshot: its
    qcow2 overlay read through the linked template, as shelve does): the
    template is checked again as accepted, before and once copied; a
    rewritten one is refused, nothing uploaded nor left, the instance's
    disk untouched; once the volume holds the image again, the snapshot
    is taken."""
    conf.config(snapshots_directory=str(tmp_path / 'snapshots'),
                group='libvirt')
    device, original, svc, drv, inst, disk, uploads = _legacy_linked(
        driver, conf, serve, tmp_path, monkeypatch)
    guest_data = _guest_data(disk.path, 'qcow2', tmp_path)

    _rewrite(device, kind, host_file, tmp_path)
    error = None
    try:
        _snapshot(drv, inst, uploads)
    except exception.LinkedTemplateChanged as e:
        error = e
    # The host file's data was uploaded nowhere, and nothing else was.
    assert [i for i, data in uploads.images.items() if MARKER in data] == []
    assert error is not None and svc.image_id in str(error)
    assert uploads.images == {}
    assert _left(tmp_path / 'snapshots') == []
    assert os.path.islink(_template(conf))

    _restore(device, original)
    image = _snapshot(drv, inst, uploads)
    out = str(tmp_path / 'snap.qcow2')
    with open(out, 'wb') as f:
        f.write(image)
    assert _guest_data(out, 'qcow2', tmp_path) == guest_data
    assert MARKER not in guest_data


def test_a_template_rewritten_during_a_snapshot_uploads_nothing(
        driver, conf, serve, tmp_path, brick_in_process,  # noqa: F811
        host_file, monkeypatch):
    """Rewritten while the disk is copied: the copy is not uploaded (the
    template is checked again before the upload, as accepted)."""
    from nova.virt import images

    conf.config(snapshots_directory=str(tmp_path / 'snapshots'),
                group='libvirt')
    device, _original, svc, drv, _cinder = _qcow2_linked(
        driver, conf, serve, tmp_path)
    inst = _instance(drv, svc.image_id, 'qcow2')
    _with_domain(drv, inst, _root_disk(drv, inst, svc.image_id))
    uploads = _Uploads(drv, monkeypatch)
    convert = images.convert_image

    def rewritten_first(*args, **kwargs):
        _rewrite(device, 'qcow2-backed-by-host-file', host_file, tmp_path)
        return convert(*args, **kwargs)

    monkeypatch.setattr(images, 'convert_image', rewritten_first)
    with pytest.raises(exception.LinkedTemplateChanged, match=svc.image_id):
        _snapshot(drv, inst, uploads)
    assert uploads.images == {}
    assert _left(tmp_path / 'snapshots') == []


def test_a_shelve_is_refused_on_a_rewritten_template(
        driver, conf, serve, tmp_path, brick_in_process,  # noqa: F811
        host_file, monkeypatch):
    """A shelve is the compute manager's snapshot of the stopped guest,
    its task states mapped to shelving's: refused the same way, the
    instance still on its disk."""
    from nova.compute import task_states

    conf.config(snapshots_directory=str(tmp_path / 'snapshots'),
                group='libvirt')
    device, original, svc, drv, inst, disk, uploads = _legacy_linked(
        driver, conf, serve, tmp_path, monkeypatch)
    shelving = {task_states.IMAGE_PENDING_UPLOAD:
                task_states.SHELVING_IMAGE_PENDING_UPLOAD,
                task_states.IMAGE_UPLOADING:
                task_states.SHELVING_IMAGE_UPLOADING}

    def update_task_state(task_state, expected_state=task_states.SHELVING):
        uploads.states.append(shelving[task_state])

    _rewrite(device, 'qcow2-backed-by-host-file', host_file, tmp_path)
    with pytest.raises(exception.LinkedTemplateChanged, match=svc.image_id):
        drv.snapshot(None, inst, 'shelved', update_task_state)
    assert uploads.images == {}
    assert os.path.exists(disk.path)

    _restore(device, original)
    drv.snapshot(None, inst, 'shelved', update_task_state)
    assert MARKER not in uploads.images['shelved']
    assert task_states.SHELVING_IMAGE_UPLOADING in uploads.states


def test_a_pool_snapshot_is_refused_on_a_rewritten_template(
        driver, conf, serve, tmp_path, brick_in_process,  # noqa: F811
        host_file, libvirt_conn, monkeypatch):
    """A pool instance's snapshot (:class:`.PoolSnapshots`): its qcow2
    overlay volume is read through the linked template; rewritten, the
    snapshot is refused before and after the copy, nothing uploaded."""
    conf.config(snapshots_directory=str(tmp_path / 'snapshots'),
                group='libvirt')
    device, original, svc, drv, _cinder = _qcow2_linked(
        driver, conf, serve, tmp_path, use_storage_pools=True)
    drivers.use_pools(drv, pools.StoragePools(lambda: libvirt_conn))
    made = [drv._pools.ensure(spec) for spec in pool_specs.host_specs(
        conf.conf, drv._resolver.pool_backends())]
    try:
        inst = _instance(drv, svc.image_id, 'qcow2')
        disk = _root_disk(drv, inst, svc.image_id)
        assert isinstance(disk, storage.LibvirtStorage)
        _with_domain(drv, inst, disk)
        uploads = _Uploads(drv, monkeypatch)
        assert drv._snapshots.applies(inst)

        _rewrite(device, 'qcow2-backed-by-host-file', host_file, tmp_path)
        error = None
        try:
            _snapshot(drv, inst, uploads)
        except exception.LinkedTemplateChanged as e:
            error = e
        assert [i for i, data in uploads.images.items()
                if MARKER in data] == []
        assert error is not None and svc.image_id in str(error)
        assert uploads.images == {}
        assert _left(tmp_path / 'snapshots') == []

        _restore(device, original)
        image = _snapshot(drv, inst, uploads)
        assert image and MARKER not in image
    finally:
        _drop_pools(made)


def test_an_instance_without_a_recorded_template_is_checked_too(
        driver, conf, serve, tmp_path, brick_in_process,  # noqa: F811
        host_file, monkeypatch):
    """An instance built before its root template was recorded: its
    template is the cache name of its image (never one read from its
    disk), checked at start and at snapshot like a recorded one."""
    conf.config(snapshots_directory=str(tmp_path / 'snapshots'),
                group='libvirt')
    device, original, svc, drv, _cinder = _qcow2_linked(
        driver, conf, serve, tmp_path)
    inst = _instance(drv, svc.image_id, 'qcow2')
    _with_domain(drv, inst, _root_disk(drv, inst, svc.image_id))
    del inst.system_metadata[record_mod.TEMPLATE]
    uploads = _Uploads(drv, monkeypatch)

    _rewrite(device, 'qcow2-backed-by-host-file', host_file, tmp_path)
    with pytest.raises(exception.LinkedTemplateChanged, match=svc.image_id):
        drv._templates.check_linked_root_template(inst)
    with pytest.raises(exception.LinkedTemplateChanged, match=svc.image_id):
        _snapshot(drv, inst, uploads)
    assert uploads.images == {}

    _restore(device, original)
    drv._templates.check_linked_root_template(inst)
    assert MARKER not in _snapshot(drv, inst, uploads)


def test_a_live_migration_arrival_checks_the_template(
        driver, conf, serve, tmp_path, brick_in_process,  # noqa: F811
        host_file):
    """The destination of a live migration opens the root disk (its own,
    or the shared one) through the template it links: checked again
    before stock's arrival, refused when rewritten."""
    from nova import objects

    device, _original, svc, drv, _cinder = _qcow2_linked(
        driver, conf, serve, tmp_path)
    inst = _instance(drv, svc.image_id, 'qcow2')
    _root_disk(drv, inst, svc.image_id)
    _rewrite(device, 'qcow2-backed-by-host-file', host_file, tmp_path)
    data = objects.LibvirtLiveMigrateData(
        is_shared_instance_path=True, is_shared_block_storage=False,
        block_migration=False, instance_relative_path=inst.uuid)
    with pytest.raises(exception.LinkedTemplateChanged, match=svc.image_id):
        drv.pre_live_migration(None, inst, None, [], '[]', data)


def test_a_precache_checks_a_linked_template_again(
        driver, conf, serve, tmp_path, brick_in_process,  # noqa: F811
        host_file, monkeypatch):
    """Pre-caching an image whose template is already linked checks it
    again: a rewritten one is reported (refused), not called cached."""
    from nova.virt import images

    device, original, svc, drv, _cinder = _qcow2_linked(
        driver, conf, serve, tmp_path)
    monkeypatch.setattr(images.IMAGE_API, 'get', svc.get)
    assert drv.cache_image(None, svc.image_id) is True
    assert os.path.islink(_template(conf))
    _rewrite(device, 'qcow2-backed-by-host-file', host_file, tmp_path)
    with pytest.raises(exception.LinkedTemplateChanged, match=svc.image_id):
        drv.cache_image(None, svc.image_id)
    _restore(device, original)
    assert drv.cache_image(None, svc.image_id) is False


def test_an_unshelve_rebases_onto_a_linked_template_only_as_accepted(
        driver, conf, serve, tmp_path, brick_in_process,  # noqa: F811
        host_file, monkeypatch, processes):
    """An unshelved instance's disk, made on its snapshot, is rebased onto
    the template of its original image: a linked one is checked again
    first and named in the format it was accepted in (stock's rebase
    probes it); rewritten, the rebase is refused and the disk keeps its
    backing."""
    from nova.image import glance

    device, original, svc, drv, _cinder = _qcow2_linked(
        driver, conf, serve, tmp_path)
    monkeypatch.setattr(glance.API, 'get',
                        lambda self, ctx, image_id, **kw: svc.get(ctx,
                                                                 image_id))
    _root_disk(drv, _instance(drv, svc.image_id, 'qcow2'), svc.image_id)
    template = _template(conf)
    # Spawned from its shelve snapshot (a template of its own), made as
    # the unshelve's spawn makes it.
    snap = str(tmp_path / 'snapshot.qcow2')
    real.make_image(snap, 'qcow2', SIZE, pattern=b'the image\n')
    inst = _instance(drv, svc.image_id, 'qcow2')
    inst.image_ref = 'snapshot-image'
    inst.vm_state = 'shelved_offloaded'
    inst.system_metadata['image_base_image_ref'] = svc.image_id
    os.makedirs(libvirt_utils.get_instance_path(inst))
    disk = drv.image_backend.by_name(inst, 'disk')
    real.qemu_img('create', '-q', '-f', 'qcow2', '-b', snap, '-F', 'qcow2',
                  disk.path, str(SIZE))

    _rewrite(device, 'qcow2-backed-by-host-file', host_file, tmp_path)
    with pytest.raises(exception.LinkedTemplateChanged, match=svc.image_id):
        drv._templates.rebase_onto_native(None, inst, disk)
    assert real.qemu_img_info(disk.path)['backing-filename'] == snap

    _restore(device, original)
    processes.start()
    assert drv._templates.rebase_onto_native(None, inst, disk)
    processes.stop()
    info = real.qemu_img_info(disk.path)
    assert (info['backing-filename'], info['backing-filename-format']) == (
        template, 'qcow2')
    runs = [r for r in processes if 'qemu-img' in r and template in r]
    assert runs and all(' -F qcow2 ' in r for r in runs), processes
