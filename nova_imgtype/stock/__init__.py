"""Every way nova-imgtype steers stock Nova's code, one adapter each.

The plugin changes what stock's own methods do without copying them: it
hands stock a guest whose ``migrate`` rewrites the destination XML, a disk
config that writes ``<disk type='volume'>``, a remote filesystem for the
length of a cold move, and so on. Each such hook is a module here, and
each relies on facts about stock's source (that stock calls a step, and
in what order) that no signature shows: a module names them in its
``FACTS`` (:class:`~nova_imgtype.stock.facts.SourceFact`), and
``tests/unit/test_stock_facts.py`` checks every one against the installed
Nova, so that a Nova release that moves a step fails a test instead of
misbehaving in a cloud.

What the plugin reads of stock's signatures is listed in
:mod:`nova_imgtype.compat`; the private stock names it touches in
``tests/unit/test_stock_private_names.py``. :mod:`.driver_steps` is no
hook: it is where the driver's collaborators call stock's private steps.
"""

from __future__ import annotations

import importlib
from typing import Any

#: The hooks, one module each.
HOOKS = ('after_power_off', 'assumed_decision', 'backend_scope',
         'config_drive_link', 'copies', 'disk_info_file', 'migration_xml',
         'remote_filesystem', 'request_filters', 'volume_disk',
         'withheld_disks')


def all_facts() -> list[tuple[str, Any]]:
    """``(hook, fact)`` for every fact every hook relies on."""
    out = []
    for name in HOOKS:
        hook = importlib.import_module('%s.%s' % (__name__, name))
        out += [(name, fact) for fact in hook.FACTS]
    return out


def broken() -> list[str]:
    """What the installed Nova no longer does that a hook relies on: one
    message per broken fact, naming the hook."""
    from nova_imgtype import exception  # noqa: PLC0415 - no cycle at import

    out = []
    for name, fact in all_facts():
        try:
            fact.check()
        except exception.StockFactBroken as e:
            out.append('%s: %s' % (name, e))
    return out
