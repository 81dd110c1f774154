"""Every hook of nova_imgtype.stock holds on the installed Nova.

Each adapter names what it relies on in stock's source (its ``FACTS``):
a Nova release that moves or drops one of those steps fails here, naming
the stock method, the step and what of the plugin depends on it.
"""

import importlib
import pathlib
import pkgutil
import threading
from unittest import mock

import pytest

from nova_imgtype import exception
from nova_imgtype import stock
from nova_imgtype.stock import after_power_off
from nova_imgtype.stock import copies
from nova_imgtype.stock import facts
from nova_imgtype.stock import remote_filesystem
from tests.unit.test_driver import STOCK
from tests.unit.test_driver import _instance
from tests.unit.test_driver import make_driver  # noqa: F401 - fixture

#: Modules of the package that are not hooks.
#: The facts' own machinery, and stock's private steps the collaborators
#: call (listed by test_stock_private_names, not hooks).
NOT_HOOKS = {'facts', 'thread_value', 'driver_steps'}


def _hooks():
    return [importlib.import_module('nova_imgtype.stock.' + name)
            for name in stock.HOOKS]


def _facts():
    return stock.all_facts()


def test_every_module_of_the_package_is_a_listed_hook():
    modules = {m.name for m in pkgutil.iter_modules(stock.__path__)}
    assert modules - NOT_HOOKS == set(stock.HOOKS)


def test_every_hook_names_what_it_relies_on():
    hooks = _hooks()
    assert hooks
    for hook in hooks:
        assert hook.__doc__, hook.__name__
        assert hook.FACTS, '%s relies on nothing of stock?' % hook.__name__
        assert all(isinstance(f, (facts.SourceFact, facts.CallSites,
                                  facts.CopiedSource))
                   for f in hook.FACTS)


@pytest.mark.parametrize('hook,fact', _facts(),
                         ids=lambda v: v.rpartition('.')[2]
                         if isinstance(v, str) else getattr(
                             v, 'where', getattr(v, 'pattern', '')))
def test_the_installed_nova_does_what_the_hook_relies_on(hook, fact):
    fact.check()


def test_a_step_stock_no_longer_takes_is_named():
    fact = facts.SourceFact(
        'nova.scheduler.request_filter:process_reqspec',
        (r'for filter in ALL_REQUEST_FILTERS:', r'filter\(ctxt, '
         r'request_spec, something_new\)'),
        'the scheduler runs our filters')
    with pytest.raises(exception.StockFactBroken) as e:
        fact.check()
    message = str(e.value)
    assert 'process_reqspec' in message
    assert 'something_new' in message
    assert 'the scheduler runs our filters' in message


def test_steps_are_in_order():
    # Both steps exist, but not in this order.
    fact = facts.SourceFact(
        'nova.scheduler.request_filter:process_reqspec',
        (r'filter\(ctxt, request_spec\)', r'for filter in '
         r'ALL_REQUEST_FILTERS:'), 'order')
    with pytest.raises(exception.StockFactBroken, match='ALL_REQUEST'):
        fact.check()


def test_a_step_stock_takes_that_it_must_not_is_named():
    fact = facts.SourceFact(
        'nova.scheduler.request_filter:process_reqspec',
        (r'for filter',), 'absent', absent=(r'ALL_REQUEST_FILTERS',))
    with pytest.raises(exception.StockFactBroken,
                       match='no ALL_REQUEST_FILTERS'):
        fact.check()


def test_a_stock_method_that_is_gone_is_named():
    fact = facts.SourceFact(
        'nova.scheduler.request_filter:no_such_function', ('x',), 'gone')
    with pytest.raises(exception.StockFactBroken,
                       match='no_such_function'):
        fact.check()


def test_stock_hooks_are_only_in_the_stock_package():
    """A thread-local switch of what stock does (a context variable) is a
    hook: it lives in nova_imgtype/stock/, with the facts it relies on.
    (``testing/`` is the test harness.)"""
    root = pathlib.Path(stock.__file__).parent.parent
    outside = [str(p.relative_to(root)) for p in root.rglob('*.py')
               if 'contextvars.ContextVar(' in p.read_text()
               and p.parent.name not in ('stock', 'testing')]
    assert outside == []


def test_the_drivers_power_off_runs_the_armed_step_after_stocks(
        make_driver):  # noqa: F811
    drv = make_driver()
    order = []
    with mock.patch.object(STOCK, 'power_off',
                           lambda self, *a, **k: order.append('stock')):
        with after_power_off.armed(lambda: order.append('step')):
            drv.power_off(_instance())
            # Once: a second power off in the same move runs nothing.
            drv.power_off(_instance())
        drv.power_off(_instance())
    assert order == ['stock', 'step', 'stock', 'stock']


def test_stocks_remote_filesystem_is_the_moves_in_its_thread_only(
        make_driver):  # noqa: F811
    drv = make_driver()
    stocks = drv._remotefs
    remote = object()
    seen = []
    with remote_filesystem.using(remote):
        thread = threading.Thread(target=lambda: seen.append(drv._remotefs))
        thread.start()
        thread.join()
        assert drv._remotefs is remote
    assert seen == [stocks]
    assert drv._remotefs is stocks
    # Stock's __init__ sets it: a new value is stock's, not the move's.
    drv._remotefs = 'other'
    assert drv._remotefs == 'other'


def test_a_new_call_site_in_stock_is_named():
    fact = facts.CallSites(
        'nova.scheduler.request_filter', r'ALL_REQUEST_FILTERS',
        frozenset({'nova_imgtype_was_here'}), 'call sites')
    with pytest.raises(exception.StockFactBroken) as e:
        fact.check()
    assert 'new: process_reqspec' in str(e.value)
    assert 'gone: nova_imgtype_was_here' in str(e.value)


def test_nothing_is_broken_on_the_installed_nova():
    assert stock.broken() == []


def test_a_broken_fact_is_reported_by_its_hook(monkeypatch):
    from nova_imgtype.stock import request_filters
    monkeypatch.setattr(request_filters, 'FACTS', (facts.SourceFact(
        'nova.scheduler.request_filter:process_reqspec', ('not there',),
        'why'),))
    assert stock.broken() == [
        "request_filters: Stock Nova's nova.scheduler.request_filter:"
        "process_reqspec no longer matches 'not there', in order: why"]


@pytest.mark.parametrize('fact', copies.FACTS, ids=lambda f: f.copy)
def test_each_copy_of_a_stock_step_names_a_plugin_function(fact):
    module, _, path = fact.copy.partition(':')
    obj = importlib.import_module(module)
    for part in path.split('.'):
        obj = getattr(obj, part)
    assert callable(obj)


def test_a_changed_stock_source_fails_its_copy():
    """Stock's source changed (here: one of another function), the copy
    is named for review."""
    fact = copies.FACTS[0]
    changed = facts.CopiedSource(fact.where, frozenset({'0' * 64}),
                                 fact.copy, fact.why)
    with pytest.raises(exception.StockFactBroken, match=fact.copy):
        changed.check()
    fact.check()
