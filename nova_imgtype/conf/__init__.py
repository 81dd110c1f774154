"""Configuration options of nova-imgtype, registered in Nova's groups."""

from oslo_config import cfg

from nova_imgtype.conf import libvirt
from nova_imgtype.conf import scheduler

CONF = cfg.CONF

libvirt.register_opts(CONF)
scheduler.register_opts(CONF)
