# nova-imgtype's manual (make docs or tox -e docs: sphinx-build -W).

project = 'nova-imgtype'
copyright = 'nova-imgtype developers'

extensions = [
    # The configuration reference, from the options themselves.
    'oslo_config.sphinxext',
]

root_doc = 'index'
exclude_patterns: list[str] = []
html_theme = 'alabaster'
# The option help is Nova's style of RST; a warning is an error (-W).
nitpicky = False
