"""Template image handlers: how the image cache gets its templates.

One module per handler, each a
:class:`~.base.BaseTemplateImageHandler`, registered in the stevedore
namespace ``nova_imgtype.template_image_handlers`` and chosen by
``[image_cache]template_image_handler``.
"""

from __future__ import annotations

from typing import cast

from stevedore import driver
from stevedore import extension

from nova_imgtype import exception
from nova_imgtype.virt.libvirt.template_handlers import base

NAMESPACE = 'nova_imgtype.template_image_handlers'


def names() -> list[str]:
    """The registered handler names."""
    return sorted(extension.ExtensionManager(NAMESPACE).names())


def load(name: str) -> base.BaseTemplateImageHandler:
    """A new instance of the handler registered as ``name``.

    :raises UnknownTemplateImageHandler: naming it and the registered ones.
    """
    try:
        mgr: driver.DriverManager[base.BaseTemplateImageHandler] = (
            driver.DriverManager(NAMESPACE, name, invoke_on_load=True))
    except Exception as e:
        raise exception.UnknownTemplateImageHandler(
            name=name, known=', '.join(names()) or '-') from e
    return cast(base.BaseTemplateImageHandler, mgr.driver)
