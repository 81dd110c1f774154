"""Template image handlers: loading, ``downloading`` and linking.

Real: qemu-img, the format inspector, files, oslo.concurrency's external
locks, os-brick's local connector (a file stands for the device). Fake: the
image service (IMAGE_API.get/download serve a local file's bytes and a
metadata dict) and Cinder's API (CinderFixture-like recording of
attachments: no Cinder runs here).
"""

import errno
import hashlib
import os
import subprocess
import threading
from unittest import mock

import pytest
from nova import exception
from nova import utils as nova_utils
from nova.virt import images

from nova_imgtype import exception as imgtype_exception
from nova_imgtype.virt.libvirt import template_handlers
from nova_imgtype.virt.libvirt.template_handlers import downloading
from nova_imgtype.virt.libvirt.template_handlers import volume_linking
from nova_imgtype_testing import glance as glance_data

IMAGE_ID = 'c8b1a2e4-4a8e-4d1e-9f39-6a8d4e0c1b11'
VOLUME_ID = '3f1e8a52-9b0d-4c6e-8f1a-2d7b5c9e0a44'


def qemu_img(*args):
    return subprocess.run(('qemu-img',) + args, check=True,
                          capture_output=True, text=True).stdout


def _qcow2(tmp_path, name='img.qcow2', *opts):
    path = str(tmp_path / name)
    qemu_img('create', '-f', 'qcow2', *opts, path, '16M')
    return path


class FakeImageService:
    """Serves ``{image_id: (path, disk_format, extra meta)}``."""

    def __init__(self):
        self.images = {}
        self.downloads = 0
        self.cut_after = None

    def add(self, path, disk_format, hash_algo='sha512', **meta):
        with open(path, 'rb') as f:
            digest = hashlib.new(hash_algo, f.read()).hexdigest()
        self.images[IMAGE_ID] = (path, {
            'id': IMAGE_ID, 'disk_format': disk_format,
            'container_format': 'bare', 'os_hash_algo': hash_algo,
            'os_hash_value': digest, **meta})

    def get(self, context, image_id, include_locations=False):
        return dict(self.images[image_id][1])

    def download(self, context, image_id, data=None, trusted_certs=None):
        # As Nova's download over glanceclient: chunks verified as read.
        self.downloads += 1
        path, meta = self.images[image_id]
        written = 0
        for chunk in glance_data.chunks(path, meta):
            if self.cut_after is not None and written >= self.cut_after:
                raise exception.NovaException('connection reset')
            data.write(chunk)
            written += len(chunk)


@pytest.fixture
def glance(monkeypatch):
    svc = FakeImageService()
    for module in (downloading, volume_linking):
        monkeypatch.setattr(module.IMAGE_API, 'get', svc.get)
    monkeypatch.setattr(downloading.IMAGE_API, 'download', svc.download)
    return svc


@pytest.fixture
def cache(conf, tmp_path):
    path = tmp_path / '_base'
    path.mkdir()
    return path


def test_handlers_are_found_by_name_and_unknown_ones_are_named(conf):
    assert set(template_handlers.names()) >= {'downloading',
                                              'volume-based-linking'}
    handler = template_handlers.load('downloading')
    assert isinstance(handler, downloading.DownloadingTemplateImageHandler)
    with pytest.raises(imgtype_exception.UnknownTemplateImageHandler,
                       match="'copying'.*downloading"):
        template_handlers.load('copying')


def test_a_handler_that_cannot_be_loaded_says_why(conf):
    """Issue 12, defect 6: a registered handler whose module fails to
    import is not an "unknown handler"."""
    with mock.patch('nova_imgtype.virt.libvirt.template_handlers.'
                    'downloading.DownloadingTemplateImageHandler.__init__',
                    side_effect=ImportError('No module named os_brick_x')):
        with pytest.raises(imgtype_exception.TemplateImageHandlerLoadFailed,
                           match="'downloading' is registered.*"
                                 "ImportError: No module named os_brick_x"):
            template_handlers.load('downloading')


def test_download_keeps_native_qcow2(glance, cache, tmp_path):
    glance.add(_qcow2(tmp_path), 'qcow2')
    target = str(cache / 'tmpl')
    downloading.DownloadingTemplateImageHandler().fetch_image(
        None, IMAGE_ID, target, 'qcow2')
    assert images.qemu_img_info(target).file_format == 'qcow2'
    assert os.listdir(cache) == ['tmpl']


def test_download_converts_as_stock_when_not_native(conf, glance, cache,
                                                    tmp_path):
    conf.config(force_raw_images=True)
    glance.add(_qcow2(tmp_path), 'qcow2')
    target = str(cache / 'tmpl')
    downloading.DownloadingTemplateImageHandler().fetch_image(
        None, IMAGE_ID, target)
    assert images.qemu_img_info(target).file_format == 'raw'
    assert os.listdir(cache) == ['tmpl']


def test_existing_template_is_not_downloaded_again(glance, cache,
                                                   tmp_path):
    glance.add(_qcow2(tmp_path), 'qcow2')
    target = str(cache / 'tmpl')
    handler = downloading.DownloadingTemplateImageHandler()
    for _ in range(3):
        handler.fetch_image(None, IMAGE_ID, target, 'qcow2')
    assert glance.downloads == 1


@pytest.mark.parametrize('handler_cls', [
    downloading.DownloadingTemplateImageHandler,
    volume_linking.VolumeLinkingTemplateImageHandler])
def test_fetch_inside_stock_cache_lock_does_not_deadlock(conf, glance, cache,
                                                         tmp_path,
                                                         handler_cls):
    """Stock ``Image.cache()`` holds the external lock named after the
    template file while it calls the fetch function, that is the handler;
    oslo.concurrency locks are not reentrant. The handler's own lock must
    be another one, or every build hangs (it did)."""
    conf.config(instances_path=str(tmp_path))
    glance.add(_qcow2(tmp_path), 'qcow2')
    target = str(cache / 'tmpl')
    stock_lock = nova_utils.synchronized(
        os.path.basename(target), external=True,
        lock_path=str(tmp_path / 'locks'))
    done = []

    @stock_lock
    def as_image_cache_does():
        handler_cls().fetch_image(None, IMAGE_ID, target, 'qcow2')
        done.append(target)

    thread = threading.Thread(target=as_image_cache_does, daemon=True)
    thread.start()
    thread.join(30)
    assert done == [target], 'fetch_image deadlocked under the cache lock'
    assert images.qemu_img_info(target).file_format == 'qcow2'


def _bad(kind, glance, tmp_path):
    if kind == 'hash':
        glance.add(_qcow2(tmp_path), 'qcow2')
        path, meta = glance.images[IMAGE_ID]
        meta['os_hash_value'] = '0' * 128
        return 'Corrupt image download. Hash was'
    if kind == 'cut':
        glance.add(_qcow2(tmp_path), 'qcow2')
        glance.cut_after = 1000
        return 'connection reset'
    if kind == 'backing':
        base = _qcow2(tmp_path, 'base.qcow2')
        glance.add(_qcow2(tmp_path, 'bad.qcow2', '-b', base, '-F', 'qcow2'),
                   'qcow2')
        return 'safety check'
    if kind == 'data-file':
        glance.add(_qcow2(tmp_path, 'bad.qcow2', '-o',
                          'data_file=%s' % (tmp_path / 'data.raw')),
                   'qcow2')
        return 'safety check'
    # content that is not what disk_format says
    raw = tmp_path / 'img.raw'
    raw.write_bytes(b'\0' * 1024 * 1024)
    glance.add(str(raw), 'qcow2')
    return 'not in a supported format'


@pytest.mark.parametrize('kind', ['hash', 'cut', 'backing', 'data-file',
                                  'content'])
def test_a_bad_download_leaves_the_cache_clean(glance, cache, tmp_path,
                                               kind):
    reason = _bad(kind, glance, tmp_path)
    with pytest.raises(exception.NovaException, match=reason):
        downloading.DownloadingTemplateImageHandler().fetch_image(
            None, IMAGE_ID, str(cache / 'tmpl'), 'qcow2')
    assert os.listdir(cache) == []


def test_a_full_disk_leaves_the_cache_clean(glance, cache, tmp_path):
    glance.add(_qcow2(tmp_path), 'qcow2')

    download = glance.download

    def enospc(context, image_id, data=None, trusted_certs=None):
        class Full:
            def write(self, chunk):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        download(context, image_id, data=Full())

    with mock.patch.object(downloading.IMAGE_API, 'download', enospc):
        with pytest.raises(exception.ImageUnacceptable,
                           match='No space left'):
            downloading.DownloadingTemplateImageHandler().fetch_image(
                None, IMAGE_ID, str(cache / 'tmpl'), 'qcow2')
    assert os.listdir(cache) == []


def test_the_data_is_hashed_once(glance, cache, tmp_path, monkeypatch):
    # glanceclient verified the download (os_hash_value): the handler does
    # not read and hash the data a second time.
    path = _qcow2(tmp_path)
    glance.add(path, 'qcow2')
    hashed = []
    new = hashlib.new

    class Counting:
        def __init__(self, algo):
            self._h = new(algo)

        def update(self, data):
            hashed.append(len(data))
            self._h.update(data)

        def hexdigest(self):
            return self._h.hexdigest()

    monkeypatch.setattr(hashlib, 'new', Counting)
    downloading.DownloadingTemplateImageHandler().fetch_image(
        None, IMAGE_ID, str(cache / 'tmpl'), 'qcow2')
    assert sum(hashed) == os.path.getsize(path)
    assert (cache / 'tmpl').read_bytes() == open(path, 'rb').read()


@pytest.mark.parametrize('tail', [0, 3 * 64 * 1024 + 512])
def test_a_download_leaves_runs_of_zeros_as_holes(glance, cache, tmp_path,
                                                  tail):
    # A raw image of data and zeros (ending in zeros, or not; a last chunk
    # shorter than the others): the template reads back byte for byte, is
    # its size, and holds only the data's blocks, as a sparse copy would.
    mib = 1024 * 1024
    path = tmp_path / 'img.raw'
    with open(path, 'wb') as f:
        f.write(os.urandom(mib))
        f.write(bytes(6 * mib))
        f.write(os.urandom(mib) + b'x')
        f.write(bytes(tail))
    glance.add(str(path), 'raw')
    target = cache / 'tmpl'
    downloading.DownloadingTemplateImageHandler().fetch_image(
        None, IMAGE_ID, str(target))
    assert target.read_bytes() == path.read_bytes()
    assert os.path.getsize(target) == os.path.getsize(path)
    allocated = os.stat(target).st_blocks * 512
    assert 2 * mib <= allocated <= 2 * mib + 2 * 64 * 1024, allocated


@pytest.fixture
def fsyncs(monkeypatch):
    """The files this process fsyncs, with whether the template existed
    then."""
    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        path = os.readlink('/proc/self/fd/%d' % fd)
        synced.append((os.path.basename(path),
                       sorted(os.listdir(os.path.dirname(path)))))
        real_fsync(fd)

    monkeypatch.setattr(os, 'fsync', fsync)
    return synced


def test_a_kept_download_is_synced_before_it_is_the_template(
        glance, cache, tmp_path, fsyncs):
    glance.add(_qcow2(tmp_path), 'qcow2')
    downloading.DownloadingTemplateImageHandler().fetch_image(
        None, IMAGE_ID, str(cache / 'tmpl'), 'qcow2')
    assert fsyncs == [('tmpl.part', ['tmpl.part'])]
    assert os.listdir(cache) == ['tmpl']


def test_a_converted_download_is_not_synced(conf, glance, cache, tmp_path,
                                            fsyncs):
    # Issue 15: it is read back from the page cache by the conversion and
    # deleted; the template is qemu-img's output, which qemu-img flushes
    # (tests/real/test_template_handlers.py). Stock syncs it for nothing.
    conf.config(force_raw_images=True)
    glance.add(_qcow2(tmp_path), 'qcow2')
    downloading.DownloadingTemplateImageHandler().fetch_image(
        None, IMAGE_ID, str(cache / 'tmpl'))
    assert fsyncs == []
    assert images.qemu_img_info(str(cache / 'tmpl')).file_format == 'raw'
    assert os.listdir(cache) == ['tmpl']


def test_a_failed_sync_leaves_the_cache_clean(glance, cache, tmp_path,
                                              monkeypatch):
    # A full disk found only as the data is written back.
    glance.add(_qcow2(tmp_path), 'qcow2')

    def enospc(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, 'fsync', enospc)
    with pytest.raises(exception.ImageUnacceptable,
                       match='could not write the image into .*tmpl.part: '
                             '.*No space left'):
        downloading.DownloadingTemplateImageHandler().fetch_image(
            None, IMAGE_ID, str(cache / 'tmpl'), 'qcow2')
    assert os.listdir(cache) == []


def test_a_signature_failure_empties_the_hole_keeping_file(tmp_path):
    # What Nova's image API does to ``data`` when the signature fails.
    with open(tmp_path / 'part', 'wb') as f:
        writer = downloading.HoleKeepingWriter(f)
        assert writer.write(b'data') == 4
        assert writer.write(bytes(8192)) == 8192
        writer.truncate(0)
    assert (tmp_path / 'part').read_bytes() == b''


# -- volume-based-linking -----------------------------------------------------

class FakeCinder:
    """Attachments as Cinder would record them (no Cinder runs here)."""

    def __init__(self, device):
        self.device = device
        self.attachments = {}
        self.read_only = set()
        self.fail = False

    def attachment_create(self, context, volume_id, instance_id,
                          connector=None, mountpoint=None):
        if self.fail:
            raise exception.VolumeNotFound(volume_id=volume_id)
        aid = 'att-%d' % (len(self.attachments) + 1)
        self.attachments[aid] = {'volume_id': volume_id,
                                 'instance': instance_id,
                                 'completed': False}
        return {'id': aid, 'connection_info': {
            'driver_volume_type': 'local',
            'data': {'device_path': self.device}}}

    def attachment_create_read_only(self, context, volume_id, instance_id,
                                    connector):
        attachment = self.attachment_create(context, volume_id, instance_id,
                                            connector=connector)
        self.read_only.add(attachment['id'])
        return attachment

    def attachment_complete(self, context, attachment_id):
        self.attachments[attachment_id]['completed'] = True

    def attachment_delete(self, context, attachment_id):
        del self.attachments[attachment_id]


@pytest.fixture
def brick_in_process():
    """os-brick's privileged calls (connector properties) run in this
    process instead of a privsep daemon: the tests run as root."""
    from os_brick import privileged
    privileged.default.set_client_mode(False)
    yield
    privileged.default.set_client_mode(True)


@pytest.fixture
def linking(conf, glance, tmp_path, brick_in_process):
    device = str(tmp_path / 'volume')          # the "device": a real file
    handler = volume_linking.VolumeLinkingTemplateImageHandler()
    handler.volume_api = FakeCinder(device)
    return handler


def _cinder_image(glance, device_src, fmt):
    glance.add(device_src, fmt, locations=[
        {'url': 'cinder://%s' % VOLUME_ID, 'metadata': {}}])


def test_linking_links_the_volume_and_copies_nothing(linking, glance,
                                                     cache, tmp_path):
    qemu_img('create', '-f', 'qcow2', linking.volume_api.device, '16M')
    _cinder_image(glance, linking.volume_api.device, 'qcow2')
    target = str(cache / 'tmpl')
    linking.fetch_image(None, IMAGE_ID, target, 'qcow2')
    assert os.path.islink(target)
    assert os.readlink(target) == linking.volume_api.device
    assert glance.downloads == 0
    assert linking.cached_bytes(target) == 0
    (att,) = linking.volume_api.attachments.values()
    assert att['volume_id'] == VOLUME_ID and att['completed']
    assert att['instance'] == volume_linking.owner_uuid('host1')

    # After a restart: the link is made again from what was recorded.
    os.unlink(target)
    volume_linking.VolumeLinkingTemplateImageHandler().init(str(cache))
    assert os.readlink(target) == linking.volume_api.device

    linking.remove_image(target)
    assert not os.path.lexists(target)
    assert linking.volume_api.attachments == {}
    assert os.listdir(cache / volume_linking.STATE_DIR) == []


@pytest.mark.parametrize('case', ['no-location', 'attach-fails',
                                  'needs-conversion'])
def test_linking_falls_back_to_downloading(conf, linking, glance, cache,
                                           tmp_path, case):
    qemu_img('create', '-f', 'qcow2', linking.volume_api.device, '16M')
    if case == 'no-location':
        glance.add(linking.volume_api.device, 'qcow2')
    else:
        _cinder_image(glance, linking.volume_api.device, 'qcow2')
    if case == 'attach-fails':
        linking.volume_api.fail = True
    native = None if case == 'needs-conversion' else 'qcow2'
    conf.config(force_raw_images=True)
    target = str(cache / 'tmpl')
    linking.fetch_image(None, IMAGE_ID, target, native)
    assert not os.path.islink(target) and os.path.isfile(target)
    assert glance.downloads == 1
    # Nothing left attached.
    assert linking.volume_api.attachments == {}


def test_linking_probes_the_connector_once_until_a_link_fails(
        linking, glance, cache):
    """os-brick's connector probes (a process per fact) run for the first
    link, not for every one; a failed attachment makes the next link probe
    again."""
    qemu_img('create', '-f', 'qcow2', linking.volume_api.device, '16M')
    _cinder_image(glance, linking.volume_api.device, 'qcow2')
    probe = volume_linking.brick_connector.get_connector_properties
    with mock.patch.object(volume_linking.brick_connector,
                           'get_connector_properties',
                           side_effect=probe) as probed:
        for name in ('a', 'b'):
            linking.fetch_image(None, IMAGE_ID, str(cache / name), 'qcow2')
            assert os.path.islink(cache / name)
        assert probed.call_count == 1
        connectors = [c.kwargs['host'] for c in probed.call_args_list]
        assert connectors == ['host1']

        linking.volume_api.fail = True
        linking.fetch_image(None, IMAGE_ID, str(cache / 'c'), 'qcow2')
        assert not os.path.islink(cache / 'c')      # downloaded instead
        linking.volume_api.fail = False
        linking.fetch_image(None, IMAGE_ID, str(cache / 'd'), 'qcow2')
        assert os.path.islink(cache / 'd')
        assert probed.call_count == 2


# -- a linked template checked again before each use (issue 27) -------------

@pytest.fixture
def privsep():
    """Nova's privileged calls (a template's time stamps renewed) in this
    process."""
    from nova.tests import fixtures as nova_fixtures
    fix = nova_fixtures.PrivsepFixture()
    fix.setUp()
    yield
    fix.cleanUp()


def _linked_raw(linking, glance, cache):
    device = linking.volume_api.device
    with open(device, 'wb') as f:
        f.truncate(16 << 20)
    _cinder_image(glance, device, 'raw')
    target = str(cache / 'tmpl')
    linking.fetch_image(None, IMAGE_ID, target)
    return device, target


def test_a_link_records_the_format_it_was_accepted_in(linking, glance,
                                                      cache, privsep):
    _, target = _linked_raw(linking, glance, cache)
    assert linking.linked(target)['format'] == 'raw'
    fmt, inspector = volume_linking.checked(target)
    assert fmt == 'raw' and str(inspector) == 'raw'


@pytest.mark.parametrize('case', ['rewritten', 'unsafe'])
def test_a_changed_linked_template_is_refused_and_kept(
        linking, glance, cache, tmp_path, caplog, privsep, case):
    device, target = _linked_raw(linking, glance, cache)
    other = str(tmp_path / 'other')
    if case == 'unsafe':
        qemu_img('create', '-f', 'qcow2', '-b', '/etc/hostname', '-F',
                 'raw', other, '16M')
    else:
        qemu_img('create', '-f', 'qcow2', other, '16M')
    with open(other, 'rb') as src, open(device, 'r+b') as dst:
        dst.write(src.read())
    with pytest.raises(imgtype_exception.LinkedTemplateChanged) as e:
        volume_linking.checked(target)
    assert isinstance(e.value, exception.ImageUnacceptable)
    assert IMAGE_ID in str(e.value) and target in str(e.value)
    assert {'rewritten': 'is now qcow2',
            'unsafe': "fails Nova's"}[case] in str(e.value)
    assert 'Refused, never followed' in caplog.text
    # The link stays: disks made on it before still use the volume.
    assert os.path.islink(target)
    assert len(linking.volume_api.attachments) == 1
    assert linking.linked(target)['format'] == 'raw'


def test_a_link_of_an_earlier_release_gets_its_format_recorded(
        linking, glance, cache, privsep):
    _, target = _linked_raw(linking, glance, cache)
    state = linking.linked(target)
    del state['format']
    linking._record(target, state)
    assert volume_linking.checked(target)[0] == 'raw'
    assert linking.linked(target)['format'] == 'raw'


def test_a_copy_of_a_linked_template_is_checked_as_accepted(
        linking, glance, cache, tmp_path, privsep):
    _, target = _linked_raw(linking, glance, cache)
    copy = str(tmp_path / 'copy')
    qemu_img('create', '-f', 'qcow2', copy, '16M')
    with pytest.raises(imgtype_exception.LinkedTemplateChanged,
                       match='is now qcow2'):
        volume_linking.check_copy(target, copy)


# -- read-only attachments (Cinder's API mocked: no Cinder runs here) ---------

def test_image_volumes_are_attached_read_only_where_cinder_can(monkeypatch):
    client = mock.Mock()
    client.attachments.create.return_value = {
        'id': 'att-1', 'connection_info': {'driver_volume_type': 'local',
                                           'data': {}}}
    asked = []

    def cinderclient(context, microversion=None, **kwargs):
        asked.append(microversion)
        return client

    monkeypatch.setattr(volume_linking.cinder, 'cinderclient', cinderclient)
    api = volume_linking.ImageVolumeAPI()
    attachment = api.attachment_create_read_only(
        None, 'vol-1', 'owner', {'host': 'h'})
    assert asked == ['3.54']
    client.attachments.create.assert_called_once_with(
        'vol-1', {'host': 'h'}, 'owner', mode='ro')
    assert attachment['id'] == 'att-1'
    assert attachment['connection_info']['driver_volume_type'] == 'local'


def test_older_cinder_gets_stocks_read_write_attachment(monkeypatch):
    def cinderclient(context, microversion=None, **kwargs):
        raise exception.CinderAPIVersionNotAvailable(version=microversion)

    monkeypatch.setattr(volume_linking.cinder, 'cinderclient', cinderclient)
    api = volume_linking.ImageVolumeAPI()
    with mock.patch.object(api, 'attachment_create',
                           return_value={'id': 'att-rw'}) as create:
        attachment = api.attachment_create_read_only(
            None, 'vol-1', 'owner', {'host': 'h'})
    create.assert_called_once_with(None, 'vol-1', 'owner',
                                   connector={'host': 'h'})
    assert attachment == {'id': 'att-rw'}
