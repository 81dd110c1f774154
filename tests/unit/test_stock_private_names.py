"""Every private name of stock Nova that nova-imgtype touches, listed.

Private names change without notice between Nova releases. This list is
the place to look when a new Nova comes: each entry must still exist in the
installed Nova, and the code may touch no private stock name that is not
listed here (found by reading our sources: methods of our subclasses of
Nova's classes that override or call a private stock attribute, and
``<nova module>._name`` references).
"""

import ast
import importlib
import inspect
import pathlib

import pytest

import nova_imgtype
import nova_imgtype_testing

#: ``module:Class.attr`` or ``module:attr``.
STOCK_PRIVATE = {
    # The driver: where it hooks stock's flows.
    'nova.virt.libvirt.driver:LibvirtDriver._cleanup',
    'nova.virt.libvirt.driver:LibvirtDriver._cleanup_lvm',
    'nova.virt.libvirt.driver:LibvirtDriver._cleanup_rbd',
    'nova.virt.libvirt.driver:LibvirtDriver._cleanup_remote_migration',
    'nova.virt.libvirt.driver:LibvirtDriver._cleanup_resize',
    'nova.virt.libvirt.driver:LibvirtDriver._create_configdrive',
    'nova.virt.libvirt.driver:LibvirtDriver._create_snapshot_metadata',
    'nova.virt.libvirt.driver:LibvirtDriver._destroy',
    'nova.virt.libvirt.driver:LibvirtDriver._get_guest_config',
    'nova.virt.libvirt.driver:LibvirtDriver._get_guest_xml',
    'nova.virt.libvirt.driver:LibvirtDriver._get_instance_disk_info',
    'nova.virt.libvirt.driver:LibvirtDriver._hard_reboot',
    'nova.virt.libvirt.driver:LibvirtDriver._host',
    'nova.virt.libvirt.driver:LibvirtDriver._image_api',
    'nova.virt.libvirt.driver:LibvirtDriver._is_booted_from_volume',
    'nova.virt.libvirt.driver:LibvirtDriver._is_path_shared_with',
    'nova.virt.libvirt.driver:LibvirtDriver._is_shared_block_storage',
    'nova.virt.libvirt.driver:LibvirtDriver._live_migration_copy_disk_paths',
    'nova.virt.libvirt.driver:LibvirtDriver._live_migration_operation',
    'nova.virt.libvirt.driver:LibvirtDriver._live_migration_uri',
    'nova.virt.libvirt.driver:LibvirtDriver._needs_rebase_original_qcow2_image',
    'nova.virt.libvirt.driver:LibvirtDriver._rebase_original_qcow2_image',
    'nova.virt.libvirt.driver:LibvirtDriver._rebase_with_qemu_img',
    'nova.virt.libvirt.driver:LibvirtDriver._remotefs',
    'nova.virt.libvirt.driver:LibvirtDriver._resume_guest_after_snapshot',
    'nova.virt.libvirt.driver:LibvirtDriver._suspend_guest_for_snapshot',
    'nova.virt.libvirt.driver:LibvirtDriver._try_fetch_image_cache',
    # LibvirtStorage's volume format; Flat's disk format (read in process)
    # and its lock around a template copy.
    'nova.virt.libvirt.imagebackend:Image._get_driver_format',
    'nova.virt.libvirt.imagebackend:Flat._get_driver_format',
    'nova.virt.libvirt.imagebackend:Image._get_lock_name',
    'nova.virt.libvirt.imagebackend:Rbd._get_parent_pool',
    # The image cache manager.
    'nova.virt.libvirt.imagecache:ImageCacheManager._get_age_of_file',
    'nova.virt.libvirt.imagecache:ImageCacheManager._list_backing_images',
    'nova.virt.libvirt.imagecache:ImageCacheManager._remove_base_file',
    'nova.virt.libvirt.imagecache:ImageCacheManager._store_image',
    # Image backends.
    'nova.virt.libvirt.imagebackend:_update_utime_ignore_eacces',
    # Cinder: an attachment as stock's API returns it.
    'nova.volume.cinder:_translate_attachment_ref',
    # Tools for the demo and tests (not run by a compute node): Nova's
    # functional harness.
    'nova.tests.functional.integrated_helpers:InstanceHelperMixin.'
    '_create_server',
    'nova.tests.functional.integrated_helpers:InstanceHelperMixin.'
    '_snapshot_server',
    'nova.tests.functional.integrated_helpers:InstanceHelperMixin.'
    '_wait_for_server_parameter',
    'nova.tests.functional.libvirt.base:ServersTestBase.'
    '_setup_compute_service',
}

#: Reached through an object rather than a class of ours or a module alias,
#: which the reading below cannot see: listed by hand.
STOCK_PRIVATE_BY_HAND = {
    # nova-imgtype prepare-uninstall: the libvirt URI nova-compute uses
    # (a function-level import).
    'nova.virt.libvirt.driver:LibvirtDriver._uri',
    'nova.compute.manager:ComputeManager._do_build_and_run_instance',
    'nova.tests.fixtures.glance:GlanceFixture._imagedata',
}

#: The sources read: the package, and the tools of the source tree (the
#: demo's and the tests' harness).
_SRC = [pathlib.Path(nova_imgtype.__file__).parent,
        pathlib.Path(nova_imgtype_testing.__file__).parent]


def _resolve(entry):
    module, _, path = entry.partition(':')
    obj = importlib.import_module(module)
    for part in path.split('.'):
        if isinstance(obj, type) and part not in dir(obj):
            # Instance attributes (self._host = ... in a method).
            assert 'self.%s = ' % part in inspect.getsource(obj), entry
            return True
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize('entry',
                         sorted(STOCK_PRIVATE | STOCK_PRIVATE_BY_HAND))
def test_listed_private_names_exist_in_this_nova(entry):
    assert _resolve(entry) is not None


def _nova_aliases(tree):
    """alias -> Nova module, from a module's imports."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and (
                node.module == 'nova' or node.module.startswith('nova.')):
            for name in node.names:
                full = '%s.%s' % (node.module, name.name)
                try:
                    importlib.import_module(full)
                except ImportError:
                    continue
                aliases[name.asname or name.name] = full
    return aliases


def _stock_bases(cls):
    return [base for base in cls.__mro__[1:]
            if base.__module__.startswith('nova.')]


def _touched():
    """Private stock names our sources reference, as STOCK_PRIVATE says
    them."""
    found = set()
    for src, path in sorted((root, path) for root in _SRC
                            for path in root.rglob('*.py')):
        if path.name == '__main__.py':
            continue        # runs the demo when imported
        module_name = '.'.join(
            (src.name,) + path.relative_to(src).with_suffix('').parts)
        if module_name.endswith('.__init__'):
            module_name = module_name[:-len('.__init__')]
        tree = ast.parse(path.read_text())
        aliases = _nova_aliases(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith('_')
                    and not node.attr.startswith('__')
                    and isinstance(node.value, ast.Name)
                    and node.value.id in aliases):
                found.add('%s:%s' % (aliases[node.value.id], node.attr))
        if module_name == _STEPS:
            found |= _steps_touched(tree)
        module = importlib.import_module(module_name)
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            cls = getattr(module, node.name, None)
            if not isinstance(cls, type) or not _stock_bases(cls):
                continue
            names = set()
            for sub in ast.walk(node):
                if isinstance(sub, ast.FunctionDef):
                    names.add(sub.name)
                if (isinstance(sub, ast.Attribute) and
                        isinstance(sub.value, (ast.Name, ast.Call))):
                    names.add(sub.attr)
            for sub in node.body:
                # A class attribute replacing stock's (a descriptor).
                if isinstance(sub, ast.Assign):
                    names.update(t.id for t in sub.targets
                                 if isinstance(t, ast.Name))
            for name in names:
                if not name.startswith('_') or name.startswith('__'):
                    continue
                for base in _stock_bases(cls):
                    if name in vars(base) or _sets(base, name):
                        found.add('%s:%s.%s' % (base.__module__,
                                                base.__qualname__, name))
                        break
    return found


#: Stock's private driver steps, called on the driver (``self._driver``).
_STEPS = 'nova_imgtype.stock.driver_steps'


def _steps_touched(tree):
    """The private names of stock's driver that :mod:`driver_steps`
    reaches through ``self._driver``."""
    from nova.virt.libvirt import driver as stock_driver

    found = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith('_')
                and not node.attr.startswith('__')
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == '_driver'):
            cls = stock_driver.LibvirtDriver
            assert node.attr in vars(cls) or _sets(cls, node.attr), (
                node.attr)
            found.add('nova.virt.libvirt.driver:LibvirtDriver.%s'
                      % node.attr)
    return found


def test_stock_steps_are_read():
    """driver_steps' names are collected (its methods are no subclass
    of stock's driver)."""
    import nova_imgtype.stock.driver_steps as steps

    found = _steps_touched(ast.parse(inspect.getsource(steps)))
    assert 'nova.virt.libvirt.driver:LibvirtDriver._create_snapshot_metadata' \
        in found
    assert 'nova.virt.libvirt.driver:LibvirtDriver._host' in found


def _sets(cls, name):
    init = vars(cls).get('__init__')
    try:
        return init is not None and (
            'self.%s =' % name in inspect.getsource(init))
    except (OSError, TypeError):
        return False


def test_every_private_stock_name_we_touch_is_listed():
    touched = _touched()
    assert touched - STOCK_PRIVATE == set()
    # And nothing listed that the code no longer touches (tools included).
    assert STOCK_PRIVATE - touched == set()
