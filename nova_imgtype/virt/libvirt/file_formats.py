"""The format of each of an instance's disk files, from its record.

Stock's file backends take a disk file's format from ``disk.info`` in the
instance directory and, for a file it does not list, from ``qemu-img
info`` of the file: bytes the guest writes. Every move that lands files
on this host (a cold move's finish, a live block migration's arrival)
writes their entries here first (:func:`write`), and the image
backend gives each file the format :func:`recorded` says
(:class:`~.imagebackend.Backend`), so no file's format is ever probed.

What decides, first to last: the format the record names for that disk
(``imgtype_disk_formats``), the format the move sent the disk as (the
source's record, or the format its domain gave QEMU), stock's
``disk.info``, the instance's backend (raw for the disks stock always
makes raw).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from collections.abc import Sequence

from oslo_log import log as logging

from nova_imgtype import record as record_mod
from nova_imgtype.virt.libvirt import pool_dir

LOG = logging.getLogger(__name__)


def named(decision: record_mod.BackendDecision, name: str) -> str | None:
    """The format the record names for disk ``name`` (its own entry, or
    raw for a disk stock always makes raw); None when it leaves it to
    ``disk.info`` and the backend."""
    base = os.path.basename(name)
    own = dict(decision.disk_formats).get(base)
    if own:
        return own
    return 'raw' if base.startswith(record_mod.RAW_DISKS) else None


def recorded(decision: record_mod.BackendDecision, instance_dir: str,
             names: Sequence[str],
             arrived: Mapping[str, str] | None = None,
             listed: Mapping[str, str] | None = None) -> dict[str, str]:
    """name -> format of the disk files ``names`` of the instance: the
    record's, else ``arrived``'s (what a move sent), else ``disk.info``'s
    (``listed``, read here when not given), else the backend's."""
    if listed is None:
        listed = pool_dir.disk_info(instance_dir)
    formats = {}
    for name in names:
        fmt = (named(decision, name) or (arrived or {}).get(name) or
               listed.get(os.path.join(instance_dir, name)))
        formats[name] = fmt or decision.volume_format(name)
    return formats


def write(decision: record_mod.BackendDecision,
          instance_dir: str) -> dict[str, str]:
    """Make ``disk.info`` list each disk file in ``instance_dir`` in its
    :func:`recorded` format, before stock opens any of them; returns what
    it lists for them."""
    names = [n for n in pool_dir.legacy_files(instance_dir)
             if n not in ('kernel', 'ramdisk')]
    listed = pool_dir.disk_info(instance_dir)
    formats = recorded(decision, instance_dir, names, listed=listed)
    changed = {n: f for n, f in formats.items()
               if listed.get(os.path.join(instance_dir, n)) != f}
    if changed:
        pool_dir.write_formats(instance_dir, changed)
        LOG.debug('disk.info of %s from the record: %s', instance_dir,
                  changed)
    return formats


def arrived(decision: record_mod.BackendDecision, instance_dir: str,
            infos: Sequence[Mapping[str, str]]
            ) -> record_mod.BackendDecision:
    """The record of an instance whose disk files ``infos`` (stock's disk
    info: ``path``, ``type``) a move brought into ``instance_dir``: each
    file whose format is not its backend's named in it (a raw disk of a
    qcow2 instance stays raw, given to QEMU as raw). The caller records
    it, then :func:`write` lists the files in ``disk.info``."""
    sent = {os.path.basename(i['path']): i['type'] for i in infos
            if 'volume' not in i and i.get('type') and
            os.path.dirname(i['path']) == instance_dir and
            os.path.exists(i['path'])}
    named_decision = decision
    for name, fmt in recorded(decision, instance_dir, sorted(sent),
                              sent).items():
        if not name.startswith(record_mod.RAW_DISKS):
            named_decision = named_decision.with_disk_format(name, fmt)
    return named_decision
