"""libvirt XML that Nova's ``nova.virt.libvirt.config`` cannot write.

Nova's :class:`LibvirtConfigGuestDisk` has no ``type='volume'`` source; a
disk on a storage pool volume needs ``<source pool='...' volume='...'/>``.
"""

from __future__ import annotations

from typing import Any

from lxml import etree
from nova.virt.libvirt import config as vconfig


class LibvirtConfigGuestVolumeDisk(vconfig.LibvirtConfigGuestDisk):
    """A guest disk on a libvirt storage volume: ``<disk type='volume'>``."""

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
