"""Instance disks as the files of a dir pool: legacy files adopted from
the instance directory, volumes staged out of the pool for a cold move and
back in.

Every operation renames files within one filesystem (the pool's directory
is under ``instances_path``): the data stay as they are, qcow2 overlays
keep their absolute backing paths, and it costs nothing whatever the size.
Each one puts back what it moved when it fails, and skips what a previous,
interrupted call already moved, so that a move a crash cut short can be
finished by calling it again.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

from oslo_log import log as logging
from oslo_serialization import jsonutils
from oslo_utils import excutils

from nova_imgtype import exception
from nova_imgtype import record
from nova_imgtype.virt.libvirt import pool_specs

LOG = logging.getLogger(__name__)

#: Legacy instance files that move into a dir pool: the disks, the config
#: drive, and the kernel and ramdisk (a pool instance's are volumes too).
LEGACY_DISK = re.compile(
    r'^(disk(\.local|\.swap|\.eph\d+|\.config)?|kernel|ramdisk)$')
#: An instance's volume in a dir pool: ``{instance uuid}_{disk name}``.
VOLUME_FILE = re.compile(r'^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-'
                         r'[0-9a-f]{12}_.')
#: Stock's record of its disk files' formats, in the instance directory.
DISK_INFO = 'disk.info'


def legacy_files(instance_dir: str) -> list[str]:
    """The legacy disk files in an instance directory (none without it)."""
    if not os.path.isdir(instance_dir):
        return []
    return sorted(n for n in os.listdir(instance_dir)
                  if LEGACY_DISK.match(n))


def legacy_formats(instance_dir: str,
                   names: Sequence[str]) -> dict[str, str] | None:
    """The format of each of the legacy disk files ``names``, as stock
    recorded it when it made the disk (``disk.info`` in the instance
    directory, keyed by path), or raw for the files stock always makes raw
    (:data:`~nova_imgtype.record.RAW_DISKS`: config drive, kernel, ramdisk;
    a config drive's entry, where there is one, says raw too); None when a
    disk has no entry there (its format would have to be probed from its
    bytes, which the guest writes) or the file cannot be read.
    """
    disks = [n for n in names if n not in record.RAW_DISKS]
    recorded: dict[str, Any] = {}
    if disks:
        try:
            with open(os.path.join(instance_dir, DISK_INFO)) as f:
                recorded = jsonutils.loads(f.read().strip() or '{}')
        except (OSError, ValueError) as e:
            LOG.warning('%s cannot be read: %s', DISK_INFO, e)
            return None
    formats = {name: 'raw' for name in names if name in record.RAW_DISKS}
    for name in disks:
        fmt = recorded.get(os.path.join(instance_dir, name))
        if not isinstance(fmt, str) or not fmt:
            LOG.warning('%s records no format for %s', DISK_INFO, name)
            return None
        formats[name] = fmt
    return formats


def adopt(pool: Any, instance: Any, instance_dir: str,
          names: Sequence[str]) -> None:
    """Rename the instance's disk files into the dir pool as its volumes
    (``{uuid}_{name}``), then refresh the pool. A file already moved is
    skipped; a failure puts back what this call moved.

    :raises VolumeExists: a volume of that name is there, its file too.
    """
    target_dir = pool_specs.pool_target(pool)
    pairs = [(os.path.join(instance_dir, name),
              os.path.join(target_dir, pool_specs.volume_name(
                  instance.uuid, name))) for name in names]
    _rename_all(pool, [(src, dest) for src, dest in pairs
                       if os.path.exists(src)],
                lambda dest: exception.VolumeExists(
                    pool=pool.name(), volume=os.path.basename(dest)))


def _rename_all(pool: Any, pairs: Sequence[tuple[str, str]],
                refusal: Any) -> list[tuple[str, str]]:
    """Rename each ``src`` to ``dest`` (one filesystem: free whatever the
    size), then refresh the pool; a ``dest`` already there raises
    ``refusal(dest)``. A failure puts back what this call renamed. The
    pairs renamed."""
    moved: list[tuple[str, str]] = []
    try:
        for src, dest in pairs:
            if os.path.exists(dest):
                raise refusal(dest)
            os.rename(src, dest)
            moved.append((src, dest))
        pool_specs.refresh(pool)
    except Exception:
        with excutils.save_and_reraise_exception():
            for src, dest in reversed(moved):
                os.rename(dest, src)
    return moved


def stage_out(pool: Any, instance: Any, directory: str,
              names: Sequence[str]) -> list[str]:
    """Move the volume files ``names`` out of the pool into ``directory``
    (where stock's cold move copies disks from); the names moved. A
    failure puts back what this call moved."""
    pool_dir = pool_specs.pool_target(pool)
    moved: list[str] = []
    try:
        for name in names:
            os.rename(os.path.join(pool_dir, name),
                      os.path.join(directory, name))
            moved.append(name)
    except Exception:
        with excutils.save_and_reraise_exception():
            for name in moved:
                os.rename(os.path.join(directory, name),
                          os.path.join(pool_dir, name))
    pool_specs.refresh(pool)
    LOG.debug('Moved volumes %s out of storage pool %s into %s',
              ', '.join(moved), pool.name(), directory, instance=instance)
    return moved


def stage_in(pool: Any, instance: Any, directory: str,
             names: Sequence[str]) -> None:
    """Move volume files staged in ``directory`` back into the pool (those
    still there)."""
    pool_dir = pool_specs.pool_target(pool)
    for name in names:
        src = os.path.join(directory, name)
        if os.path.exists(src):
            os.rename(src, os.path.join(pool_dir, name))
    pool_specs.refresh(pool)
    LOG.info('Volumes %s are back in storage pool %s', ', '.join(names),
             pool.name(), instance=instance)


def release(pool: Any, instance: Any, instance_dir: str) -> list[str]:
    """Rename the instance's volume files out of the dir pool into its
    instance directory as stock names its files (``{uuid}_{name}`` ->
    ``{instance_dir}/{name}``), then refresh the pool: the inverse of
    :func:`adopt`, on the way back to stock's driver. A file already
    moved is skipped; a failure puts back what this call moved. The disk
    names moved.

    :raises DiskFileExists: a file of that name is in the instance
        directory while its volume is in the pool too.
    """
    pool_dir = pool_specs.pool_target(pool)
    prefix = instance.uuid + '_'
    os.makedirs(instance_dir, exist_ok=True)
    moved = _rename_all(
        pool, [(os.path.join(pool_dir, volume),
                os.path.join(instance_dir, volume[len(prefix):]))
               for volume in volume_files(pool_dir)
               if volume.startswith(prefix)],
        lambda dest: exception.DiskFileExists(
            path=dest, volume=prefix + os.path.basename(dest),
            pool=pool.name()))
    return [os.path.basename(dest) for _src, dest in moved]


def write_formats(instance_dir: str, formats: dict[str, str]) -> None:
    """Record the format of each of the instance's disk files ``formats``
    (name -> format) in its ``disk.info`` as stock does (keyed by path),
    keeping the entries already there for other files. Written to a
    temporary file and renamed over it: never half written."""
    path = os.path.join(instance_dir, DISK_INFO)
    recorded: dict[str, Any] = {}
    if os.path.exists(path):
        with open(path) as f:
            recorded = jsonutils.loads(f.read().strip() or '{}')
    for name, fmt in formats.items():
        recorded[os.path.join(instance_dir, name)] = fmt
    tmp = path + '.imgtype-new'
    with open(tmp, 'w') as f:
        f.write(jsonutils.dumps(recorded))
    os.replace(tmp, path)


def disk_info(instance_dir: str) -> dict[str, str]:
    """What stock's ``disk.info`` in ``instance_dir`` lists (path ->
    format); nothing where there is none, or it cannot be read."""
    try:
        with open(os.path.join(instance_dir, DISK_INFO)) as f:
            listed = jsonutils.loads(f.read().strip() or '{}')
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        LOG.warning('%s of %s cannot be read: %s', DISK_INFO, instance_dir, e)
        return {}
    return {k: v for k, v in listed.items()
            if isinstance(k, str) and isinstance(v, str)}


def volume_files(directory: str) -> list[str]:
    """The instance volume files (``{uuid}_{name}``) in a dir pool's
    directory (none without it)."""
    if not os.path.isdir(directory):
        return []
    return sorted(n for n in os.listdir(directory) if VOLUME_FILE.match(n))


def remove_volumes(directory: str, instance: Any) -> list[str]:
    """Remove the instance's volume files (``{uuid}_*``) from a dir pool's
    directory: those of a deleted instance, which no pool operation will
    remove any more (a failed cold move's copies on its destination, the
    volumes of an instance whose delete was cut short). The names removed.
    """
    removed = []
    for name in volume_files(directory):
        path = os.path.join(directory, name)
        if name.startswith(instance.uuid + '_') and os.path.isfile(path):
            os.unlink(path)
            removed.append(name)
    if removed:
        LOG.info('Removed the volumes %s of the instance from %s',
                 ', '.join(removed), directory, instance=instance)
    return removed
