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

from collections.abc import Iterable
from typing import Any

from keystoneauth1 import exceptions as ks_exc
from nova import context as nova_context
from nova import exception as nova_exception
from nova.scheduler import filters
from nova.scheduler.client import report
from oslo_log import log as logging
from stevedore import extension

from nova_imgtype import traits
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
    """Host filter doing the request filter's job, for deployments that
    cannot enable request filters.

    A host passes when it has every trait the image needs. A compute
    running nova-imgtype lists its image-type traits in its compute node's
    stats (:data:`nova_imgtype.traits.STATS_KEY`), which the scheduler
    gives each filter as ``HostState.stats``: the filter reads them there.
    For the hosts whose stats list none (a compute without nova-imgtype, or
    one from before it reported them), it asks placement, once per
    filtering pass, for the providers having those traits
    (``GET /resource_providers?required=``). The request filter does
    better still: placement leaves the other hosts out of its allocation
    candidates.

    A placement error fails closed for the hosts it was asked about: they
    do not pass, and the error is logged.
    """

    run_filter_once_per_request = False

    #: The placement microversion adding ``required`` to
    #: ``GET /resource_providers``.
    PLACEMENT_VERSION = '1.18'

    def filter_all(self, filter_obj_list: Iterable[Any],
                   spec_obj: Any) -> list[Any]:
        hosts = list(filter_obj_list)
        try:
            wanted = request_filters.required_traits(spec_obj)
        except nova_exception.RequestFilterFailed as err:
            LOG.info('ImageTypeSupportFilter: %s', err)
            return []
        if not wanted or not hosts:
            return hosts
        reported = [(host, traits.from_stats(host.stats))
                    for host in hosts]
        having = (self._providers_with(wanted)
                  if any(known is None for _host, known in reported)
                  else set())
        return [host for host, known in reported
                if (wanted <= known if known is not None
                    else host.uuid in having)]

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool:
        return bool(self.filter_all([host_state], spec_obj))

    def _providers_with(self, wanted: set[str]) -> set[str]:
        """UUIDs of the resource providers having every trait of
        ``wanted``; none when placement fails."""
        ctxt = nova_context.get_admin_context()
        required = ','.join(sorted(wanted))
        try:
            resp = report.report_client_singleton().get(
                '/resource_providers?required=%s' % required,
                version=self.PLACEMENT_VERSION,
                global_request_id=ctxt.global_id)
        except ks_exc.ClientException as err:
            failure = str(err)
        else:
            if resp.status_code == 200:
                return {rp['uuid']
                        for rp in resp.json()['resource_providers']}
            failure = '%s: %s' % (resp.status_code, resp.text)
        LOG.error('ImageTypeSupportFilter: placement could not list the '
                  'resource providers with %(traits)s (%(failure)s): no '
                  'host passes', {'traits': required, 'failure': failure})
        return set()


def all_filters() -> list[type[filters.BaseHostFilter]]:
    """``[filter_scheduler]available_filters`` entry of nova-imgtype."""
    register_request_filters()
    return [ImageTypeSupportFilter]
