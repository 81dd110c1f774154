"""Entry point for oslo-config-generator (namespace ``nova_imgtype``)."""

from oslo_config import cfg

from nova_imgtype.conf import libvirt


def list_opts() -> list[tuple[cfg.OptGroup, list[cfg.Opt]]]:
    return [(group, opts) for group, opts in libvirt.list_opts().items()]
