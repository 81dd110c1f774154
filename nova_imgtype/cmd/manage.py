"""``nova-imgtype``: operator commands.

``nova-imgtype check [--config-file /etc/nova/nova.conf] [--format
table|json]`` validates the plugin's options the way nova-compute will, and
prints for every Glance disk_format the backend a new instance gets, whether
its image is converted, and the image-type trait the node reports for it.
Without ``--config-file`` it reads what nova-manage reads
(``/etc/nova/nova.conf`` and the other default places). It fails when
``compute_driver`` is not nova-imgtype's driver, and warns of options set
in nova-imgtype's groups that nothing registers (a misspelt option, which
nova-compute would ignore).

``nova-imgtype prepare-uninstall [--apply] [--format table|json]`` tells
what keeps this compute from stock's ``libvirt.LibvirtDriver`` and, with
``--apply`` (nova-compute stopped), takes it back
(:mod:`nova_imgtype.cmd.prepare_uninstall`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

import prettytable
from oslo_config import cfg

from nova_imgtype import cmd

# Nova's CONF: check() imports Nova, which registers Nova's options (and
# ours) on it; not before main() knows the command.
CONF: cfg.ConfigOpts = cfg.CONF


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """A table of dict rows, columns in the first row's order, as
    nova-manage prints its tables (``prettytable``)."""
    if not rows:
        return ''
    cols = list(rows[0])
    table = prettytable.PrettyTable(cols)
    table.align = 'l'
    for row in rows:
        table.add_row([str(row[c]) for c in cols])
    return str(table.get_string())


def resolution_rows(conf: cfg.ConfigOpts) -> list[dict[str, Any]]:
    """One row per Glance disk_format: what a new instance gets."""
    from nova.virt import driver as virt_driver

    from nova_imgtype.virt.libvirt import mapping as mapping_mod
    from nova_imgtype.virt.libvirt import resolver as resolver_mod

    resolver = resolver_mod.BackendResolver(conf)
    supported = resolver.supported_formats()
    excluded = set(conf.compute.image_type_exclude_list)
    rows = []
    for fmt in mapping_mod.SOURCE_FORMATS:
        plan = resolver.plan(fmt)
        trait = virt_driver.CAPABILITY_TRAITS_MAP.get(
            'supports_image_type_%s' % fmt)
        reported = (trait is not None and fmt in supported and
                    fmt not in excluded)
        rows.append({
            'disk_format': fmt,
            'backend': plan.backend,
            'source': 'mapping' if plan.mapped else 'images_type',
            'storage': 'pools' if plan.storage == 'pools' else 'files',
            'converted': 'yes' if plan.converted else 'no',
            'trait': trait if reported else '-',
        })
    return rows


def check(conf: cfg.ConfigOpts, out_format: str) -> int:
    """Validate as nova-compute does and print; 0 when valid, 2 with the
    error otherwise."""
    # Importing Nova reads some options ([libvirt]images_type) already.
    with cmd.config_value_errors():
        import nova_imgtype.conf  # noqa: F401  (Nova's options and ours)
        from nova_imgtype import exception

        try:
            cmd.check_as_nova_compute(conf)
            mapping = conf.libvirt.images_type_mapping
            rows = resolution_rows(conf)
        except (cfg.ConfigFileValueError, exception.ImgtypeException,
                ValueError) as e:
            print('ERROR: %s' % cmd.describe(e), file=sys.stderr)
            return 2
    if conf.compute_driver not in cmd.PLUGIN_DRIVERS:
        print('ERROR: [DEFAULT]compute_driver is %s, not nova-imgtype\'s '
              'driver (%s): nova-compute does not use these options' % (
                  conf.compute_driver or 'not set',
                  cmd.PLUGIN_DRIVERS[0]), file=sys.stderr)
        return 2
    for option in cmd.unknown_options(conf, cmd.OWN_GROUPS):
        print('WARNING: %s is not an option of Nova or nova-imgtype '
              '(misspelt?): nova-compute ignores it' % option,
              file=sys.stderr)
    if out_format == 'json':
        print(json.dumps({
            'images_type': conf.libvirt.images_type,
            'images_type_mapping': str(mapping),
            'formats': rows}, indent=2))
    else:
        print('images_type = %s, images_type_mapping = %s' % (
            conf.libvirt.images_type, mapping or '(none)'))
        print(format_table(rows))
    return 0


def prepare_uninstall(conf: cfg.ConfigOpts, apply: bool,
                      out_format: str) -> int:
    """``prepare-uninstall``: the options checked as for ``check``, then
    :func:`nova_imgtype.cmd.prepare_uninstall.prepare`."""
    with cmd.config_value_errors():
        import libvirt
        import oslo_messaging
        from nova import exception as nova_exception

        import nova_imgtype.conf  # noqa: F401  (Nova's options and ours)
        from nova_imgtype import exception
        from nova_imgtype.cmd import prepare_uninstall as prepare_mod

        try:
            cmd.check_as_nova_compute(conf)
            return prepare_mod.prepare(conf, apply, out_format)
        except (cfg.ConfigFileValueError, exception.ImgtypeException,
                nova_exception.NovaException, libvirt.libvirtError,
                oslo_messaging.MessagingException, ValueError) as e:
            print('ERROR: %s' % cmd.describe(e), file=sys.stderr)
            return 2


def add_command_parsers(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        'check', help='validate the options and show, per disk_format, the '
        'backend, conversion and trait of a new instance')
    parser.add_argument('--format', dest='out_format',
                        choices=('table', 'json'), default='table')
    parser = subparsers.add_parser(
        'prepare-uninstall', help='list what keeps this compute from '
        'stock\'s libvirt.LibvirtDriver; with --apply, move stopped '
        'instances back to stock\'s layout, then remove the storage pools '
        'and traits nova-imgtype made (nova-compute stopped)')
    parser.add_argument('--apply', action='store_true',
                        help='do it (without: only say what it would do)')
    parser.add_argument('--format', dest='out_format',
                        choices=('table', 'json'), default='table')


command_opt = cfg.SubCommandOpt('command', title='Commands',
                                handler=add_command_parsers)


_GLOBAL_OPTS = ('--config-file', '--config-dir')


def hoist_global_opts(argv: Sequence[str]) -> list[str]:
    """Move ``--config-file``/``--config-dir`` in front of the command.

    oslo.config only takes them before the sub-command, but operators write
    ``nova-imgtype check --config-file nova.conf``.
    """
    front: list[str] = []
    rest: list[str] = []
    args = iter(argv)
    for arg in args:
        if arg in _GLOBAL_OPTS:
            front += [arg, next(args, '')]
        elif arg.split('=', 1)[0] in _GLOBAL_OPTS:
            front.append(arg)
        else:
            rest.append(arg)
    return front + rest


def main(argv: Sequence[str] | None = None) -> int:
    CONF.register_cli_opt(command_opt)
    args = hoist_global_opts(sys.argv[1:] if argv is None else argv)
    try:
        # The files nova-manage reads when none is given
        # (/etc/nova/nova.conf, ...): oslo.config's defaults for Nova.
        cmd.refuse_special_files(cmd.config_files(
            args, project='nova', prog='nova-imgtype'))
        with cmd.config_file_errors():
            CONF(args, project='nova', prog='nova-imgtype',
                 version=cmd.version())
        if CONF.command.name == 'prepare-uninstall':
            return prepare_uninstall(CONF, CONF.command.apply,
                                     CONF.command.out_format)
        return check(CONF, CONF.command.out_format)
    except cfg.Error as e:
        print('ERROR: %s' % cmd.describe(e), file=sys.stderr)
        return 2
    finally:
        CONF.reset()
        CONF.unregister_opt(command_opt)


def run() -> None:
    """Console script entry point."""
    sys.exit(cmd.exit_quietly_on_closed_pipe(main))


if __name__ == '__main__':
    run()
