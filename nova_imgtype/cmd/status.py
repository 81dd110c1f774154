"""``nova-imgtype-status upgrade check``: is the cloud ready for the filter?

Like ``nova-status upgrade check`` (oslo.upgradecheck): run it with the
scheduler's nova.conf (it needs ``[placement]`` credentials) before turning
``[scheduler]filter_hosts_by_image_type_support`` on, and after upgrading
compute nodes or the Nova under nova-imgtype.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import os_traits
from nova import exception as nova_exception
from nova.scheduler.client import report
from oslo_config import cfg
from oslo_upgradecheck import upgradecheck

import nova_imgtype.conf
from nova_imgtype import cmd
from nova_imgtype import exception
from nova_imgtype import stock

CONF: cfg.ConfigOpts = nova_imgtype.conf.CONF

#: Placement microversion for ``required=in:`` (any-of) trait queries.
PLACEMENT_VERSION = '1.39'


def _providers(client: Any, query: str) -> dict[str, str]:
    """``{uuid: name}`` of the resource providers matching ``query``."""
    resp = client.get('/resource_providers?' + query,
                      version=PLACEMENT_VERSION)
    if resp.status_code != 200:
        raise nova_exception.NovaException(
            'placement answered %s to %s: %s' % (resp.status_code, query,
                                                 resp.text))
    return {rp['uuid']: rp['name']
            for rp in resp.json()['resource_providers']}


def nodes_without_image_type_traits(client: Any) -> list[str]:
    """Names of compute node providers reporting no image-type trait."""
    nodes = _providers(client, 'required=%s' % os_traits.COMPUTE_NODE)
    reporting = _providers(client, 'required=%s&required=in:%s' % (
        os_traits.COMPUTE_NODE,
        ','.join(os_traits.get_traits('COMPUTE_IMAGE_TYPE_'))))
    return sorted(name for uuid, name in nodes.items()
                  if uuid not in reporting)


class Checks(upgradecheck.UpgradeCommands):
    """The checks of ``nova-imgtype-status upgrade check``."""

    def __init__(self, client: Any = None) -> None:
        self._client = client

    def _placement(self) -> Any:
        if self._client is None:
            self._client = report.report_client_singleton()
        return self._client

    def _check_image_type_traits(self) -> upgradecheck.Result:
        """Every compute node reports image-type traits to placement.

        A node that does not is never chosen while the request filter is
        on: failure when it is, warning when not (turning it on would be).
        """
        try:
            missing = nodes_without_image_type_traits(self._placement())
        except Exception as e:  # noqa: BLE001 - reported, not raised
            return upgradecheck.Result(
                upgradecheck.Code.FAILURE,
                'Could not ask placement for compute node traits: %s' % e)
        if not missing:
            return upgradecheck.Result(upgradecheck.Code.SUCCESS)
        enabled = CONF.scheduler.filter_hosts_by_image_type_support
        details = (
            'Compute nodes reporting no COMPUTE_IMAGE_TYPE_* trait: %s. '
            'They run a driver that reports no image types or an old '
            'nova-compute, and %s no instance while '
            '[scheduler]filter_hosts_by_image_type_support is on. Upgrade '
            'and restart their nova-compute first.' % (
                ', '.join(missing), 'get' if enabled else 'would get'))
        code = (upgradecheck.Code.FAILURE if enabled
                else upgradecheck.Code.WARNING)
        return upgradecheck.Result(code, details)

    def _check_options(self) -> upgradecheck.Result:
        """nova-imgtype's options are valid: nova-compute starts with them
        (as far as can be told off the compute node)."""
        try:
            cmd.check_as_nova_compute(CONF)
        except (cfg.ConfigFileValueError, ValueError, nova_exception.Invalid,
                exception.ImgtypeException) as e:
            return upgradecheck.Result(upgradecheck.Code.FAILURE,
                                       cmd.describe(e))
        except ImportError as e:
            # A control node: no libvirt-python, which nova-compute has.
            if e.name != 'libvirt':
                raise
            return upgradecheck.Result(
                upgradecheck.Code.WARNING,
                'Options not checked on this host: libvirt-python is not '
                'installed here (%s). Run nova-imgtype-status on each '
                'compute node to check them as its nova-compute reads '
                'them.' % e)
        return upgradecheck.Result(upgradecheck.Code.SUCCESS)

    def _check_stock_hooks(self) -> upgradecheck.Result:
        """The installed Nova does what nova-imgtype's hooks into its code
        rely on (:mod:`nova_imgtype.stock`): run it after installing a new
        Nova, before restarting nova-compute on it."""
        broken = stock.broken()
        if broken:
            return upgradecheck.Result(
                upgradecheck.Code.FAILURE,
                'This Nova is not one this nova-imgtype was made for; '
                'upgrade nova-imgtype before restarting nova-compute with '
                'it. ' + ' '.join(broken))
        return upgradecheck.Result(upgradecheck.Code.SUCCESS)

    def check(self) -> upgradecheck.Code:
        """The checks; an option whose value cannot be read at all (a
        substitution loop) is one ``ERROR:`` line and failure, as a config
        file that cannot be parsed, not a table."""
        try:
            with cmd.config_value_errors():
                return super().check()
        except cmd.ConfigValueError as e:
            print('ERROR: %s' % e, file=sys.stderr)
            return upgradecheck.Code.FAILURE

    #: The options first: one that cannot be read stops the checks before
    #: placement is asked anything.
    _upgrade_checks = (
        ('nova-imgtype options', _check_options),
        ('Stock Nova hooks', _check_stock_hooks),
        ('Image type traits', _check_image_type_traits),
    )


#: oslo.upgradecheck's exit status for a check that could not run (a
#: config file that cannot be read included), apart from its checks' codes.
ERROR = 255


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ['--version']:
        print(cmd.version())
        return 0
    # Stock's libvirt driver reads [libvirt]images_type when its module is
    # imported (a default argument of a method): the hooks into stock's
    # code, which import it, are imported before the config files are
    # parsed, so that a bad value fails the options check alone.
    stock.all_facts()
    try:
        cmd.refuse_special_files(cmd.config_files(args, project='nova'))
        with cmd.config_file_errors():   # upgradecheck.main parses them
            result: int = upgradecheck.main(
                CONF, project='nova', upgrade_command=Checks(), argv=args)
    except cmd.ConfigFileError as e:
        print('ERROR: %s' % cmd.describe(e), file=sys.stderr)
        return ERROR
    return result


def run() -> None:
    sys.exit(cmd.exit_quietly_on_closed_pipe(main))
