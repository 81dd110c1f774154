"""``python -m nova_imgtype_testing`` (``make demo``): the demo, from a
source tree (it is not installed with nova-imgtype).

The demo runs Nova's services (and its own harness, which sets up the
config itself) in this process, in native threads as Nova 34's services
run: chosen before any of Nova is imported, through the variable Nova's
test packages obey too.
"""

import os
import sys

os.environ.setdefault('OS_NOVA_DISABLE_EVENTLET_PATCHING', '1')

from nova import monkey_patch  # noqa: E402 (the threading mode first)

monkey_patch.patch(backend='threading')

from nova_imgtype_testing import demo  # noqa: E402

sys.exit(demo.run())
