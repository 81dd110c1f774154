"""Entry point for oslo-config-generator (namespace ``nova_imgtype``)."""

from oslo_config import cfg

from nova_imgtype.conf import image_cache
from nova_imgtype.conf import libvirt
from nova_imgtype.conf import scheduler


def list_opts() -> list[tuple[cfg.OptGroup, list[cfg.Opt]]]:
    return [(group, opts) for module in (image_cache, libvirt, scheduler)
            for group, opts in module.list_opts().items()]
