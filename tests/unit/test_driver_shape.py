"""The driver is stock's driver and thin overrides: one class, whose only
base is stock's; every other object of the plugin that works for it is a
collaborator, no subclass of stock's driver."""

import importlib
import inspect
import pkgutil

from nova.virt.libvirt import driver as stock_driver

import nova_imgtype
from nova_imgtype.virt.libvirt import driver as imgtype_driver


def test_the_drivers_only_base_is_stocks():
    assert imgtype_driver.LibvirtDriver.__bases__ == (
        stock_driver.LibvirtDriver,)


def test_no_other_module_subclasses_stocks_driver():
    found = set()
    for info in pkgutil.walk_packages(nova_imgtype.__path__,
                                      'nova_imgtype.'):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (inspect.isclass(obj) and obj.__module__ == info.name and
                    issubclass(obj, stock_driver.LibvirtDriver)):
                found.add('%s.%s' % (info.name, name))
    assert found == {'nova_imgtype.virt.libvirt.driver.LibvirtDriver'}


def test_no_public_method_that_computedriver_lacks():
    # Stock's test_public_api_signatures: the compute manager calls a
    # driver through ComputeDriver's API only; stock's driver adds none.
    from nova.virt import driver as virt_driver
    ours = {name for name in vars(imgtype_driver.LibvirtDriver)
            if not name.startswith('_') and
            callable(getattr(imgtype_driver.LibvirtDriver, name))}
    assert ours - set(dir(virt_driver.ComputeDriver)) == set()
