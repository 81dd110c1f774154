"""Configuration options of nova-imgtype, registered in Nova's groups."""

from oslo_config import cfg

from nova_imgtype.conf import image_cache
from nova_imgtype.conf import libvirt
from nova_imgtype.conf import scheduler

CONF = cfg.CONF

image_cache.register_opts(CONF)
libvirt.register_opts(CONF)
scheduler.register_opts(CONF)
