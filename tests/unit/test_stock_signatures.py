"""Every stock method nova-imgtype overrides, and the parameters it reads.

What a new Nova release must be checked for, kept by the code itself:

* each override of a stock method (a method of one of our subclasses of a
  Nova class that Nova's class also has) forwards its arguments as they
  came, ``(self, *args, **kwargs)``, so a keyword a release adds passes
  through; the exceptions are in :data:`OWN_SIGNATURE`, with why;
* each parameter the plugin reads or replaces (``nova_imgtype.compat.READS``)
  is still in the installed Nova's signature of that method;
* the check fails naming the method and the parameter when it is not
  (shown with a patched stock class).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

import pytest

import nova_imgtype
from nova_imgtype import compat

#: Overrides that keep parameters of their own on purpose, and why:
#: ``Class.`` (every method of the class) or ``Class.method``.
OWN_SIGNATURE: dict[str, str] = {
    'LibvirtStorage.': 'the storage pool backend implements the Image '
                       'interface on its own (it calls stock for nothing '
                       'but helpers): its parameters are the interface\'s',
    'RbdStorage.': 'as LibvirtStorage, of which it is the rbd subclass',
    'ImgtypeException.__init__': 'our exceptions\' own message template',
    'LibvirtConfigGuestVolumeDisk.': 'a libvirt config object of our own',
    'ImageTypeSupportFilter.host_passes': 'a scheduler filter implements '
                                          'the filter interface',
    'ImageTypeSupportFilter.filter_all': 'a scheduler filter implements '
                                         'the filter interface',
    'Backend.__init__': 'built by our driver, with arguments of its own',
    'ImageCacheManager.__init__': 'built by our driver, with arguments of '
                                  'its own (stock\'s takes none)',
}


def _own_signature(name: str) -> bool:
    return name in OWN_SIGNATURE or name.split('.')[0] + '.' in OWN_SIGNATURE


def _our_classes() -> list[type]:
    found = []
    for info in pkgutil.walk_packages(nova_imgtype.__path__,
                                      nova_imgtype.__name__ + '.'):
        if '.testing' in info.name or '.tempest' in info.name:
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if (inspect.isclass(obj) and obj.__module__ == module.__name__
                    and any(b.__module__.startswith('nova.')
                            for b in obj.__mro__[1:])):
                found.append(obj)
    return found


def _overrides() -> list[tuple[str, Any, Any, str]]:
    """``(name, our function, stock attribute, stock qualname)`` of every
    override; the qualname as ``compat.READS`` spells it."""
    result = {}
    classes = _our_classes()
    for cls in classes:
        stock = [b for b in cls.__mro__[1:] if b.__module__.startswith(
            'nova.')]
        # The class's own methods and those of our mixins it takes
        # (sizes.InProcessSizes), which override stock's through it.
        mine = [b for b in cls.__mro__ if b.__module__.startswith(
            'nova_imgtype.') and (b is cls or b not in classes)]
        for owner in mine:
            for name, ours in vars(owner).items():
                if not inspect.isfunction(ours) or name.startswith('__') \
                        and name != '__init__':
                    continue
                for base in stock:
                    if name in vars(base):
                        key = '%s.%s' % (owner.__qualname__, name)
                        result.setdefault((key, id(base)), (
                            key, ours, vars(base)[name], '%s:%s.%s' % (
                                base.__module__, base.__qualname__, name)))
                        break
    return list(result.values())


def missing_reads(reads: dict[str, tuple[str, ...]]) -> list[str]:
    """What the installed Nova lacks of ``reads``, one line each."""
    problems = []
    for qualname, names in sorted(reads.items()):
        try:
            stock = compat.resolve(qualname)
        except (ImportError, AttributeError) as e:
            problems.append('%s: not in the installed Nova (%s)'
                            % (qualname, e))
            continue
        params = inspect.signature(stock).parameters
        for name in names:
            if name not in params:
                problems.append('%s: no parameter %r, which nova-imgtype '
                                'reads' % (qualname, name))
    return problems


def test_overrides_are_found() -> None:
    names = {o[0] for o in _overrides()}
    assert 'LibvirtDriver.finish_migration' in names
    assert len(names) > 20


@pytest.mark.parametrize('name,ours,stock,qualname', _overrides(),
                         ids=[o[0] for o in _overrides()])
def test_override_forwards_arguments(name: str, ours: Any, stock: Any,
                                     qualname: str) -> None:
    if _own_signature(name):
        return
    params = list(inspect.signature(ours).parameters.values())
    kinds = [p.kind for p in params[1:]]
    assert kinds == [inspect.Parameter.VAR_POSITIONAL,
                     inspect.Parameter.VAR_KEYWORD], (
        '%s restates stock parameters (%s): take (self, *args, **kwargs) '
        'and read them with nova_imgtype.compat' % (
            name, ', '.join(p.name for p in params[1:])))


def test_reads_are_in_the_installed_nova() -> None:
    assert missing_reads(dict(compat.READS)) == []


def test_every_read_is_of_an_overridden_method() -> None:
    # By identity: LibvirtDriver.rebuild is ComputeDriver's, inherited.
    overridden = {id(o[2]) for o in _overrides()}
    assert sorted(q for q in compat.READS
                  if id(inspect.getattr_static(*_split(q))) not in
                  overridden) == []


def _split(qualname: str) -> tuple[Any, str]:
    owner, _, attr = qualname.rpartition('.')
    return compat.resolve(owner), attr


def test_a_lost_parameter_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from nova.virt.libvirt import driver as stock_driver

    def finish_migration(self: Any, context: Any, migration: Any,
                         instance: Any, network_info: Any,
                         image_meta: Any, resize_instance: Any,
                         allocations: Any, block_device_info: Any = None,
                         power_on: bool = True) -> None:
        """A Nova whose finish_migration lost ``disk_info``."""

    monkeypatch.setattr(stock_driver.LibvirtDriver, 'finish_migration',
                        finish_migration)
    assert missing_reads(dict(compat.READS)) == [
        "nova.virt.libvirt.driver:LibvirtDriver.finish_migration: no "
        "parameter 'disk_info', which nova-imgtype reads"]


def test_an_unlisted_read_is_refused() -> None:
    call = compat.driver('finish_migration', object(),
                         tuple(range(8)), {'power_on': False})
    assert call['instance'] == 2
    with pytest.raises(KeyError, match="'power_on' is not listed"):
        call['power_on']


def test_replaced_keeps_how_arguments_came() -> None:
    call = compat.driver('finish_migration', object(), tuple(range(8)),
                         {'block_device_info': 'bdi', 'power_on': False})
    args, kwargs = call.replaced(disk_info='new',
                                 block_device_info='new-bdi')
    assert args == (0, 1, 2, 'new', 4, 5, 6, 7)
    assert kwargs == {'block_device_info': 'new-bdi', 'power_on': False}
