"""A step of the plugin's, run when stock's cold move stops the guest.

Stock's ``migrate_disk_and_power_off`` checks the move (a resize down is
refused with the guest running), powers the guest off through the
driver's own ``power_off``, and then lists the disks and keeps the
instance directory as ``<instance>_resize``. A pool instance's volumes
must be moved into that directory once the guest has stopped and before
the rename: the driver's ``power_off`` calls :func:`fire` after stock's,
which runs the step :func:`armed` holds in this thread, once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from collections.abc import Iterator

from nova_imgtype.stock.facts import CallSites
from nova_imgtype.stock.facts import SourceFact
from nova_imgtype.stock.thread_value import ThreadValue

_STEP: ThreadValue[Callable[[], None]] = ThreadValue('after_power_off')

FACTS = (
    SourceFact(
        'nova.virt.libvirt.driver:LibvirtDriver.migrate_disk_and_power_off',
        (r'Unable to resize disk down',
         r'self\.power_off\(instance, timeout, retry_interval\)',
         r'self\._get_instance_disk_info\(',
         r'os\.rename\(inst_base, inst_base_resize\)'),
        'stock refuses a resize down before it powers off (the guest keeps '
        'running), and powers off (through the driver\'s power_off) before '
        'it reads the disks and renames the directory to _resize (the '
        'staged volumes go with it)'),
    CallSites(
        'nova.virt.libvirt.driver', r'self\.power_off\(',
        frozenset({'LibvirtDriver.migrate_disk_and_power_off'}),
        'no other stock step of the driver powers off through power_off'),
)


@contextlib.contextmanager
def armed(step: Callable[[], None]) -> Iterator[None]:
    """Within the block, in this thread, the next :func:`fire` runs
    ``step``."""
    with _STEP.bound(step):
        yield


def fire() -> None:
    """Run the armed step, once (after stock's power off)."""
    step = _STEP.get()
    if step is not None:
        _STEP.clear()
        step()
