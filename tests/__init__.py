"""nova-imgtype's tests.

Every tier runs the way the installed Nova's services run in production
(:func:`nova_imgtype.releases.native_threading_default`): native threads, no
eventlet, on Nova 34 (2026.2); eventlet, nova-compute's default, on Nova 33
(2026.1). Nova decides that once per process, before anything of Nova is
imported (its own test packages do it in their __init__): pytest imports
this package before any conftest or test module below it, so this one call
covers ``pytest tests/unit tests/functional tests/real`` run in one process.
The choice is made through Nova's environment variable, which Nova's own
test packages (that call ``monkey_patch.patch()`` when imported) and the
real tier's subprocesses obey too. Setting
``OS_NOVA_DISABLE_EVENTLET_PATCHING`` (``1``: native threads, ``0``:
eventlet) overrides it.
"""

import os

from nova_imgtype import releases

os.environ.setdefault('OS_NOVA_DISABLE_EVENTLET_PATCHING',
                      '1' if releases.native_threading_default() else '0')

from nova import monkey_patch  # noqa: E402

monkey_patch.patch(backend='threading')
