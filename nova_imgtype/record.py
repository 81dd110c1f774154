"""What nova-imgtype records with an instance: the only reader and writer
of its ``imgtype_*`` system metadata.

The record says, for the instance's whole life, which image backend its
disks are on, which image formats it uses in their own format, whether the
disks are stock's files or volumes of a storage pool (and which pool), and
the format of each disk. Every decision about an instance's disks is taken
from here (or, for an instance from before nova-imgtype, from stock's
``disk.info``), never from what libvirt or ``qemu-img`` find in the bytes
of a disk, which the guest writes.

The compute side decides (:mod:`nova_imgtype.virt.libvirt.resolver`) and
asks this module to write; the scheduler's request filters read the
backend. Nothing here imports libvirt: scheduler nodes have none.

Writers change ``instance.system_metadata`` only; the caller saves the
instance, before the step that depends on what was written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

#: The instance's backend name.
BACKEND = 'imgtype_backend'
#: The disk formats the instance uses without conversion (comma separated;
#: empty when its images are converted).
NATIVE = 'imgtype_native_formats'
#: 'pools' when the instance's disks are libvirt storage volumes
#: (LibvirtStorage), 'legacy' for stock image files.
STORAGE = 'imgtype_storage'
#: The storage pool holding a pool instance's disks, recorded so that a
#: later change of images_type never re-points them: its name on the host
#: that recorded it...
POOL = 'imgtype_pool'
#: ...and what identifies its storage on every host: its type and place
#: (``dir:<directory>``, ``logical:<volume group>``, ``rbd:<Ceph
#: pool>@<monitors>;fsid=<cluster fsid>``, without the fsid when written
#: before 2026-11-28; ``pool_specs.location_key``). Each host finds its
#: own pool of that storage by it, whatever its name there.
POOL_LOCATION = 'imgtype_pool_location'
#: The format of each disk whose format is not its backend's (a legacy
#: instance's files adopted into a pool as they are):
#: ``name=format`` pairs, comma separated.
DISK_FORMATS = 'imgtype_disk_formats'
#: Where the disks of an instance being live-migrated are made on the
#: destination, written by the destination before the migration, read by
#: the source to write the guest XML it sends there, and dropped by the
#: destination when the migration ends.
ARRIVAL = 'imgtype_live_migration_arrival'
#: The image the instance's disks were last made from (a refused rebuild
#: puts it back).
IMAGE = 'imgtype_image_ref'
#: The template the root disk was made from: ``<image id>:<cache name>``,
#: the name under ``_base`` (and in the image cache pool) as this host
#: fetched it. A move's destination fetches that image under that name, or
#: refuses; never under a name read from a disk.
TEMPLATE = 'imgtype_root_template'

#: Where the config drive of an instance that is not on pools is made:
#: :data:`LOCAL`, a raw file of the instance (``disk.config`` in its
#: directory) whatever the host's ``images_type``; absent, stock's choice
#: (in Ceph on an rbd host: an rbd instance's, and one recorded before
#: this was).
CONFIG_DRIVE = 'imgtype_config_drive'

#: The host on which the instance is on its way back to stock's
#: ``libvirt.LibvirtDriver`` (``nova-imgtype prepare-uninstall --apply``
#: there): its disks are moved to stock's layout now (stopped) or at its
#: next hard reboot (running), and that host never moves them into a
#: storage pool again. Another host (a move to one that keeps nova-imgtype)
#: ignores it.
WAY_BACK = 'imgtype_way_back'
#: The move back to stock's layout under way on :data:`WAY_BACK`'s host
#: (:class:`WayBackMove`): saved before the first file moves, dropped with
#: the last step's record, so that a run that finds it (a move killed half
#: way) finishes the move instead of taking the record for done.
WAY_BACK_MOVE = 'imgtype_way_back_move'

#: Every key of the record.
KEYS = (BACKEND, NATIVE, STORAGE, POOL, POOL_LOCATION, DISK_FORMATS,
        CONFIG_DRIVE, ARRIVAL, IMAGE, TEMPLATE, WAY_BACK, WAY_BACK_MOVE)

POOLS = 'pools'
LEGACY = 'legacy'
LOCAL = 'local'

#: Volume format of each backend's disks when pools implement it.
VOLUME_FORMATS = {'qcow2': 'qcow2', 'raw': 'raw', 'flat': 'raw',
                  'lvm': 'raw', 'rbd': 'raw'}
#: Disks stock always makes raw, whatever the backend: the config drive
#: (``disk.config``, and a rescue's), the kernel and the ramdisk.
RAW_DISKS = ('disk.config', 'kernel', 'ramdisk')

#: Nova keeps a system metadata value in 255 characters.
_MAX_VALUE = 255


@dataclasses.dataclass(frozen=True)
class BackendDecision:
    """An instance's backend and the formats it uses in their own format."""

    backend: str
    native_formats: tuple[str, ...] = ()
    storage: str = LEGACY
    #: The disks pool of a pool instance ('' for legacy storage).
    pool: str = ''
    #: Per disk name, a format other than the backend's (adopted files).
    disk_formats: tuple[tuple[str, str], ...] = ()
    #: The type and place of the pool's storage ('' for legacy storage,
    #: and for pool instances recorded before it was).
    pool_location: str = ''
    #: :data:`LOCAL` when the config drive is a raw file of the instance
    #: (when it is not on pools), '' for stock's choice.
    config_drive: str = ''

    def is_native(self, disk_format: str | None) -> bool:
        return disk_format is not None and disk_format in self.native_formats

    def with_disk_format(self, disk_name: str,
                         fmt: str) -> BackendDecision:
        """This decision, disk ``disk_name`` recorded as ``fmt`` (no entry
        where that is the backend's own format)."""
        formats = dict(self.disk_formats)
        formats.pop(disk_name, None)
        if fmt != dataclasses.replace(self, disk_formats=()).volume_format(
                disk_name):
            formats[disk_name] = fmt
        return dataclasses.replace(
            self, disk_formats=tuple(sorted(formats.items())))

    def volume_format(self, disk_name: str) -> str:
        """The format of the instance's volume of disk ``disk_name``
        (``disk``, ``disk.local``, ``disk.config``, ...): as recorded for
        that disk, else raw for the disks stock makes raw, else the
        backend's."""
        own = dict(self.disk_formats).get(disk_name)
        if own:
            return own
        if disk_name.startswith(RAW_DISKS):
            return 'raw'
        return VOLUME_FORMATS.get(self.backend, 'raw')


def read(meta: Mapping[str, str], default_pool: str) -> BackendDecision | None:
    """The decision recorded in system metadata ``meta``; None for an
    instance from before nova-imgtype.

    :param default_pool: the pool of a pool instance recorded before pool
        names were.
    """
    backend = meta.get(BACKEND)
    if not backend:
        return None
    native = meta.get(NATIVE) or ''
    storage = meta.get(STORAGE) or LEGACY
    pool = (meta.get(POOL) or default_pool) if storage == POOLS else ''
    location = (meta.get(POOL_LOCATION) or '') if storage == POOLS else ''
    return BackendDecision(
        backend, tuple(f for f in native.split(',') if f), storage, pool,
        _parse_disk_formats(meta.get(DISK_FORMATS) or ''), location,
        LOCAL if meta.get(CONFIG_DRIVE) == LOCAL else '')


def write(instance: Any, decision: BackendDecision) -> None:
    """Record ``decision`` in the instance (the caller saves it)."""
    meta = instance.system_metadata
    meta[BACKEND] = decision.backend
    meta[NATIVE] = ','.join(decision.native_formats)
    meta[STORAGE] = decision.storage
    _set(meta, POOL, decision.pool)
    _set(meta, POOL_LOCATION, decision.pool_location)
    _set(meta, DISK_FORMATS, _dump_disk_formats(decision.disk_formats))
    _set(meta, CONFIG_DRIVE, decision.config_drive)


def backend(meta: Mapping[str, str]) -> str | None:
    """The recorded backend name (what the scheduler asks for)."""
    return meta.get(BACKEND) or None


def template(meta: Mapping[str, str]) -> tuple[str, str] | None:
    """(image id, cache name) of the root disk's template, or None when
    not recorded (an instance from before it was)."""
    image, sep, name = (meta.get(TEMPLATE) or '').partition(':')
    return (image, name) if sep and image and name else None


def set_template(instance: Any, image_id: str, cache_name: str) -> bool:
    """Record the root disk's template (the caller saves the instance);
    returns whether the record changed."""
    if ':' in image_id or not image_id or not cache_name:
        raise ValueError('template %r of image %r' % (cache_name, image_id))
    return set_value(instance, TEMPLATE, '%s:%s' % (image_id, cache_name))


def going_back(meta: Mapping[str, str], host: str) -> bool:
    """Whether the instance is on its way back to stock's driver on
    ``host`` (:data:`WAY_BACK`)."""
    return bool(host) and meta.get(WAY_BACK) == host


@dataclasses.dataclass(frozen=True)
class WayBackMove:
    """A move back to stock's layout under way (:data:`WAY_BACK_MOVE`):
    the backend stock's driver serves the instance with, the disks moved
    (their names as stock's files) and those converted to qcow2."""

    target: str
    disks: tuple[str, ...]
    to_qcow2: tuple[str, ...] = ()


def way_back_move(meta: Mapping[str, str]) -> WayBackMove | None:
    """The move back to stock's layout under way, or None."""
    target, sep, disks = (meta.get(WAY_BACK_MOVE) or '').partition(':')
    if not sep or not target:
        return None
    names = [d.partition('>') for d in disks.split(',') if d]
    return WayBackMove(target, tuple(n for n, _s, _f in names),
                       tuple(n for n, s, _f in names if s))


def set_way_back_move(instance: Any, move: WayBackMove | None) -> None:
    """Record (or with None, drop) the move back to stock's layout under
    way (the caller saves the instance)."""
    value = None
    if move is not None:
        value = '%s:%s' % (move.target, ','.join(
            n + ('>qcow2' if n in move.to_qcow2 else '')
            for n in move.disks))
    _set(instance.system_metadata, WAY_BACK_MOVE, value)


def set_value(instance: Any, key: str, value: str | None) -> bool:
    """Set (or with None, drop) one of :data:`KEYS` that is not part of the
    decision; returns whether the record changed."""
    if key not in KEYS:
        raise KeyError(key)
    meta = instance.system_metadata
    before = meta.get(key)
    _set(meta, key, value)
    return meta.get(key) != before


def get_value(instance: Any, key: str) -> str | None:
    if key not in KEYS:
        raise KeyError(key)
    value: str | None = instance.system_metadata.get(key)
    return value


def sync(instance: Any, saved: Mapping[str, str]) -> bool:
    """Make the instance's record the one in ``saved`` (the system
    metadata as saved last, read from the database), key by key.

    Nova saves system metadata as a whole dict: an instance object another
    host sent, saved after the plugin wrote the record elsewhere, would put
    back its stale copy of the record. Returns whether anything changed.
    """
    meta = instance.system_metadata
    changed = False
    for key in KEYS:
        if meta.get(key) != saved.get(key):
            _set(meta, key, saved.get(key))
            changed = True
    return changed


def _set(meta: Any, key: str, value: str | None) -> None:
    if value:
        if len(value) > _MAX_VALUE:
            raise ValueError('%s: %d characters, Nova keeps %d' % (
                key, len(value), _MAX_VALUE))
        meta[key] = value
    else:
        meta.pop(key, None)


def _parse_disk_formats(value: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in value.split(','):
        name, sep, fmt = item.partition('=')
        if sep and name and fmt:
            pairs.append((name, fmt))
    return tuple(sorted(pairs))


def _dump_disk_formats(pairs: tuple[tuple[str, str], ...]) -> str:
    return ','.join('%s=%s' % p for p in sorted(pairs))
