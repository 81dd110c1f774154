"""Console scripts of nova-imgtype."""

import warnings

# Importing Nova imports eventlet, which announces its own deprecation on
# stderr; it says nothing about the command the operator ran.
warnings.filterwarnings('ignore', message=r'\s*Eventlet is deprecated',
                        category=Warning)

# As Nova's own test packages and services: eventlet patched before anything
# of Nova's runs (``nova-imgtype demo`` runs Nova's services in-process).
from nova import monkey_patch  # noqa: E402

monkey_patch.patch()
