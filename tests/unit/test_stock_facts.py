"""Every hook of nova_imgtype.stock holds on the installed Nova.

Each adapter names what it relies on in stock's source (its ``FACTS``):
a Nova release that moves or drops one of those steps fails here, naming
the stock method, the step and what of the plugin depends on it.
"""

import importlib
import pkgutil

import pytest

from nova_imgtype import exception
from nova_imgtype import stock
from nova_imgtype.stock import facts

#: Modules of the package that are not hooks.
NOT_HOOKS = {'facts'}


def _hooks():
    return [importlib.import_module('nova_imgtype.stock.' + m.name)
            for m in pkgutil.iter_modules(stock.__path__)
            if m.name not in NOT_HOOKS]


def _facts():
    return [(hook.__name__, fact) for hook in _hooks()
            for fact in hook.FACTS]


def test_every_hook_names_what_it_relies_on():
    hooks = _hooks()
    assert hooks
    for hook in hooks:
        assert hook.__doc__, hook.__name__
        assert hook.FACTS, '%s relies on nothing of stock?' % hook.__name__
        assert all(isinstance(f, facts.SourceFact) for f in hook.FACTS)


@pytest.mark.parametrize('hook,fact', _facts(),
                         ids=lambda v: v if isinstance(v, str) else
                         v.where.split(':')[1])
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
