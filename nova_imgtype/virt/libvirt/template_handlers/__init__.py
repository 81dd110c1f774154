"""Template image handlers: how the image cache gets its templates.

One module per handler, each a
:class:`~.base.BaseTemplateImageHandler`, registered in the stevedore
namespace ``nova_imgtype.template_image_handlers`` and chosen by
``[image_cache]template_image_handler``.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any
from typing import cast

from stevedore import driver

from nova_imgtype import exception
from nova_imgtype.virt.libvirt.template_handlers import base

NAMESPACE = 'nova_imgtype.template_image_handlers'


def _reraise(manager: Any, entrypoint: Any, error: BaseException) -> None:
    """stevedore logs a failed load and goes on; the reason is wanted."""
    raise error


def names() -> list[str]:
    """The registered handler names (read from the entry points; none is
    imported)."""
    return sorted({ep.name for ep in metadata.entry_points(group=NAMESPACE)})


def load(name: str) -> base.BaseTemplateImageHandler:
    """A new instance of the handler registered as ``name``.

    :raises UnknownTemplateImageHandler: naming it and the registered ones.
    :raises TemplateImageHandlerLoadFailed: a registered handler that
        cannot be imported or made, with the reason.
    """
    known = names()
    if name not in known:
        raise exception.UnknownTemplateImageHandler(
            name=name, known=', '.join(known) or '-')
    try:
        mgr: driver.DriverManager[base.BaseTemplateImageHandler] = (
            driver.DriverManager(NAMESPACE, name, invoke_on_load=True,
                                 on_load_failure_callback=_reraise))
    except Exception as e:
        raise exception.TemplateImageHandlerLoadFailed(
            name=name, reason='%s: %s' % (type(e).__name__, e)) from e
    return cast(base.BaseTemplateImageHandler, mgr.driver)
