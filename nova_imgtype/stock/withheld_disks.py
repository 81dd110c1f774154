"""The disks stock's cold move would copy with SSH, withheld from it.

Stock's ``migrate_disk_and_power_off`` lists the instance's disks
(``_get_instance_disk_info``), copies each with scp or rsync, and returns
the list. A move the plugin sends through libvirt gets stock's every step
but the copies: within :func:`withholding`, the driver's
``_get_instance_disk_info`` hands stock's list to the plugin and stock an
empty one (:func:`answer`), so stock copies nothing and the plugin copies
the disks itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from nova_imgtype.stock.facts import CallSites
from nova_imgtype.stock.facts import SourceFact
from nova_imgtype.stock.thread_value import ThreadValue

DiskInfo = list[dict[str, Any]]

_WITHHELD: ThreadValue[DiskInfo] = ThreadValue('withheld')

FACTS = (
    SourceFact(
        'nova.virt.libvirt.driver:LibvirtDriver.migrate_disk_and_power_off',
        (r'disk_info = self\._get_instance_disk_info\(',
         r'for info in disk_info:', r'libvirt_utils\.copy_image\(',
         r'return jsonutils\.dumps\(disk_info\)'),
        'stock copies exactly the disks _get_instance_disk_info listed: '
        'an empty list withholds them all'),
    CallSites(
        'nova.virt.libvirt.driver', r'self\._get_instance_disk_info\(',
        frozenset({'LibvirtDriver._assert_dest_node_has_enough_disk',
                   'LibvirtDriver._cleanup_lvm',
                   'LibvirtDriver._is_shared_block_storage',
                   'LibvirtDriver.get_instance_disk_info',
                   'LibvirtDriver.migrate_disk_and_power_off'}),
        'within a cold move only migrate_disk_and_power_off asks for the '
        'disks (the others are live migration\'s and lvm clean-up\'s)'),
)


@contextlib.contextmanager
def withholding() -> Iterator[DiskInfo]:
    """Within the block, in this thread, the disks stock lists are
    withheld from it: the list it yields gets them."""
    with _WITHHELD.bound([]) as withheld:
        yield withheld


def active() -> bool:
    """Whether a :func:`withholding` block runs in this thread."""
    return _WITHHELD.get() is not None


def answer(info: DiskInfo) -> DiskInfo:
    """What stock gets for its disk list ``info``: nothing within
    :func:`withholding` (the list goes to the plugin), ``info`` outside."""
    withheld = _WITHHELD.get()
    if withheld is None:
        return info
    withheld.extend(info)
    return []
