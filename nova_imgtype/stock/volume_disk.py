"""``<disk type='volume'>``: a guest disk on a libvirt storage volume.

Nova's disk config (:class:`nova.virt.libvirt.config.LibvirtConfigGuestDisk`)
writes file, block, mount and network sources only. A disk of the storage
pool backend is stock's disk config for the same image (driver, cache,
target, bus, QoS, encryption: all of it stock's), with a volume source:
:func:`from_stock` makes one from the other.
"""

from __future__ import annotations

from typing import Any

from lxml import etree
from nova.virt.libvirt import config as vconfig

from nova_imgtype.stock.facts import SourceFact

FACTS = (
    SourceFact(
        'nova.virt.libvirt.imagebackend:Image.libvirt_info',
        (r'info = vconfig\.LibvirtConfigGuestDisk\(\)', r'return info'),
        'the storage pool backend takes stock\'s disk config of the image '
        'and gives it a volume source (from_stock)'),
    SourceFact(
        'nova.virt.libvirt.config:LibvirtConfigGuestDisk.format_dom',
        (r'dev\.set\("type", self\.source_type\)',
         r'if self\.source_type == "file"'),
        'stock writes the disk type it is given and no <source> for a '
        'volume, which LibvirtConfigGuestVolumeDisk adds',
        absent=(r'source_type == ["\']volume["\']',)),
    SourceFact(
        'nova.virt.libvirt.config:LibvirtConfigGuestDisk.parse_dom',
        (r"self\.source_type = xmldoc\.get\('type'\)",),
        'a volume disk read back keeps its type; its pool and volume are '
        'read by LibvirtConfigGuestVolumeDisk'),
)


class LibvirtConfigGuestVolumeDisk(vconfig.LibvirtConfigGuestDisk):
    """A guest disk on a libvirt storage volume: ``<disk type='volume'>``
    with ``<source pool='...' volume='...'/>``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source_type = 'volume'
        self.source_pool: str | None = None
        self.source_volume: str | None = None

    def format_dom(self) -> Any:
        dev = super().format_dom()
        source = etree.Element('source', pool=self.source_pool,
                               volume=self.source_volume)
        target = dev.find('target')
        if target is not None:
            target.addprevious(source)
        else:
            dev.append(source)
        return dev

    def parse_dom(self, xmldoc: Any) -> None:
        super().parse_dom(xmldoc)
        source = xmldoc.find('source')
        if source is not None:
            self.source_pool = source.get('pool')
            self.source_volume = source.get('volume')


def from_stock(disk: vconfig.LibvirtConfigGuestDisk, pool: str,
               volume: str) -> LibvirtConfigGuestVolumeDisk:
    """Stock's disk config ``disk`` with its source the ``volume`` of
    ``pool`` instead of a path."""
    out = LibvirtConfigGuestVolumeDisk()
    out.__dict__.update(disk.__dict__)
    out.source_type = 'volume'
    out.source_path = None
    out.source_pool = pool
    out.source_volume = volume
    return out
