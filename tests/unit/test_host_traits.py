"""HostTraits alone: no driver, the host's configuration."""

import uuid

import nova.conf
from nova.compute import provider_tree as provider_tree_mod

from nova_imgtype.virt.libvirt import host_traits
from nova_imgtype.virt.libvirt import resolver as resolver_mod

CONF = nova.conf.CONF


def _traits(conf, **flags):
    conf.config(group='libvirt', **flags)
    return host_traits.HostTraits(resolver_mod.BackendResolver(CONF), CONF)


def test_a_mapped_format_is_booted_and_native(conf):
    host = _traits(conf, images_type='raw', images_type_mapping='qcow2:qcow2')
    caps = host.image_type_capabilities()
    assert caps['supports_image_type_qcow2'] is True
    assert caps['supports_image_type_raw'] is True
    assert 'CUSTOM_IMGTYPE_NATIVE_QCOW2' in host.custom_traits
    assert 'CUSTOM_IMGTYPE_BACKEND_QCOW2' in host.custom_traits


def test_an_excluded_format_is_not_said_native(conf):
    conf.config(group='compute', image_type_exclude_list=['qcow2'])
    host = _traits(conf, images_type='raw', images_type_mapping='qcow2:qcow2')
    assert 'CUSTOM_IMGTYPE_NATIVE_QCOW2' not in host.custom_traits


def test_the_providers_traits_are_this_configurations(conf):
    host = _traits(conf, images_type='qcow2')
    tree = provider_tree_mod.ProviderTree()
    tree.new_root('host1', uuid.uuid4())
    tree.add_traits('host1', 'CUSTOM_IMGTYPE_BACKEND_LVM', 'CUSTOM_OTHER',
                    'CUSTOM_IMGTYPE_NATIVE_VMDK')
    host.update(tree, 'host1')
    got = tree.data('host1').traits
    assert set(host.custom_traits) <= got
    # A configuration before's traits go; others' stay.
    assert 'CUSTOM_IMGTYPE_BACKEND_LVM' not in got
    assert 'CUSTOM_IMGTYPE_NATIVE_VMDK' not in got
    assert 'CUSTOM_OTHER' in got
