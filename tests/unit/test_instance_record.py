"""InstanceRecord alone: no driver; the instance's record as the resolver
writes it, Nova's image API faked."""

import uuid
from unittest import mock

import nova.conf
import pytest
from nova import exception as nova_exception
from nova import objects
from nova.compute import vm_states

from nova_imgtype import record as record_mod
from nova_imgtype.virt.libvirt import instance_record
from nova_imgtype.virt.libvirt import resolver as resolver_mod

CONF = nova.conf.CONF
OLD, NEW = str(uuid.uuid4()), str(uuid.uuid4())
objects.register_all()


@pytest.fixture
def record(conf):
    conf.config(group='libvirt', images_type='raw',
                images_type_mapping='qcow2:qcow2')
    image_api = mock.Mock()
    image_api.get.return_value = {'id': OLD, 'disk_format': 'qcow2',
                                  'properties': {}}
    return instance_record.InstanceRecord(
        resolver_mod.BackendResolver(CONF), mock.Mock(), image_api, CONF)


def _instance(vm_state=vm_states.BUILDING, **sysmeta):
    inst = objects.Instance(uuid=str(uuid.uuid4()), image_ref=NEW,
                            vm_state=vm_state, system_metadata=sysmeta,
                            flavor=objects.Flavor(root_gb=1, ephemeral_gb=0,
                                                  swap=0))
    inst.obj_reset_changes()
    inst.save = mock.Mock()
    return inst


def _meta(fmt):
    return objects.ImageMeta.from_dict({'id': NEW, 'disk_format': fmt})


def test_a_build_is_recorded_and_saved_before_its_disks(record):
    inst = _instance()
    record.before_spawn(inst, _meta('qcow2'), booted_from_volume=False)
    assert record_mod.backend(inst.system_metadata) == 'qcow2'
    assert record_mod.get_value(inst, record_mod.IMAGE) == NEW
    inst.save.assert_called_once()


def test_a_build_from_a_volume_gets_images_type(record):
    inst = _instance()
    record.before_spawn(inst, _meta('qcow2'), booted_from_volume=True)
    assert record_mod.backend(inst.system_metadata) == 'raw'


def test_a_rebuild_to_a_format_this_host_cannot_use_is_refused(record,
                                                               conf):
    conf.config(group='compute', image_type_exclude_list=['vhdx'])
    inst = _instance(vm_states.ACTIVE, **{record_mod.IMAGE: OLD})
    with pytest.raises(nova_exception.InstanceFaultRollback,
                       match='cannot use disk_format vhdx'):
        record.check_rebuild(None, inst, _meta('vhdx'),
                             booted_from_volume=False)
    # The image is the instance's again, saved.
    assert inst.image_ref == OLD
    assert inst.system_metadata['image_base_image_ref'] == OLD
    inst.save.assert_called_once()


def test_a_rebuild_of_a_volume_backed_instance_is_the_volumes(record,
                                                              conf):
    conf.config(group='compute', image_type_exclude_list=['vhdx'])
    inst = _instance(vm_states.ACTIVE, **{record_mod.IMAGE: OLD})
    record.check_rebuild(None, inst, _meta('vhdx'), booted_from_volume=True)
    assert inst.image_ref == NEW
    inst.save.assert_not_called()


def test_a_refused_evacuation_keeps_the_record_it_had(record):
    """An evacuation whose disks would be made anew here, of a backend
    this host cannot serve at all: refused, and the instance's record (its
    disks are still where it says, on the source) is as it was."""
    recorded = {record_mod.BACKEND: 'lvm', record_mod.STORAGE: 'pools',
                record_mod.POOL: 'nova-disks-pool-logical',
                record_mod.IMAGE: NEW}
    inst = _instance(vm_states.ACTIVE, **recorded)
    with pytest.raises(nova_exception.InstanceFaultRollback,
                       match="image backend 'lvm'"):
        record.check_rebuild(None, inst, _meta('raw'),
                             booted_from_volume=False, disks_made_anew=True)
    assert {k: inst.system_metadata.get(k) for k in recorded} == recorded
