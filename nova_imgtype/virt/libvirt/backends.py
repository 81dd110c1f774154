"""The image backends, found through the ``nova_imgtype.image_backends``
stevedore namespace.

An image backend is a subclass of Nova's
:class:`nova.virt.libvirt.imagebackend.Image`. Stock Nova's own backends
(``lvm``, ``rbd``, ``ploop``) are registered to Nova's classes by this
package's ``setup.cfg``; ``raw``/``flat`` and ``qcow2`` to thin subclasses
that mend a stock defect each (:mod:`.flat`, :mod:`.qcow2`). A third-party
backend becomes usable in ``[libvirt]images_type_mapping`` by registering
there too.

Two optional class attributes let a backend take part in the mapping:

``native_disk_formats``
    The Glance disk formats the backend uses in their own format, without
    conversion. Defaults to ``('raw',)``: every Nova backend can consume raw.

``host_support_error(conf)``
    A classmethod returning ``None`` when this host can serve the backend,
    or a sentence saying why not.

``accepts_linked_templates``
    True when an instance disk never aliases its template, even one that is
    a symbolic link to a volume (``volume-based-linking``): the template is
    only a read-only copy-on-write backing, or its data is copied. Defaults
    to False: such a backend gets downloaded templates.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from collections.abc import Sequence

from nova.virt.libvirt import imagebackend
from oslo_config import cfg
from stevedore import extension

from nova_imgtype import exception
from nova_imgtype.virt.libvirt import ceph_cluster

NAMESPACE = 'nova_imgtype.image_backends'

#: ``[libvirt]images_type = default`` means qcow2 with ``use_cow_images``
#: and flat without, exactly as in stock Nova.
DEFAULT = 'default'

BackendClass = type[imagebackend.Image]

# Stock Nova's classes cannot carry our attributes, so what they hold natively
# and what a host needs to serve them is said here, once.
_STOCK_NATIVE_FORMATS: dict[BackendClass, tuple[str, ...]] = {
    imagebackend.Flat: ('raw',),
    imagebackend.Qcow2: ('qcow2',),
    imagebackend.Lvm: ('raw',),
    imagebackend.Rbd: ('raw',),
    imagebackend.Ploop: ('ploop',),
}


def _lvm_error(conf: cfg.ConfigOpts) -> str | None:
    if not conf.libvirt.images_volume_group:
        return '[libvirt]images_volume_group is not set'
    return None


#: Where librados looks when ``[libvirt]images_rbd_ceph_conf`` is empty.
DEFAULT_CEPH_CONF = '/etc/ceph/ceph.conf'


def _rbd_error(conf: cfg.ConfigOpts) -> str | None:
    # images_rbd_pool defaults to 'rbd' on every host: a Ceph cluster is
    # configured only where a ceph.conf names its monitors.
    if not conf.libvirt.images_rbd_pool:
        return '[libvirt]images_rbd_pool is not set'
    ceph_conf = conf.libvirt.images_rbd_ceph_conf or DEFAULT_CEPH_CONF
    if not ceph_cluster.names_monitors(ceph_conf,
                                       conf.libvirt.rbd_user or ''):
        return ('no Ceph monitor in %s ([libvirt]images_rbd_ceph_conf)'
                % ceph_conf)
    return None


def _ploop_error(conf: cfg.ConfigOpts) -> str | None:
    if conf.libvirt.virt_type != 'parallels':
        return ('ploop needs [libvirt]virt_type = parallels, not %r'
                % conf.libvirt.virt_type)
    return None


_STOCK_HOST_CHECKS: dict[BackendClass,
                         Callable[[cfg.ConfigOpts], str | None]] = {
    imagebackend.Lvm: _lvm_error,
    imagebackend.Rbd: _rbd_error,
    imagebackend.Ploop: _ploop_error,
}


# Stock backends that never alias their template: Qcow2 makes overlays on
# it, Lvm (qemu-img convert) and Rbd (rbd import) copy its data. Stock
# Flat copies it with ``cp -r``, a link as a link: this package registers
# its own Flat (:mod:`.flat`) instead. (Stock Qcow2 stays listed for a
# third party registering it.)
_STOCK_LINK_SAFE: tuple[BackendClass, ...] = (
    imagebackend.Qcow2, imagebackend.Lvm, imagebackend.Rbd)


@functools.lru_cache(maxsize=1)
def _manager() -> extension.ExtensionManager:
    return extension.ExtensionManager(NAMESPACE, invoke_on_load=False)


def reset() -> None:
    """Forget the loaded extensions (for tests that register new ones)."""
    _manager.cache_clear()
    # stevedore also keeps entry points per namespace on the class.
    extension.ExtensionManager.ENTRY_POINT_CACHE.pop(NAMESPACE, None)


def names() -> Sequence[str]:
    """Sorted names of every registered backend."""
    return sorted(_manager().names())


def get_class(name: str) -> BackendClass:
    """The backend class registered as ``name``.

    :raises UnknownImageBackend: when nothing is registered under the name.
    """
    mgr = _manager()
    if name not in mgr.names():
        raise exception.UnknownImageBackend(
            name=name, known=', '.join(names()))
    return mgr[name].plugin


def resolve_name(name: str, use_cow: bool) -> str:
    """Turn ``default`` into the backend it stands for; others unchanged."""
    if name == DEFAULT:
        return 'qcow2' if use_cow else 'flat'
    return name


def native_formats(name: str) -> tuple[str, ...]:
    """The disk formats the backend ``name`` uses without conversion."""
    cls = get_class(name)
    declared = getattr(cls, 'native_disk_formats', None)
    if declared is not None:
        return tuple(declared)
    for stock_cls, formats in _STOCK_NATIVE_FORMATS.items():
        if cls is stock_cls:
            return formats
    return ('raw',)


def host_support_error(name: str, conf: cfg.ConfigOpts) -> str | None:
    """Why this host cannot serve the backend ``name``, or None if it can."""
    cls = get_class(name)
    check = getattr(cls, 'host_support_error', None)
    if check is not None:
        return check(conf)
    # A registered subclass of a stock class (this package's Rbd) needs
    # what its stock class needs.
    stock_check = next((_STOCK_HOST_CHECKS[k] for k in cls.__mro__
                        if k in _STOCK_HOST_CHECKS), None)
    return stock_check(conf) if stock_check else None


def accepts_linked_templates(cls: type) -> bool:
    """Whether the backend class ``cls`` uses linked templates safely."""
    declared = getattr(cls, 'accepts_linked_templates', None)
    if declared is not None:
        return bool(declared)
    return cls in _STOCK_LINK_SAFE

