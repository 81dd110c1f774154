"""An instance's ``disk.info`` kept out of stock's cold move.

Stock's ``migrate_disk_and_power_off`` copies ``<instance>_resize/
disk.info`` to the destination with scp or rsync when the file exists. A
move the plugin sends through libvirt sends it there itself: :func:`hide`
renames it out of stock's sight before stock's step, and :func:`unhide`
puts it back (where stock's rename took it). :func:`recover` puts back one
a crash left hidden.
"""

from __future__ import annotations

import os

from nova_imgtype.stock.facts import SourceFact

DISK_INFO = 'disk.info'
HIDDEN = DISK_INFO + '.imgtype-moving'

FACTS = (
    SourceFact(
        'nova.virt.libvirt.driver:LibvirtDriver.migrate_disk_and_power_off',
        (r'os\.rename\(inst_base, inst_base_resize\)',
         r"src_disk_info_path = os\.path\.join\(inst_base_resize, "
         r"'disk\.info'\)",
         r'if os\.path\.exists\(src_disk_info_path\):',
         r'libvirt_utils\.copy_image\(src_disk_info_path'),
        'stock copies disk.info only when it finds it by that name in '
        '_resize: renamed, it is the plugin\'s to send'),
)


def hide(directory: str) -> str | None:
    """Rename ``disk.info`` in ``directory`` out of stock's sight; the new
    name, or None when there is none."""
    if not os.path.exists(os.path.join(directory, DISK_INFO)):
        return None
    os.rename(os.path.join(directory, DISK_INFO),
              os.path.join(directory, HIDDEN))
    return HIDDEN


def unhide(directory: str, hidden: str | None) -> None:
    """Undo :func:`hide` in ``directory`` (where it may have moved)."""
    path = os.path.join(directory, hidden) if hidden else None
    if path and os.path.exists(path):
        os.rename(path, os.path.join(directory, DISK_INFO))


def recover(directory: str) -> None:
    """Put back a ``disk.info`` a move hid in ``directory`` (one a crash
    interrupted)."""
    unhide(directory, HIDDEN)
