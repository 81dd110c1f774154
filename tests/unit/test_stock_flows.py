"""The order of steps inside stock methods that the plugin's hooks rely on.

A hook is correct only while stock calls it where it does today. These
read the installed Nova's source, so that a Nova that moves a step fails
here, not in a cloud.
"""

import inspect
import re

from nova.virt.libvirt import driver as stock_driver

from nova_imgtype.virt.libvirt import driver_transfers

STOCK = stock_driver.LibvirtDriver


def _positions(source, *patterns):
    found = []
    for pattern in patterns:
        match = re.search(pattern, source)
        assert match, pattern
        found.append(match.start())
    return found


def test_stock_cold_move_checks_then_powers_off_then_keeps_the_directory():
    """A pool instance's volumes are staged into the instance directory by
    the plugin's ``power_off`` during the move (the guest stopped), so
    stock must refuse a resize down before it powers off (the guest keeps
    running), and power off before it reads the disks and renames the
    directory to ``_resize`` (the volumes go with it)."""
    source = inspect.getsource(STOCK.migrate_disk_and_power_off)
    check, power_off, disks, rename = _positions(
        source,
        r'Unable to resize disk down',
        r'self\.power_off\(instance, timeout, retry_interval\)',
        r'self\._get_instance_disk_info\(',
        r'os\.rename\(inst_base, inst_base_resize\)')
    assert check < power_off < disks < rename
    # The plugin's hook is the driver's own power_off, which stock calls.
    assert 'power_off' in vars(driver_transfers.Transfers)
