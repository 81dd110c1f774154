"""nova-imgtype's request filters in stock nova-scheduler's list.

Nova has no entry point for request filters: the scheduler runs the plain
module list ``nova.scheduler.request_filter.ALL_REQUEST_FILTERS``, in
order, before it asks placement. What it does load from configuration is
``[filter_scheduler]available_filters``, each name imported at start and
called when it is a function: nova-imgtype's ``all_filters`` is such a
function, and :func:`append` is what it does to stock's list.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
from typing import Any

from nova.scheduler import request_filter

from nova_imgtype.stock.facts import SourceFact

RequestFilter = Callable[[Any, Any], bool]

FACTS = (
    SourceFact(
        'nova.scheduler.request_filter:process_reqspec',
        (r'for filter in ALL_REQUEST_FILTERS:', r'filter\(ctxt, '
         r'request_spec\)'),
        'the scheduler runs the module list the plugin appends its '
        'request filters to, each with the request spec'),
    SourceFact(
        'nova.loadables:BaseLoader.get_matching_classes',
        (r'importutils\.import_class\(cls_name\)',
         r'elif inspect\.isfunction\(obj\):', r'for cls in obj\(\):'),
        'a function named in [filter_scheduler]available_filters is called '
        'when the scheduler starts: the plugin\'s all_filters, which '
        'appends the request filters'),
    SourceFact(
        'nova.scheduler.host_manager:HostManager.__init__',
        (r'get_matching_classes\(\s*'
         r'CONF\.filter_scheduler\.available_filters\)',),
        'nova-scheduler loads [filter_scheduler]available_filters at start'),
)


def append(filters: Iterable[RequestFilter]) -> list[RequestFilter]:
    """Append ``filters`` to stock's request filters, after Nova's own,
    each once; the ones appended now."""
    added = []
    for f in filters:
        if f not in request_filter.ALL_REQUEST_FILTERS:
            request_filter.ALL_REQUEST_FILTERS.append(f)
            added.append(f)
    return added
