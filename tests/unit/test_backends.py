"""The nova_imgtype.image_backends namespace and per-instance Backend."""

import textwrap
import uuid

import nova.conf
import pytest
from nova import objects
from nova.virt.libvirt import imagebackend as nova_imagebackend

import nova_imgtype.conf  # noqa: F401
from nova_imgtype import exception
from nova_imgtype.virt.libvirt import backends
from nova_imgtype.virt.libvirt import flat
from nova_imgtype.virt.libvirt import imagebackend
from nova_imgtype.virt.libvirt import mapping
from nova_imgtype.virt.libvirt import qcow2
from nova_imgtype.virt.libvirt import rbd
from nova_imgtype.virt.libvirt import resolver as resolver_mod
from nova_imgtype.virt.libvirt import sizes
from nova_imgtype.virt.libvirt import storage

CONF = nova.conf.CONF
objects.register_all()


def test_stock_backends_resolve_to_novas_classes():
    # Flat: stock's, copying a linked template as data (see flat.py);
    # both read sizes in process (sizes.InProcessSizes).
    assert backends.get_class('raw') is flat.Flat
    assert backends.get_class('flat') is flat.Flat
    assert flat.Flat.__bases__ == (sizes.InProcessSizes,
                                   nova_imagebackend.Flat)
    # Qcow2: stock's, not misreading swap_1 as a legacy backing (qcow2.py).
    assert backends.get_class('qcow2') is qcow2.Qcow2
    assert qcow2.Qcow2.__bases__ == (sizes.InProcessSizes,
                                     nova_imagebackend.Qcow2)
    assert backends.get_class('lvm') is nova_imagebackend.Lvm
    # Rbd: stock's, finding Glance's pool for a direct snapshot of a
    # disk cloned from a template of Nova's pool (rbd.py).
    assert backends.get_class('rbd') is rbd.Rbd
    assert rbd.Rbd.__bases__ == (nova_imagebackend.Rbd,)
    assert backends.native_formats('rbd') == ('raw',)
    assert backends.accepts_linked_templates(rbd.Rbd)
    assert backends.get_class('ploop') is nova_imagebackend.Ploop


def test_libvirt_storage_is_registered():
    from nova_imgtype.virt.libvirt import storage
    assert backends.get_class('libvirt_storage') is storage.LibvirtStorage
    assert backends.native_formats('libvirt_storage') == ('raw', 'qcow2')


def test_unknown_backend():
    with pytest.raises(exception.UnknownImageBackend, match="'nope'"):
        backends.get_class('nope')


def test_default_follows_use_cow_images():
    assert backends.resolve_name('default', True) == 'qcow2'
    assert backends.resolve_name('default', False) == 'flat'
    assert backends.resolve_name('lvm', True) == 'lvm'


@pytest.fixture
def third_party(tmp_path, monkeypatch):
    """A distribution, installed on sys.path for real, registering a
    backend 'vhdstore' that holds vhd images natively."""
    (tmp_path / 'vhdstore_backend.py').write_text(textwrap.dedent('''
        from nova.virt.libvirt import imagebackend

        class VhdStore(imagebackend.Flat):
            native_disk_formats = ('vhd',)

            @classmethod
            def host_support_error(cls, conf):
                return None if conf.host == 'vhd-host' else 'not vhd-host'
    '''))
    dist = tmp_path / 'vhdstore-1.0.dist-info'
    dist.mkdir()
    (dist / 'METADATA').write_text('Name: vhdstore\nVersion: 1.0\n')
    (dist / 'entry_points.txt').write_text(
        '[nova_imgtype.image_backends]\n'
        'vhdstore = vhdstore_backend:VhdStore\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    backends.reset()
    yield
    backends.reset()


def test_third_party_backend_is_usable_in_the_mapping(third_party, conf):
    m = mapping.parse('vhd:vhdstore, qcow2:qcow2')
    assert m['vhd'] == 'vhdstore'
    assert backends.native_formats('vhdstore') == ('vhd',)
    with pytest.raises(exception.InvalidImagesTypeMapping,
                       match='not vhd-host'):
        mapping.check_host(m, CONF)
    conf.config(host='vhd-host')
    mapping.check_host(m, CONF)
    with pytest.raises(exception.InvalidImagesTypeMapping,
                       match="'vhdstore' cannot use raw"):
        mapping.parse('raw:vhdstore')


def _instance(**sysmeta):
    return objects.Instance(uuid=str(uuid.uuid4()), system_metadata=sysmeta,
                            image_ref='img')


@pytest.fixture
def backend(conf):
    return imagebackend.Backend(
        True, resolver_mod.BackendResolver(CONF).decision_for, CONF)


def test_recorded_backend_wins_over_images_type(conf, backend):
    conf.config(images_type='flat', group='libvirt')
    inst = _instance(imgtype_backend='qcow2',
                     imgtype_native_formats='qcow2')
    for name in ('disk', 'disk.local', 'disk.swap', 'disk.eph0',
                 'disk.rescue'):
        assert isinstance(backend.by_name(inst, name),
                          nova_imagebackend.Qcow2), name
    # What stock passes when it means "the instance's backend".
    assert isinstance(backend.by_name(inst, 'disk', 'flat'),
                      nova_imagebackend.Qcow2)
    assert isinstance(backend.by_name(inst, 'disk', 'default'),
                      nova_imagebackend.Qcow2)
    # An explicit other type is kept.
    assert isinstance(backend.by_name(inst, 'disk', 'raw'),
                      nova_imagebackend.Flat)


def test_kernel_and_config_drive_keep_stock_types(conf, backend):
    conf.config(images_type='raw', group='libvirt')
    inst = _instance(imgtype_backend='qcow2')
    assert isinstance(backend.by_name(inst, 'kernel', 'raw'),
                      nova_imagebackend.Flat)
    assert isinstance(backend.by_name(inst, 'ramdisk.rescue', 'raw'),
                      nova_imagebackend.Flat)
    assert isinstance(backend.by_name(inst, 'disk.config', 'raw'),
                      nova_imagebackend.Flat)


def test_legacy_instance_follows_images_type_as_stock(conf, backend):
    inst = _instance()
    conf.config(images_type='flat', group='libvirt')
    assert isinstance(backend.by_name(inst, 'disk'), nova_imagebackend.Flat)
    conf.config(images_type='qcow2', group='libvirt')
    assert isinstance(backend.by_name(inst, 'disk'), nova_imagebackend.Qcow2)


def test_scope_makes_backend_per_instance(conf, backend):
    conf.config(images_type='flat', group='libvirt')
    inst = _instance(imgtype_backend='rbd')
    assert backend.backend() is flat.Flat
    with backend.scope(inst):
        assert backend.backend() is rbd.Rbd
        assert backend.backend().is_shared_block_storage()
    assert backend.backend() is flat.Flat


def test_by_libvirt_path_defaults_to_instance_backend(conf, backend,
                                                      tmp_path):
    conf.config(images_type='flat', group='libvirt')
    inst = _instance(imgtype_backend='qcow2')
    img = backend.by_libvirt_path(inst, str(tmp_path / 'disk'))
    assert isinstance(img, nova_imagebackend.Qcow2)


@pytest.mark.parametrize('name,safe', [
    ('raw', True), ('flat', True), ('qcow2', True), ('lvm', True),
    ('rbd', True), ('libvirt_storage', True),
    # cp -r of the template (a link stays a link): downloaded templates.
    ('ploop', False)])
def test_which_backends_take_linked_templates(name, safe):
    assert backends.accepts_linked_templates(backends.get_class(name)) is safe


def test_third_party_backend_takes_no_linked_template_unless_it_says_so():
    class Copies(nova_imagebackend.Flat):
        pass

    class Overlays(nova_imagebackend.Flat):
        accepts_linked_templates = True

    assert not backends.accepts_linked_templates(Copies)
    assert backends.accepts_linked_templates(Overlays)


class _Pools:
    """StoragePools whose libvirt answers ``error`` for any pool."""

    def __init__(self, error):
        self._error = error

    def get(self, name):
        raise self._error

    def definition(self, pool):
        raise AssertionError('no pool to read')


def test_a_pool_libvirt_does_not_answer_for_is_not_taken_as_not_here(conf):
    # "Not found" is known: this host holds none of it (not shared).
    found = imagebackend.Backend(
        True, resolver_mod.BackendResolver(CONF).decision_for, CONF,
        pools=_Pools(exception.PoolNotFound(pool='p')))
    assert found._storage_class('p') is storage.LibvirtStorage
    # A libvirt that does not answer says nothing of the pool, least of
    # all that its disks are this host's own to delete.
    unavailable = exception.StorageUnavailable(pool='p', reason='down')
    assert isinstance(unavailable, exception.StorageException)
    down = imagebackend.Backend(
        True, resolver_mod.BackendResolver(CONF).decision_for, CONF,
        pools=_Pools(unavailable))
    with pytest.raises(exception.StorageUnavailable):
        down._storage_class('p')
