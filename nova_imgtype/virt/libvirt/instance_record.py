"""The record of an instance's storage across its life on this host.

:class:`InstanceRecord` writes, through the resolver, what an instance's
disks are when this host builds it (decided from the image's format and
this host's configuration), keeps it through a rebuild, an evacuation and
an unshelve (this host's pool of the recorded storage; new disks where
this host makes them; the config drive where the record says), and
refuses a rebuild this host cannot do before stock destroys anything,
giving the instance its image back. The driver asks it before stock's
``prepare_for_spawn``, ``spawn`` and ``rebuild``.
"""

from __future__ import annotations

from typing import Any

from nova import exception as nova_exception
from nova import objects
from nova import utils
from nova.compute import vm_states
from nova.i18n import _
from oslo_config import cfg
from oslo_log import log as logging

from nova_imgtype import exception
from nova_imgtype import record as record_mod
from nova_imgtype.virt.libvirt import instance_disks
from nova_imgtype.virt.libvirt import resolver as resolver_mod

LOG = logging.getLogger(__name__)

#: The image the instance's disks were last made from: what a refused
#: rebuild puts back (the API has already replaced ``image_ref``).
SYSMETA_IMAGE = record_mod.IMAGE


class InstanceRecord:
    """What this host records of an instance's storage, and when.

    :param resolver: decides and records.
    :param disks: the instances' disks on this host's pools.
    :param image_api: Nova's image API (a refused rebuild's image).
    :param conf: the configuration nova-compute runs with.
    """

    def __init__(self, resolver: resolver_mod.BackendResolver,
                 disks: instance_disks.InstanceDisks, image_api: Any,
                 conf: cfg.ConfigOpts) -> None:
        self._resolver = resolver
        self._disks = disks
        self._image_api = image_api
        self._conf = conf

    def record_build(self, instance: objects.Instance,
                     disk_format: str | None
                     ) -> resolver_mod.BackendDecision:
        """The decision for a build of ``disk_format`` on this host,
        recorded in the instance (not saved)."""
        decision = self._resolver.decide(disk_format)
        self._resolver.record(instance, decision)
        record_mod.set_value(instance, SYSMETA_IMAGE, instance.image_ref)
        return decision

    def before_prepare(self, instance: objects.Instance) -> None:
        """A build's record, for the image's disk_format, which the compute
        manager saves with the instance next, before ``spawn``."""
        if instance.vm_state == vm_states.BUILDING:
            image_meta = instance.image_meta
            self.record_build(instance, (
                image_meta.disk_format if instance.image_ref and
                image_meta.obj_attr_is_set('disk_format') else None))

    def before_spawn(self, instance: objects.Instance,
                     image_meta: objects.ImageMeta,
                     booted_from_volume: bool) -> None:
        """The record stock's spawn makes the disks by, saved before any
        disk is made: a build's (the first host's or a reschedule's)
        decided here; a rebuild's, evacuation's or unshelve's kept, on this
        host's storage."""
        if (self._resolver.recorded(instance) is None or
                instance.vm_state == vm_states.BUILDING):
            disk_format = (None if booted_from_volume
                           else image_meta.obj_attr_is_set('disk_format') and
                           image_meta.disk_format or None)
            decision = self.record_build(instance, disk_format)
            # A build whose record prepare_for_spawn made and the manager
            # saved has nothing new.
            if 'system_metadata' in instance.obj_what_changed():
                instance.save()
            LOG.info('Image backend %(backend)s chosen for disk_format '
                     '%(fmt)s (native formats: %(native)s)',
                     {'backend': decision.backend, 'fmt': disk_format,
                      'native': ','.join(decision.native_formats) or '-'},
                     instance=instance)
            return
        if instance.vm_state == vm_states.SHELVED_OFFLOADED:
            self._storage_made_anew(instance)
        self._resolver.ensure_served(instance, self._conf.host)
        self._disks.use_this_hosts_pool(instance)
        # The config drive is made anew here: where the record says, or
        # for an instance recorded before it said, as a build's is.
        decision = self._resolver.decision_for(instance)
        if not decision.config_drive:
            made = self._resolver.with_config_drive(decision)
            if made.config_drive:
                record_mod.set_value(instance, record_mod.CONFIG_DRIVE,
                                     made.config_drive)
                instance.save()
        # Saved by the compute manager once the disks are made.
        record_mod.set_value(instance, SYSMETA_IMAGE, instance.image_ref)

    def check_rebuild(self, context: Any, instance: objects.Instance,
                      image_meta: Any, booted_from_volume: bool,
                      disks_made_anew: bool = False) -> None:
        """Refuse, before the old disk is touched, a rebuild to an image
        this host cannot use, or of an instance whose recorded storage it
        does not serve: InstanceFaultRollback, the image put back.

        Nova schedules no rebuild through request filters, so this is where
        an image of a format the host does not support is stopped; stock's
        rebuild destroys the disks before its spawn would refuse them.

        :param disks_made_anew: an evacuation whose disks are not on this
            host's storage (not shared): they are made here anew, where
            this host keeps new disks of the instance's backend, recorded
            before any is made (as an unshelve's).
        """
        disk_format = (image_meta.disk_format
                       if image_meta.obj_attr_is_set('disk_format') else None)
        # (reimage_boot_volume comes True from newer API microversions
        # whatever the root disk is: the root disk decides.)
        if disk_format and not booted_from_volume:
            supported = self._resolver.supported_formats() - set(
                self._conf.compute.image_type_exclude_list)
            if disk_format not in supported:
                self._put_back_image(context, instance)
                raise nova_exception.InstanceFaultRollback(
                    nova_exception.ImageUnacceptable(
                        image_id=image_meta.id if image_meta.obj_attr_is_set(
                            'id') else '',
                        reason=_('host %(host)s cannot use disk_format '
                                 '%(fmt)s (it can use: %(ok)s)') % {
                            'host': self._conf.host, 'fmt': disk_format,
                            'ok': ', '.join(sorted(supported))}))
        was = self._resolver.recorded(instance)
        if disks_made_anew:
            self._storage_made_anew(instance)
        try:
            self._resolver.ensure_served(instance, self._conf.host)
        except exception.BackendNotServedByHost as e:
            if was is not None and self._resolver.recorded(instance) != was:
                # Refused: the disks stay where the record said.
                self._resolver.record(instance, was)
                instance.save()
            self._put_back_image(context, instance)
            raise nova_exception.InstanceFaultRollback(e) from e

    def _put_back_image(self, context: Any,
                        instance: objects.Instance) -> None:
        """Give a refused rebuild its image back.

        The API saved the new image (``image_ref``, the ``image_*`` system
        metadata) before the rebuild reached this host; stock's conductor
        puts them back only on its own NoValidHost. Left so, every later
        move would be scheduled for the refused image's format.
        """
        orig = record_mod.get_value(instance, SYSMETA_IMAGE)
        if not orig or orig == instance.image_ref:
            return
        try:
            image = self._image_api.get(context, orig)
        except nova_exception.ImageNotFound:
            LOG.warning('Image %s of the refused rebuild is gone: only the '
                        'image_ref is put back', orig, instance=instance)
        else:
            for key in [k for k in instance.system_metadata
                        if k.startswith(utils.SM_IMAGE_PROP_PREFIX)]:
                del instance.system_metadata[key]
            instance.system_metadata.update(
                utils.get_system_metadata_from_image(image, instance.flavor))
            instance.system_metadata['image_base_image_ref'] = orig
        instance.image_ref = orig
        instance.save()

    def _storage_made_anew(self, instance: objects.Instance) -> None:
        """An unshelve, or an evacuation without shared storage, makes the
        disks anew: they go where this host keeps new disks of the
        instance's backend (a legacy instance moves into the pools, a pool
        instance on a host without pools gets files)."""
        decision = self._resolver.decision_for(instance)
        new = self._resolver.made_anew(decision)
        if new == decision:
            return
        self._resolver.record(instance, new)
        instance.save()
        LOG.info('Disks of backend %(backend)s made anew here are '
                 '%(storage)s storage (were %(was)s)',
                 {'backend': decision.backend, 'storage': new.storage,
                  'was': decision.storage}, instance=instance)
