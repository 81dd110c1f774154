"""The destination XML of a live migration, rewritten for stock.

Stock's ``_live_migration_operation`` makes the XML the destination starts
the guest from (``get_updated_guest_xml``) and hands it to
``guest.migrate(destination_xml=...)``. Its disks are the source's paths;
an instance whose disks the destination makes elsewhere (its pool's
volumes, or files where its pool volumes were) needs them rewritten there.
Stock has no hook between the two steps, so the plugin hands stock a guest
of its own (:class:`RetargetedGuest`) whose ``migrate`` rewrites the XML
it is given, and is the real guest in every other way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nova_imgtype.stock.facts import SourceFact

FACTS = (
    SourceFact(
        'nova.virt.libvirt.driver:LibvirtDriver._live_migration_operation',
        (r'get_updated_guest_xml\(', r'guest\.migrate\(',
         r'destination_xml=new_xml_str'),
        'the destination XML is made before, and given to, the migrate() '
        'of the guest the plugin hands stock (RetargetedGuest)'),
)


class RetargetedGuest:
    """A :class:`nova.virt.libvirt.guest.Guest` whose ``migrate`` sends
    ``rewrite(xml)`` as the destination XML; everything else is the
    guest's own."""

    def __init__(self, guest: Any, rewrite: Callable[[str], str]) -> None:
        self._guest = guest
        self._rewrite = rewrite

    def __getattr__(self, name: str) -> Any:
        return getattr(self._guest, name)

    def migrate(self, *args: Any, **kwargs: Any) -> Any:
        """The guest's ``migrate``, its ``destination_xml`` (the guest's
        migratable XML when stock gave none) rewritten."""
        xml = kwargs.get('destination_xml') or self._guest.get_xml_desc(
            dump_migratable=True)
        kwargs['destination_xml'] = self._rewrite(xml)
        return self._guest.migrate(*args, **kwargs)
