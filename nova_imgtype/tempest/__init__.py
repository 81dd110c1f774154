"""nova-imgtype's tempest plugin (entry point ``tempest.test_plugins``).

Nothing here imports Nova or the rest of nova_imgtype: the plugin runs in
tempest's environment, against a cloud deployed elsewhere.
"""
