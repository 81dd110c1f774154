"""Minimal real domains for the real tier: a disk's XML, whether KVM is
usable, a domain started and destroyed on a libvirt connection."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from xml.sax.saxutils import escape
from xml.sax.saxutils import quoteattr

import libvirt

from nova_imgtype_testing.images import StrPath

EMULATOR = '/usr/bin/qemu-system-x86_64'


def file_disk_xml(path: StrPath, fmt: str, target: str = 'vda',
                  bus: str = 'virtio') -> str:
    """A ``<disk type='file'>`` element for :func:`start_domain`."""
    return (
        "<disk type='file' device='disk'>"
        "<driver name='qemu' type=%s/>"
        "<source file=%s/>"
        "<target dev=%s bus=%s/>"
        "</disk>" % (quoteattr(fmt), quoteattr(os.fspath(path)),
                     quoteattr(target), quoteattr(bus)))


def kvm_usable(conn: libvirt.virConnect) -> bool:
    """Whether the daemon offers domain type kvm for x86_64 guests."""
    caps = ET.fromstring(conn.getCapabilities())
    return any(
        domain.get('type') == 'kvm'
        for guest in caps.findall('guest')
        if guest.find("arch[@name='x86_64']") is not None
        for domain in guest.findall('arch/domain'))


def start_domain(conn: libvirt.virConnect, name: str,
                 disk_xml_snippets: Iterable[str], kvm: bool,
                 serial_path: StrPath | None = None) -> libvirt.virDomain:
    """Define and start a minimal x86_64 domain with the given disks.

    64 MiB, one vCPU, no network, no graphics, no USB, no balloon; the
    serial console goes to ``serial_path`` when given, else nowhere.
    Domain type ``kvm`` when ``kvm`` is true, else ``qemu`` (TCG).
    """
    if serial_path is None:
        serial = "<serial type='null'/>"
    else:
        serial = ("<serial type='file'><source path=%s/></serial>"
                  % quoteattr(os.fspath(serial_path)))
    xml = (
        "<domain type=%s>"
        "<name>%s</name>"
        "<memory unit='MiB'>64</memory>"
        "<vcpu>1</vcpu>"
        "<os><type arch='x86_64'>hvm</type><boot dev='hd'/></os>"
        "<devices>"
        "<emulator>%s</emulator>"
        "%s%s"
        "<controller type='usb' model='none'/>"
        "<memballoon model='none'/>"
        "</devices>"
        "</domain>" % (quoteattr('kvm' if kvm else 'qemu'), escape(name),
                       escape(EMULATOR), ''.join(disk_xml_snippets),
                       serial))
    dom = conn.defineXML(xml)
    try:
        dom.create()
    except libvirt.libvirtError:
        dom.undefine()
        raise
    return dom


def destroy_domain(dom: libvirt.virDomain) -> None:
    """Stop (hard) and undefine a domain; gone already is fine."""
    try:
        if dom.isActive():
            dom.destroy()
        if dom.isPersistent():
            dom.undefine()
    except libvirt.libvirtError as e:
        if e.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
            raise
