"""``RbdStorage``: instance disks as volumes of a libvirt rbd pool.

The pool is a Ceph pool that every compute of the cluster sees: the disks
are *shared block storage*, as stock's ``Rbd`` backend says of its own.
Nova asks that before it removes disks: on a resize reverted between two
hosts, and on a source host coming back after an evacuation, it calls
``destroy(destroy_disks=True)`` only where disks are not shared, and so
never deletes the volumes the instance runs from (or reverts to).

The Ceph specifics stay here: the template uploaded once into the pool
(libvirt cannot ``createXMLFrom`` a dir volume into an rbd pool), disks as
RBD clones of it, and the network disk the guest gets (libvirt 9.0 refuses
``<disk type='volume'>`` on rbd pools).
"""

from __future__ import annotations

import os
import time
from typing import Any

import libvirt
from nova import utils
from nova.storage import rbd_utils
from nova.virt import images
from nova.virt.image import model as imgmodel
from nova.virt.libvirt import imagebackend
from oslo_concurrency import processutils
from oslo_config import cfg
from oslo_log import log as logging
from oslo_serialization import jsonutils

from nova_imgtype import exception
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import pools as pools_mod
from nova_imgtype.virt.libvirt import storage

CONF = cfg.CONF
LOG = logging.getLogger(__name__)


class RbdStorage(storage.LibvirtStorage):
    """A disk on a volume of a libvirt rbd pool (a shared Ceph pool).

    An image Glance keeps in this cluster is cloned, as stock's ``Rbd``
    clones it: ``SUPPORTS_CLONE`` makes stock's spawn try
    :meth:`clone` (stock's own, into this volume) before it downloads,
    with stock's rules (raw images only;
    ``[workarounds]never_download_image_if_on_rbd``).
    """

    SUPPORTS_CLONE = True

    @staticmethod
    def is_shared_block_storage() -> bool:
        """Every host of the cluster has the volumes (stock ``Rbd``'s
        answer too)."""
        return True

    def exists(self) -> bool:
        """Whether Ceph has the volume's image. libvirt's rbd pool lists
        the images of its last refresh, and another compute of the cluster
        may have removed (a shelve offloaded there) or made one since: the
        pool is read again when the two disagree."""
        there = bool(self.driver.exists(self.rbd_name))
        if there != (self._volume() is not None):
            pool_specs.refresh(self._pool)
        return there

    def _make_volume(self, template: Any, base: str, base_format: str,
                     capacity: int) -> None:
        """An RBD clone of the template's copy in the pool (libvirt's rbd
        ``createXMLFrom`` within a pool is an RBD clone).

        Another compute of the cluster may remove the template, unused as
        it was, between this host finding it and cloning it (Ceph refuses
        that only once a clone exists): the clone then fails, the pool is
        read again, and a template gone from Ceph is uploaded again and
        cloned, once.
        """
        disks = self._pool
        rbd_template = self._rbd_template(disks, base, base_format)
        try:
            self.pools.copy(disks, self.volume_name, rbd_template, 'raw', '',
                            capacity)
            return
        except exception.VolumeCreateFailed:
            name = rbd_template.name()
            pool_specs.refresh(disks)
            if self.pools.find_volume(disks, name) is not None:
                raise
            LOG.warning('Template %s left the Ceph pool before its clone '
                        '(another compute removed it, unused): uploading '
                        'it again', name)
        rbd_template = self._rbd_template(disks, base, base_format)
        self.pools.copy(disks, self.volume_name, rbd_template, 'raw', '',
                        capacity)

    def _rbd_template(self, disks: Any, base: str, base_format: str) -> Any:
        """The cached template's copy in the rbd pool: uploaded once in the
        cluster (:meth:`StoragePools.upload_rbd_template`), one upload at a
        time per host under an external lock."""
        name = pool_specs.RBD_TEMPLATE_PREFIX + os.path.basename(base)
        found = self.pools.find_volume(disks, name)
        if found is not None:
            return found

        @utils.synchronized(name, external=True, lock_path=self.lock_path)
        def upload() -> Any:
            return self._upload(disks, name, base, base_format)

        return upload()

    def _upload(self, pool: Any, name: str, path: str, fmt: str) -> Any:
        """The file at ``path`` as volume ``name`` of the rbd pool, written
        through this host's Ceph configuration and user
        (``images_rbd_ceph_conf``, ``rbd_user``), as stock's rbd backend
        reaches the cluster."""
        return self.pools.upload_rbd_template(
            pool, name, path, fmt, CONF.libvirt.images_rbd_ceph_conf,
            CONF.libvirt.rbd_user, uploader=CONF.host)

    # -- cloned from Glance's copy in this cluster, as stock's Rbd --------

    @property
    def driver(self) -> rbd_utils.RBDDriver:
        """Nova's rbd helper on this volume's Ceph pool (what stock's
        ``Rbd.clone`` clones into)."""
        return self._rbd()[0]

    @property
    def rbd_name(self) -> str:
        """This volume's RBD image name."""
        return self._rbd()[1]

    def clone(self, *args: Any, **kwargs: Any) -> Any:
        """Stock's ``Rbd.clone``: this volume an RBD clone of the image's
        snapshot Glance keeps in this cluster, or ImageUnacceptable (not
        raw, not in this cluster), for stock to download it instead."""
        return imagebackend.Rbd.clone(self, *args, **kwargs)

    def flatten(self, *args: Any, **kwargs: Any) -> Any:
        """Stock's ``Rbd.flatten``: a volume cloned from a shelved
        instance's snapshot (stock's unshelve asks, and a cross-cell move)
        stops depending on it, so that Nova can delete that image."""
        return imagebackend.Rbd.flatten(self, *args, **kwargs)

    def copy_to_store(self, *args: Any, **kwargs: Any) -> Any:
        """Stock's ``Rbd.copy_to_store`` (Glance copies the image into
        ``images_rbd_glance_store_name`` for :meth:`clone` to clone)."""
        return imagebackend.Rbd.copy_to_store(self, *args, **kwargs)

    def create_image(self, prepare_template: Any, base: str, size: Any,
                     safe: bool = False, *args: Any, **kwargs: Any) -> None:
        """As stock's ``Rbd``: a volume already in Ceph (a resize or a cold
        move on shared storage, where stock's finish_migration asks again)
        is kept, nothing fetched or cloned; otherwise the template is
        asked for first, and stock's clone may have made this volume
        instead, else the template is what it got. Either way the volume
        is checked against the flavor's size (stock's check) and grown to
        it, never shrunk."""
        if self.exists():
            self._grow(base, size)
            return
        prepare_template(*args, target=base, **kwargs)
        if self.driver.exists(self.rbd_name):
            # Cloned by stock: libvirt has not seen it yet.
            pool_specs.refresh(self._pool)
            self._grow(base, size)
            return
        super().create_image(prepare_template, base, size, safe, *args,
                             **kwargs)

    def _grow(self, base: str, size: Any) -> None:
        """This volume, made by stock's clone or before this operation:
        checked against the flavor's size and grown to it."""
        current = self.driver.size(self.rbd_name)
        self.verify_base_size(base, size, base_size=current)
        if size and size > current:
            self.driver.resize(self.rbd_name, size)
        self._made_capacity = max(size or 0, current)

    def import_file(self, instance: Any, local_file: str,
                    remote_name: str) -> None:
        """Import a local file (a config drive) as this volume: uploaded
        as templates are (libvirt uploads nothing into an rbd pool), then
        the local copy removed."""
        self._upload(self._pool, self.volume_name, local_file, 'raw')
        self._remove_imported(local_file)

    # Resize snapshots, as stock's Rbd takes them: the compute manager's
    # finish_migration snapshots the root disk before it is resized
    # (task_state RESIZE_FINISH), a revert rolls the disk back to it (its
    # data and its size) and removes it, a confirm removes it. Nova's own
    # rbd helper does the work, on the volume's Ceph pool.

    def _rbd(self) -> tuple[rbd_utils.RBDDriver, str]:
        ceph_pool, _sep, image = self.path.partition('/')
        return rbd_utils.RBDDriver(pool=ceph_pool), image

    def create_snap(self, name: str) -> None:
        driver, image = self._rbd()
        driver.create_snap(image, name)

    def remove_snap(self, name: str, ignore_errors: bool = False) -> None:
        driver, image = self._rbd()
        driver.remove_snap(image, name, ignore_errors)

    def rollback_to_snap(self, name: str) -> None:
        driver, image = self._rbd()
        driver.rollback_to_snap(image, name)

    def snapshot_extract(self, target: str, out_format: str) -> None:
        """The volume's data as ``target`` in ``out_format``, as stock's
        Rbd extracts its disk: ``qemu-img convert`` of the RBD image,
        named raw (an RBD image is raw by nature; nothing is probed),
        through this host's Ceph configuration and user. libvirt copies no
        volume of an rbd pool into a dir pool."""
        driver, image = self._rbd()
        source = 'rbd:%s/%s' % (driver.pool, image)
        if driver.rbd_user:
            source += ':id=' + driver.rbd_user
        if driver.ceph_conf:
            source += ':conf=' + driver.ceph_conf
        images.convert_image(source, target, 'raw', out_format)

    def get_model(self, connection: Any) -> Any:
        pool, _sep, name = self.path.partition('/')
        return imgmodel.RBDImage(name, pool, CONF.libvirt.rbd_user, None, [])

    def libvirt_info(self, cache_mode: str, extra_specs: Any,
                     boot_order: Any = None, disk_unit: Any = None) -> Any:
        """The rbd volume as the network disk qemu opens.

        libvirt 9.0 refuses ``<disk type='volume'>`` on rbd pools ("using
        'rbd' pools for backing 'volume' disks isn't yet supported"), so the
        disk names the volume's image with the monitors and cephx auth read
        from the pool's own definition: the pool stays the one place that
        says where the storage is.
        """
        # Stock's disk config, not the base class's volume disk.
        disk = imagebackend.Image.libvirt_info(
            self, cache_mode, extra_specs, boot_order=boot_order,
            disk_unit=disk_unit)
        source = pool_specs.pool_source(self.pools.get(self.pool_name))
        disk.source_type = 'network'
        disk.source_protocol = 'rbd'
        disk.source_path = None
        disk.source_name = self.path
        disk.source_hosts = [h.rpartition(':')[0] or h
                             for h in source.hosts]
        disk.source_ports = [h.rpartition(':')[2] if ':' in h else None
                             for h in source.hosts]
        if source.auth_user:
            disk.auth_username = source.auth_user
            disk.auth_secret_type = 'ceph'
            disk.auth_secret_uuid = source.auth_secret_uuid
        return disk



def _age_seconds(ceph_pool: str, image: str, now: float) -> float | None:
    """Seconds since the rbd image was created (``rbd info``), None when
    Ceph does not say."""
    cli = (('--conf', CONF.libvirt.images_rbd_ceph_conf)
           if CONF.libvirt.images_rbd_ceph_conf else ()) + (
        ('--id', CONF.libvirt.rbd_user) if CONF.libvirt.rbd_user else ())
    out, _err = processutils.execute('rbd', 'info', '--format', 'json',
                                     '%s/%s' % (ceph_pool, image), *cli)
    stamp = jsonutils.loads(out).get('create_timestamp')
    if not stamp:
        return None
    # The rbd CLI prints it in this host's local time.
    created = time.mktime(time.strptime(stamp, '%a %b %d %H:%M:%S %Y'))
    return now - created


def remove_unused_templates(pools: pools_mod.StoragePools, pool: Any,
                            base_dir: str, min_age: float,
                            now: float | None = None) -> list[str]:
    """Remove the rbd pool's templates nothing uses any more.

    A template goes when this host's image cache no longer has its file
    (the cache manager removed it by ``[image_cache]``'s age rules), it is
    at least ``min_age`` seconds old (another compute may have uploaded it
    a moment ago, to clone it next), and Ceph lets it go: libvirt deletes
    it with its snapshots, which Ceph refuses while a snapshot has clones,
    whichever host made them. Uploads in progress are never touched.

    :returns: the names removed.
    """
    now = time.time() if now is None else now
    ceph_pool = pool_specs.pool_source(pool).source
    removed = []
    for vol in list(pools.volumes(pool, pool_specs.RBD_TEMPLATE_PREFIX)):
        name = vol.name()
        cached = name[len(pool_specs.RBD_TEMPLATE_PREFIX):]
        if '.part-' in name or os.path.exists(os.path.join(base_dir,
                                                           cached)):
            continue
        age = _age_seconds(ceph_pool, name, now)
        if age is None or age < min_age:
            continue
        try:
            vol.delete(libvirt.VIR_STORAGE_VOL_DELETE_WITH_SNAPSHOTS)
        except libvirt.libvirtError as e:
            LOG.debug('Template %s kept (in use by clones): %s', name, e)
            continue
        LOG.info('Removed unused template %s from Ceph pool %s', name,
                 ceph_pool)
        removed.append(name)
    if removed:
        pool_specs.refresh(pool)
    return removed
