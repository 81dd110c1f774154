# nova-imgtype's release notes (tox -e releasenotes: sphinx-build -W).

project = 'nova-imgtype release notes'
copyright = 'nova-imgtype developers'

extensions = ['reno.sphinxext']

root_doc = 'index'
html_theme = 'alabaster'
