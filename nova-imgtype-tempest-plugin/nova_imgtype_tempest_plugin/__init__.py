"""nova-imgtype's tempest plugin (entry point ``tempest.test_plugins``).

A distribution of its own (``nova-imgtype-tempest-plugin``), installed next
to tempest: nothing here imports Nova or nova_imgtype, and its requirements
are tempest's, so a tempest venv does not pull in Nova. The scenarios run
against a cloud deployed elsewhere.
"""
