"""What this host tells the scheduler about image formats.

Stock reports ``COMPUTE_IMAGE_TYPE_*`` from its driver's capabilities,
which say what ``images_type`` can boot. With per-format backends a host
boots every format its mapping or its ``images_type`` serves
(:meth:`image_type_capabilities`, given to stock as its capabilities), and
says more with traits of its own (:attr:`custom_traits`): the backends it
serves (``CUSTOM_IMGTYPE_BACKEND_*``, which the moves' request filter
asks for) and the formats it uses as they are
(``CUSTOM_IMGTYPE_NATIVE_*``). All of it is fixed from the configuration
nova-compute started with, as stock's capabilities are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nova.virt import driver as virt_driver
from oslo_config import cfg

from nova_imgtype import traits
from nova_imgtype.virt.libvirt import backends
from nova_imgtype.virt.libvirt import mapping as mapping_mod
from nova_imgtype.virt.libvirt import resolver as resolver_mod


class HostTraits:
    """The image-format capabilities and traits of this host.

    :param resolver: the host's backend decisions (its mapping).
    :param conf: the configuration nova-compute started with.
    """

    def __init__(self, resolver: resolver_mod.BackendResolver,
                 conf: cfg.ConfigOpts) -> None:
        self._resolver = resolver
        self._conf = conf
        excluded = set(conf.compute.image_type_exclude_list)
        #: ``CUSTOM_IMGTYPE_*`` traits this host reports.
        self.custom_traits: frozenset[str] = frozenset(
            {traits.backend_trait(b) for b in self.served_backends()} |
            {traits.native_trait(f) for f in resolver.native_formats()
             if f not in excluded})

    def served_backends(self) -> list[str]:
        """Every registered backend this host can serve."""
        return [name for name in backends.names()
                if backends.host_support_error(name, self._conf) is None]

    def image_type_capabilities(self) -> dict[str, bool]:
        """``supports_image_type_<format>`` for each format stock maps to a
        ``COMPUTE_IMAGE_TYPE_*`` trait: whether this host boots it."""
        supported = self._resolver.supported_formats()
        out = {}
        for fmt in mapping_mod.SOURCE_FORMATS:
            key = 'supports_image_type_%s' % fmt
            if key in virt_driver.CAPABILITY_TRAITS_MAP:
                out[key] = fmt in supported
        return out

    def stats(self, capability_traits: Mapping[str, bool]) -> dict[str, str]:
        """The compute node stats that tell the scheduler's host filter the
        image-type traits this host reports: the ``COMPUTE_IMAGE_TYPE_*``
        of ``capability_traits`` (stock's ``capabilities_as_traits()``,
        from which stock's resource tracker sets them in placement) that
        are true, and our ``CUSTOM_IMGTYPE_NATIVE_*``."""
        return traits.to_stats(
            {t for t, supported in capability_traits.items() if supported} |
            self.custom_traits)

    def update(self, provider_tree: Any, nodename: str) -> None:
        """This host's custom traits on its provider, stale ones (of a
        configuration before) removed; the ``COMPUTE_IMAGE_TYPE_*`` ones
        are stock's to set, from the capabilities."""
        wanted = set(self.custom_traits)
        stale = {t for t in provider_tree.data(nodename).traits
                 if traits.ours(t, traits.BACKEND_PREFIX) or
                 traits.ours(t, traits.NATIVE_PREFIX)} - wanted
        if stale:
            provider_tree.remove_traits(nodename, *stale)
        provider_tree.add_traits(nodename, *wanted)
