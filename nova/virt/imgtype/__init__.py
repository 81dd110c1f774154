# Thin shim: stock Nova imports compute drivers only from under nova.virt
# (``compute_driver = imgtype.LibvirtDriver``). The driver lives in
# nova_imgtype; nothing else of this package is inside Nova's namespace.
from nova_imgtype.virt.libvirt.driver import LibvirtDriver

__all__ = ['LibvirtDriver']
