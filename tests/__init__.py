"""nova-imgtype's tests.

eventlet monkey patching must happen before anything of Nova is imported,
in every tier (Nova's own test packages do the same in their __init__):
pytest imports this package before any conftest or test module below it,
so one patch here covers ``pytest tests/unit tests/functional tests/real``
run in one process, whatever is collected first.
"""

from nova import monkey_patch

monkey_patch.patch()
