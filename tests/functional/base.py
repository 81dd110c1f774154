"""Moved: nova_imgtype.testing.functional."""
from nova_imgtype.testing.functional import *  # noqa: F401,F403
from nova_imgtype.testing.functional import _QEMU_FORMAT  # noqa: F401
from nova_imgtype.testing.functional import CONF  # noqa: F401
