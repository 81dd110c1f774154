"""Where nova-imgtype meets stock Nova's signatures, release to release.

The plugin overrides stock methods (the libvirt driver's, the image
backends', the image cache manager's) and must work on every Nova an
operator runs side by side during an upgrade: 33.x (2026.1) and 34.x
(2026.2). An override therefore never restates stock's parameters: it takes
``*args, **kwargs``, reads the few arguments it needs through
:func:`called`, and hands stock the arguments as they came (or with one of
them replaced, :meth:`StockCall.replaced`), so a keyword the next Nova adds
passes through untouched.

:data:`READS` lists, per stock method, the parameters the plugin reads or
replaces: the list of what a new Nova release must be checked for
(``tests/unit/test_stock_signatures.py`` checks it against the installed
Nova). :func:`called` refuses a name that is not listed, so the list cannot
fall behind the code.

Differences between releases that matter to the plugin, and why:

* Nova 34 added ``share_info`` (virtiofs shares) to ``finish_migration``
  and ``finish_revert_migration`` (33 has it in ``_hard_reboot`` and
  ``_get_guest_config`` already). The plugin neither reads nor sets it;
  forwarding is all it needs. No other method the plugin overrides differs
  between 33.0.2 and 34.0.0.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any

_DRIVER = 'nova.virt.libvirt.driver:LibvirtDriver.'
_IMAGE = 'nova.virt.libvirt.imagebackend:Image.'
_IMAGEBACKEND = 'nova.virt.libvirt.imagebackend:'
_BACKEND = _IMAGEBACKEND + 'Backend.'
_CACHE = 'nova.virt.libvirt.imagecache:ImageCacheManager.'

#: ``module:Class.method`` -> the parameters the plugin reads or replaces.
READS: Mapping[str, tuple[str, ...]] = {
    # -- LibvirtDriver --------------------------------------------------------
    _DRIVER + 'init_host': ('host',),
    _DRIVER + 'prepare_for_spawn': ('instance',),
    _DRIVER + 'spawn': ('instance', 'image_meta', 'block_device_info'),
    _DRIVER + 'rebuild': ('context', 'instance', 'image_meta',
                          'block_device_info', 'evacuate'),
    _DRIVER + '_cleanup': ('instance', 'block_device_info',
                           'cleanup_instance_dir', 'cleanup_instance_disks'),
    _DRIVER + '_cleanup_resize': ('instance',),
    _DRIVER + 'delete_instance_files': ('instance',),
    _DRIVER + 'instance_on_disk': ('instance',),
    _DRIVER + 'check_instance_shared_storage_local': ('instance',),
    _DRIVER + 'update_provider_tree': ('provider_tree', 'nodename'),
    _DRIVER + 'migrate_disk_and_power_off': ('context', 'instance', 'dest',
                                             'block_device_info', 'timeout',
                                             'retry_interval'),
    _DRIVER + 'finish_migration': ('context', 'migration', 'instance',
                                   'disk_info', 'block_device_info'),
    _DRIVER + 'finish_revert_migration': ('instance',),
    _DRIVER + '_hard_reboot': ('instance', 'block_device_info'),
    _DRIVER + '_create_configdrive': ('instance', 'rescue'),
    _DRIVER + 'unrescue': ('instance',),
    _DRIVER + '_get_guest_config': ('instance',),
    _DRIVER + 'snapshot': ('context', 'instance', 'image_id',
                           'update_task_state'),
    _DRIVER + '_get_guest_xml': ('instance',),
    _DRIVER + '_try_fetch_image_cache': ('image', 'fetch_func', 'context',
                                         'filename', 'image_id', 'instance'),
    _DRIVER + 'cache_image': ('context', 'image_id'),
    _DRIVER + '_rebase_original_qcow2_image': ('context', 'instance',
                                               'backend'),
    _DRIVER + '_get_instance_disk_info': ('instance',),
    _DRIVER + 'check_can_live_migrate_destination': ('instance',),
    _DRIVER + 'check_can_live_migrate_source': ('context', 'instance'),
    _DRIVER + '_is_shared_block_storage': ('instance', 'dest_check_data'),
    _DRIVER + 'get_instance_disk_info': ('instance',),
    _DRIVER + '_live_migration_copy_disk_paths': ('instance', 'guest'),
    _DRIVER + 'pre_live_migration': ('instance', 'disk_info',
                                     'migrate_data'),
    _DRIVER + '_live_migration_operation': ('context', 'instance', 'dest',
                                            'migrate_data', 'guest'),
    _DRIVER + 'rollback_live_migration_at_destination': ('context',
                                                         'instance'),
    _DRIVER + 'post_live_migration_at_destination': ('context',
                                                     'instance',
                                                     'block_migration'),
    # -- image backends (imagebackend.Backend, Image subclasses) --------------
    _BACKEND + 'backend': ('image_type',),
    _BACKEND + 'by_name': ('instance', 'name', 'image_type',
                           'disk_info_mapping'),
    _BACKEND + 'by_libvirt_path': ('instance', 'path', 'image_type'),
    # ``args``, ``kwargs``: stock's own ``*args, **kwargs``, which it passes
    # on to the fetch function (``prepare_template``).
    _IMAGEBACKEND + 'Flat.create_image': ('prepare_template', 'base',
                                          'size', 'args', 'kwargs'),
    _IMAGEBACKEND + 'Qcow2.create_image': ('prepare_template', 'base',
                                           'size', 'safe', 'args',
                                           'kwargs'),
    _IMAGE + 'get_disk_size': ('name',),
    _IMAGE + 'import_file': ('local_file',),
    _IMAGE + 'resize_image': ('size',),
    # -- the image cache manager ----------------------------------------------
    _CACHE + '_store_image': ('base_dir', 'ent', 'original'),
    _CACHE + '_remove_base_file': ('base_file',),
}


class StockCall:
    """The arguments of one call of a stock method, as the caller gave them.

    ``call['instance']`` is an argument by its name in stock's signature,
    whether it was passed by position or keyword, or its default.
    """

    def __init__(self, qualname: str, signature: inspect.Signature,
                 owner: Any, args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> None:
        self._qualname = qualname
        self._signature = signature
        self.args = args
        self.kwargs = kwargs
        bound = signature.bind(owner, *args, **kwargs)
        bound.apply_defaults()
        self._arguments = bound.arguments

    def _listed(self, name: str) -> None:
        if name not in READS.get(self._qualname, ()):
            raise KeyError('%s: parameter %r is not listed in '
                           'nova_imgtype.compat.READS' % (self._qualname,
                                                          name))

    def __getitem__(self, name: str) -> Any:
        self._listed(name)
        return self._arguments[name]

    def replaced(self, **changes: Any) -> tuple[tuple[Any, ...],
                                                dict[str, Any]]:
        """``(args, kwargs)`` for stock, with ``changes`` made where the
        caller put each argument (by position or keyword; a keyword if it
        did not pass it)."""
        args = list(self.args)
        kwargs = dict(self.kwargs)
        # Positions after ``self``.
        names = list(self._signature.parameters)[1:]
        for name, value in changes.items():
            self._listed(name)
            index = names.index(name)
            if name not in kwargs and index < len(args):
                args[index] = value
            else:
                kwargs[name] = value
        return tuple(args), kwargs


def _signature(qualname: str) -> inspect.Signature:
    """Stock's signature of ``qualname``, as read when this module was
    imported: before anything (a test's mock) could stand in for it."""
    try:
        return _SIGNATURES[qualname]
    except KeyError:
        raise KeyError('%s is not listed in nova_imgtype.compat.READS'
                       % qualname) from None


def resolve(qualname: str) -> Callable[..., Any]:
    """The stock attribute named ``module:Class.attr``."""
    import importlib

    module_name, _, path = qualname.partition(':')
    obj: Any = importlib.import_module(module_name)
    for part in path.split('.'):
        obj = inspect.getattr_static(obj, part)
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    return obj


def called(qualname: str, owner: Any, args: tuple[Any, ...],
           kwargs: dict[str, Any]) -> StockCall:
    """The arguments of a call of the stock method ``qualname``
    (``module:Class.method``) on ``owner``, as given to an override."""
    return StockCall(qualname, _signature(qualname), owner, args, kwargs)


def driver(method: str, owner: Any, args: tuple[Any, ...],
           kwargs: dict[str, Any]) -> StockCall:
    """:func:`called` for a method of stock's ``LibvirtDriver``."""
    return called(_DRIVER + method, owner, args, kwargs)


_SIGNATURES: dict[str, inspect.Signature] = {
    qualname: inspect.signature(resolve(qualname)) for qualname in READS}
