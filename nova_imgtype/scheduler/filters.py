"""What a stock nova-scheduler loads from nova-imgtype.

Nova has no entry point for request filters: it runs the plain list
``nova.scheduler.request_filter.ALL_REQUEST_FILTERS``. It does import, at
start, every name listed in ``[filter_scheduler]available_filters``, and
calls it when it is a function. So an operator adds, next to Nova's
default::

    [filter_scheduler]
    available_filters = nova.scheduler.filters.all_filters
    available_filters = nova_imgtype.scheduler.filters.all_filters

and :func:`all_filters` registers the request filters found in the stevedore
namespace ``nova_imgtype.scheduler.request_filters`` (each once, after Nova's
own) and returns nova-imgtype's host filters, which are only used if also
named in ``[filter_scheduler]enabled_filters``.
"""

from __future__ import annotations

from typing import Any

from nova import context as nova_context
from nova import exception as nova_exception
from nova.scheduler import filters
from nova.scheduler.client import report
from oslo_log import log as logging
from stevedore import extension

from nova_imgtype.scheduler import request_filters
from nova_imgtype.stock import request_filters as stock_request_filters

LOG = logging.getLogger(__name__)

NAMESPACE = 'nova_imgtype.scheduler.request_filters'

RequestFilter = stock_request_filters.RequestFilter


def request_filter_plugins() -> list[RequestFilter]:
    """The request filters registered in :data:`NAMESPACE`, by name."""
    def failed(_mgr: Any, ep: Any, err: BaseException) -> None:
        LOG.error('Could not load request filter %s: %s', ep.name, err)

    mgr: extension.ExtensionManager[Any] = extension.ExtensionManager(
        NAMESPACE, on_load_failure_callback=failed)
    return [mgr[name].plugin for name in sorted(mgr.names())]


def register_request_filters() -> list[RequestFilter]:
    """Append our request filters to Nova's list, each once
    (:mod:`nova_imgtype.stock.request_filters`)."""
    added = stock_request_filters.append(request_filter_plugins())
    if added:
        LOG.info('nova-imgtype request filters registered: %s',
                 ', '.join(f.__name__ for f in added))
    return added


class ImageTypeSupportFilter(filters.BaseHostFilter):
    """Host filter doing the request filter's job, host by host.

    Asks placement for each candidate's traits: slower than letting
    placement filter (the request filter), kept for deployments that cannot
    enable request filters and as the benchmark's baseline.
    """

    run_filter_once_per_request = False

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool:
        try:
            wanted = request_filters.required_traits(spec_obj)
        except nova_exception.RequestFilterFailed:
            return False
        if not wanted:
            return True
        have = report.report_client_singleton().get_provider_traits(
            nova_context.get_admin_context(), host_state.uuid).traits
        return wanted <= set(have)


def all_filters() -> list[type[filters.BaseHostFilter]]:
    """``[filter_scheduler]available_filters`` entry of nova-imgtype."""
    register_request_filters()
    return [ImageTypeSupportFilter]
