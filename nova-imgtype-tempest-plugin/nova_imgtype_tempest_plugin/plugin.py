"""The tempest plugin: where its tests are and which options it adds."""

from __future__ import annotations

import os

from oslo_config import cfg
from tempest.test_discover import plugins

from nova_imgtype_tempest_plugin import config as imgtype_config

#: Directory holding the ``nova_imgtype_tempest_plugin`` package (tempest's
#: top level dir for discovering our tests).
_TOP_LEVEL_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class NovaImgtypeTempestPlugin(plugins.TempestPlugin):

    def load_tests(self) -> tuple[str, str]:
        """(test dir, top level dir) for unittest discovery."""
        test_dir = os.path.join(
            _TOP_LEVEL_DIR, 'nova_imgtype_tempest_plugin', 'tests')
        return test_dir, _TOP_LEVEL_DIR

    def register_opts(self, conf: cfg.ConfigOpts) -> None:
        for group, opts in imgtype_config.GROUPS:
            conf.register_group(group)
            conf.register_opts(opts, group=group)

    def get_opt_lists(self) -> list[tuple[str, list[cfg.Opt]]]:
        # Group names, not OptGroup objects: tempest turns a name into its
        # CONF attribute (imgtype-feature-enabled: imgtype_feature_enabled).
        return [(group.name, opts) for group, opts in imgtype_config.GROUPS]
