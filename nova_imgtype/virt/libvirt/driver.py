"""The libvirt compute driver with per-instance image backends."""

from nova.virt.libvirt import driver as libvirt_driver


class LibvirtDriver(libvirt_driver.LibvirtDriver):
    pass
