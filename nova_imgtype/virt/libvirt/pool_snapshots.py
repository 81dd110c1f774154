"""Snapshots of instances whose root disk is a storage volume.

Stock's snapshot finds the root disk by the path in the guest XML, which a
``<disk type='volume'>`` does not have. :class:`PoolSnapshots` takes the
snapshot of such an instance with stock's own steps around it (its
snapshot metadata, the guest suspended and resumed as for stock's cold
snapshot, the task states, the upload through the image API); only the
copy of the disk is the volume's own (``createXMLFrom`` into a temporary
pool, :meth:`.LibvirtStorage.snapshot_extract`). Every other instance's
snapshot is stock's.
"""

from __future__ import annotations

import os
from typing import Any

from nova import objects
from nova import utils
from nova.compute import task_states
from nova.virt.libvirt import utils as libvirt_utils
from oslo_config import cfg
from oslo_log import log as logging
from oslo_utils import fileutils
from oslo_utils import uuidutils

from nova_imgtype.stock import driver_steps
from nova_imgtype.virt.libvirt import resolver as resolver_mod

LOG = logging.getLogger(__name__)


class PoolSnapshots:
    """Cold snapshots of root disks on storage volumes.

    :param resolver: the instances' records (which ones are on pools).
    :param image_backend: the driver's per-instance backend factory (the
        root disk's volume).
    :param stock: stock's steps of the driver.
    :param conf: the configuration nova-compute runs with.
    """

    def __init__(self, resolver: resolver_mod.BackendResolver,
                 image_backend: Any, stock: driver_steps.StockSteps,
                 conf: cfg.ConfigOpts) -> None:
        self._resolver = resolver
        self._image_backend = image_backend
        self._stock = stock
        self._conf = conf

    def applies(self, instance: objects.Instance) -> bool:
        """Whether the instance's snapshot is this object's (its disks
        are volumes) rather than stock's."""
        return (self._resolver.decision_for(instance).storage ==
                resolver_mod.POOLS)

    def take(self, context: Any, instance: objects.Instance, image_id: str,
             update_task_state: Any) -> None:
        """Snapshot the instance's root volume into image ``image_id``:
        a cold snapshot (the guest suspended while its disk is copied, as
        stock's cold snapshot), uploaded in the recorded format or
        ``[libvirt]snapshot_image_format``."""
        stock = self._stock
        guest = stock.guest(instance)
        snapshot = stock.image_api.get(context, image_id)
        root_disk = self._image_backend.by_name(instance, 'disk')
        image_format = (self._conf.libvirt.snapshot_image_format or
                        root_disk.volume_format)
        metadata = stock.create_snapshot_metadata(
            instance.image_meta, instance, image_format, snapshot['name'])
        power_state = stock.power_state(guest)
        stock.suspend_guest_for_snapshot(context, False, power_state,
                                         instance)
        LOG.info('Beginning cold snapshot of volume %s',
                 root_disk.volume_name, instance=instance)
        update_task_state(task_state=task_states.IMAGE_PENDING_UPLOAD)
        directory = self._conf.libvirt.snapshots_directory
        fileutils.ensure_tree(directory)
        with utils.tempdir(dir=directory) as tmpdir:
            out_path = os.path.join(tmpdir, uuidutils.generate_uuid(
                dashed=False))
            try:
                root_disk.snapshot_extract(out_path, image_format)
            finally:
                stock.resume_guest_after_snapshot(
                    context, False, power_state, instance, guest)
            # Between the copy and its upload, as stock's: the driver
            # checks a linked template the copy read through here
            # (TemplateCache.checked_snapshot).
            update_task_state(task_state=task_states.IMAGE_UPLOADING,
                              expected_state=task_states.IMAGE_PENDING_UPLOAD)
            with libvirt_utils.file_open(out_path, 'rb') as image_file:
                stock.image_api.update(context, image_id, metadata,
                                       image_file)
        LOG.info('Snapshot image upload complete', instance=instance)
