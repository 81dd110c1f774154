"""TemplateCache alone: no driver; the instance's record, the handlers
faked where the test only asks which one is used."""

import os
import uuid
from unittest import mock

import nova.conf
import pytest
from nova import exception as nova_exception
from nova import objects
from nova.virt.libvirt import imagecache as nova_imagecache

from nova_imgtype import exception
from nova_imgtype import record as record_mod
from nova_imgtype.virt.libvirt import imagebackend
from nova_imgtype.virt.libvirt import imagecache
from nova_imgtype.virt.libvirt import resolver as resolver_mod
from nova_imgtype.virt.libvirt import template_cache

CONF = nova.conf.CONF
objects.register_all()


class CopiesLinks:
    """A backend that would copy a linked template as a link."""

    accepts_linked_templates = False


class Overlays:
    """A backend that reads a template (an overlay's backing)."""

    accepts_linked_templates = True


@pytest.fixture
def handlers():
    linking = mock.Mock(links_templates=True)
    downloading = mock.Mock(links_templates=False)
    return linking, downloading


@pytest.fixture
def cache(conf, handlers):
    conf.config(group='libvirt', images_type='raw',
                images_type_mapping='qcow2:qcow2')
    resolver = resolver_mod.BackendResolver(CONF)
    backend = imagebackend.Backend(True, resolver.decision_for, CONF)
    return template_cache.TemplateCache(resolver, backend, None, *handlers,
                                        CONF)


def _instance(cache, image_id, fmt='qcow2'):
    inst = objects.Instance(
        uuid=str(uuid.uuid4()), image_ref=image_id,
        system_metadata={'image_disk_format': fmt})
    cache._resolver.record(inst, cache._resolver.decide(fmt))
    return inst


def test_a_native_image_is_fetched_under_its_native_name_and_recorded(
        cache, handlers):
    image_id = str(uuid.uuid4())
    inst = _instance(cache, image_id)
    fetch, name = cache.fetch_plan(
        Overlays, None, nova_imagecache.get_cache_fname(image_id),
        image_id, inst)
    assert name == imagecache.native_cache_fname(image_id, 'qcow2')
    assert record_mod.template(inst.system_metadata) == (image_id, name)
    fetch(None, '/target', image_id)
    handlers[0].fetch_image.assert_called_once_with(
        None, image_id, '/target', 'qcow2', None)


def test_another_images_cache_name_is_refused(cache):
    image_id, other = str(uuid.uuid4()), str(uuid.uuid4())
    inst = _instance(cache, image_id)
    with pytest.raises(nova_exception.InvalidDiskInfo,
                       match='not a cache name of image'):
        cache.fetch_plan(type(None), None,
                         nova_imagecache.get_cache_fname(other), image_id,
                         inst)


def test_a_name_other_than_the_recorded_template_is_refused(cache):
    image_id = str(uuid.uuid4())
    inst = _instance(cache, image_id)
    record_mod.set_template(inst, image_id,
                            nova_imagecache.get_cache_fname(image_id))
    with pytest.raises(nova_exception.InvalidDiskInfo,
                       match='not the one the instance'):
        cache.fetch_plan(type(None), None,
                         imagecache.native_cache_fname(image_id, 'qcow2'),
                         image_id, inst)


def test_a_backend_copying_a_link_as_a_link_downloads(cache, handlers,
                                                      tmp_path):
    image_id = str(uuid.uuid4())
    assert cache.handler_for(Overlays, 'x', image_id) is handlers[0]
    assert cache.handler_for(CopiesLinks, 'x', image_id) is handlers[1]
    # A template already linked under that name is refused, not aliased.
    os.makedirs(cache.cache_dir)
    os.symlink('/dev/null', os.path.join(cache.cache_dir, 'x'))
    with pytest.raises(exception.LinkedTemplateUnsafe):
        cache.handler_for(CopiesLinks, 'x', image_id)
