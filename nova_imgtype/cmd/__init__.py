"""Console scripts of nova-imgtype."""

import warnings

# Importing Nova imports eventlet, which announces its own deprecation on
# stderr; it says nothing about the command the operator ran.
warnings.filterwarnings('ignore', message=r'\s*Eventlet is deprecated',
                        category=Warning)
