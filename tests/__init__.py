"""nova-imgtype's tests.

Every tier runs the way Nova 34's services run in production: native
threads, no eventlet. Nova decides that once per process, before anything
of Nova is imported (its own test packages do it in their __init__):
pytest imports this package before any conftest or test module below it,
so this one call covers ``pytest tests/unit tests/functional tests/real``
run in one process. The choice is made through Nova's environment
variable, which Nova's own test packages (that call ``monkey_patch.patch()``
with eventlet as their default when imported) obey too.
``OS_NOVA_DISABLE_EVENTLET_PATCHING=0`` runs the tests under eventlet
instead; importing eventlet is refused otherwise.
"""

import os

os.environ.setdefault('OS_NOVA_DISABLE_EVENTLET_PATCHING', '1')

from nova import monkey_patch  # noqa: E402

monkey_patch.patch(backend='threading')
