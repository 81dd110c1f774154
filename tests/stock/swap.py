"""Stock Nova's test runner with ``imgtype.LibvirtDriver`` in stock's place.

stestr starts its workers as ``${PYTHON} -m stestr.subunit_runner.run
discover -t <top> <test path> ...``; with ``PYTHON='<python> -m
tests.stock.swap'`` each worker comes here first. Here Nova's test package
of the suite (``nova.tests.unit`` or ``nova.tests.functional``) sets itself
up first (concurrency mode, objects registered), as it does under stestr
alone; then, before any test module is imported (their decorators take
``libvirt_driver.LibvirtDriver`` at import), our class replaces stock's
where stock's tests and ``compute_driver = libvirt.LibvirtDriver`` find it,
in the configuration ``NOVA_IMGTYPE_STOCK_MODE`` names:

``stock``
    nothing of ours: the suite as shipped.
``plain``
    our driver, nothing configured that differs from stock: no
    ``images_type_mapping``, ``[libvirt]use_storage_pools = False``.
``defaults``
    our driver with our options at their defaults (storage pools on).

Stock's class stays reachable as :data:`STOCK_CLASS_ATTRIBUTE` on the
module; ours subclasses it.
"""

from __future__ import annotations

import copy
import importlib
import os
import runpy
import sys

MODES = ('stock', 'plain', 'defaults')
MODE_VARIABLE = 'NOVA_IMGTYPE_STOCK_MODE'
STOCK_CLASS_ATTRIBUTE = 'StockLibvirtDriver'
RUNNER = 'stestr.subunit_runner.run'


def suite_package(argv: list[str]) -> str:
    """The test package of a ``discover -t <top> <path>`` command line:
    the first three components (``nova.tests.unit``)."""
    top = argv[argv.index('-t') + 1]
    path = argv[argv.index('-t') + 2]
    parts = os.path.relpath(path, top).split(os.sep)
    return '.'.join(parts[:3])


def install(mode: str) -> None:
    """Put our driver in stock's place for ``mode`` (nothing for
    ``stock``)."""
    if mode not in MODES:
        raise SystemExit(f'{MODE_VARIABLE}={mode!r}: one of {MODES}')
    if mode == 'stock':
        return
    from nova.virt import libvirt as libvirt_package
    from nova.virt.libvirt import driver as stock_module

    import nova_imgtype.conf
    from nova_imgtype.conf import libvirt as options
    from nova_imgtype.virt.libvirt import driver as ours

    if mode == 'plain':
        # The option's own default: each test's config fixture resets
        # whatever set_default() changed.
        conf = nova_imgtype.conf.CONF
        opt = copy.copy(options.use_storage_pools_opt)
        opt.default = False
        conf.unregister_opt(options.use_storage_pools_opt, group='libvirt')
        conf.register_opt(opt, group='libvirt')
    stock = stock_module.LibvirtDriver
    keep_descriptors(stock, ours.LibvirtDriver)
    setattr(stock_module, STOCK_CLASS_ATTRIBUTE, stock)
    stock_module.LibvirtDriver = ours.LibvirtDriver
    # compute_driver = libvirt.LibvirtDriver (the functional suites).
    libvirt_package.LibvirtDriver = ours.LibvirtDriver


def keep_descriptors(stock: type, subclass: type) -> None:
    """Stock's static and class methods, put in the subclass as they are.

    ``fixtures.MonkeyPatch`` (stock's ``LibvirtImageBackendFixture``)
    puts back a patched method where it patched it: on our class, for one
    it inherits, as what ``getattr`` gave (a staticmethod unwrapped into a
    plain function), so every later test of the process calls it bound
    (``got multiple values for argument``). In the class's own dict the
    fixture finds, and restores, the descriptor itself.
    """
    for name, value in vars(stock).items():
        if (isinstance(value, (staticmethod, classmethod)) and
                name not in vars(subclass)):
            setattr(subclass, name, value)


def main() -> None:
    argv = sys.argv[1:]
    if argv[:2] != ['-m', RUNNER]:
        raise SystemExit(f'usage: PYTHON="<python> -m tests.stock.swap" '
                         f'stestr ...; got {argv}')
    argv = argv[2:]
    importlib.import_module(suite_package(argv))
    install(os.environ.get(MODE_VARIABLE, 'stock'))
    sys.argv = [RUNNER, *argv]
    runpy.run_module(RUNNER, run_name='__main__', alter_sys=True)


if __name__ == '__main__':
    main()
