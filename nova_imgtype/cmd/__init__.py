"""Console scripts of nova-imgtype.

Nothing here imports Nova or parses a config file: the commands do, in
``main()``, where a config file that cannot be read or parsed
(:func:`config_file_errors`), or that is not a regular file and would be
waited on for ever (:func:`refuse_special_files`), is one line, not a
traceback; so is an option whose value cannot be read
(:func:`config_value_errors`). Both commands check the options as
nova-compute does when it starts (:func:`check_as_nova_compute`).
"""

from __future__ import annotations

import codecs
import contextlib
import glob
import importlib.metadata
import os
import stat
import sys
import traceback
import warnings
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Sequence
from types import FrameType

from oslo_config import cfg

# Importing Nova imports eventlet, which announces its own deprecation on
# stderr; it says nothing about the command the operator ran.
warnings.filterwarnings('ignore', message=r'\s*Eventlet is deprecated',
                        category=Warning)


class ConfigFileError(cfg.Error):
    """A config file cannot be read or parsed: ``<file>: <what is wrong>``."""


class ConfigValueError(cfg.Error):
    """An option's value cannot be read: ``[group]name: <what is wrong>``."""


def _file_being_parsed(e: BaseException) -> str | None:
    """The file oslo.config's parser was reading when ``e`` was raised."""
    for frame, _lineno in reversed(list(traceback.walk_tb(e.__traceback__))):
        parser = frame.f_locals.get('self')
        if isinstance(parser, cfg.ConfigParser):
            return parser.filename
    return None


def _parse_error(path: str, e: cfg.ConfigFileParseError) -> str:
    """What is wrong in ``path``, where oslo.config's parser stopped."""
    with contextlib.suppress(OSError), open(path, 'rb') as f:
        if f.read(3) == codecs.BOM_UTF8:    # oslo.config reads it as text
            return 'starts with a UTF-8 byte order mark; save it without'
    pe = e.__context__
    if not isinstance(pe, cfg.ParseError):
        return e.msg or str(e)
    if not pe.line:     # an option without a section, found a line later
        return 'near line %d: %s' % (pe.lineno, pe.msg)
    line = repr(pe.line)
    return 'line %d: %s: %s' % (pe.lineno, pe.msg, line if len(line) <= 60
                                else line[:56] + '...')


@contextlib.contextmanager
def config_file_errors() -> Iterator[None]:
    """Raise :class:`ConfigFileError` for a config file that oslo.config,
    in the block, cannot find, read, decode or parse."""
    try:
        yield
    except cfg.ConfigFilesNotFoundError as e:
        error = '%s: not found' % list(e.config_files)[0]
    except cfg.ConfigDirNotFoundError as e:
        error = '%s: not found' % e.config_dir
    except cfg.ConfigFilesPermissionDeniedError as e:
        error = '%s: permission denied' % list(e.config_files)[0]
    except cfg.ConfigFileParseError as e:
        error = '%s: %s' % (e.config_file, _parse_error(e.config_file, e))
    except (OSError, UnicodeDecodeError) as e:
        path = _file_being_parsed(e)
        if path is None:
            raise
        error = '%s: %s' % (path, e.strerror if isinstance(e, OSError) else
                            'not %s text (%s)' % (e.encoding, e.reason))
    else:
        return
    raise ConfigFileError(error)


def _option_values(args: Sequence[str], option: str) -> list[str]:
    """The values given to ``option`` (``--x v`` or ``--x=v``) in ``args``."""
    values = []
    it = iter(args)
    for arg in it:
        if arg == option:
            values.append(next(it, ''))
        elif arg.startswith(option + '='):
            values.append(arg.split('=', 1)[1])
    return values


def config_files(args: Sequence[str], project: str,
                 prog: str | None = None,
                 default_config_files: Sequence[str] | None = None
                 ) -> list[str]:
    """The files ``ConfigOpts()(args, project=project, prog=prog,
    default_config_files=...)`` will read, before it opens any.

    As oslo.config: each ``--config-file``, else the default files; the
    ``*.conf`` files of each ``--config-dir``, else of the default dirs.
    """
    files = _option_values(args, '--config-file')
    if not files:
        files = list(cfg.find_config_files(project, prog)
                     if default_config_files is None
                     else default_config_files)
    dirs = (_option_values(args, '--config-dir') or
            cfg.find_config_dirs(project, prog))
    for d in dirs:
        files += sorted(glob.glob(os.path.join(os.path.expanduser(d),
                                               '*.conf')))
    return [os.path.abspath(os.path.expanduser(f)) for f in files if f]


_SPECIAL_KINDS = ((stat.S_ISFIFO, 'a FIFO'), (stat.S_ISSOCK, 'a socket'),
                  (stat.S_ISCHR, 'a character device'),
                  (stat.S_ISBLK, 'a block device'))


def _special_kind(path: str) -> str | None:
    """What ``path`` is when it is neither a regular file nor a directory
    (oslo.config says what is wrong with those, and with a missing one)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return next((kind for is_kind, kind in _SPECIAL_KINDS if is_kind(mode)),
                'a special file')


def refuse_special_files(paths: Iterable[str]) -> None:
    """Raise :class:`ConfigFileError` for a config file that is not a
    regular file: oslo.config would open a FIFO and wait for a writer for
    ever (or read a device without end), nova-compute with it."""
    for path in paths:
        kind = _special_kind(path)
        if kind:
            raise ConfigFileError('%s: not a regular file (%s)' % (path, kind))


def _option_read(frame: FrameType) -> str | None:
    """``[group]name`` of the option whose value ``frame`` looks up, when
    it is oslo.config's ``ConfigOpts._do_get``."""
    if (frame.f_code.co_name != '_do_get' or
            not isinstance(frame.f_locals.get('self'), cfg.ConfigOpts)):
        return None
    group = frame.f_locals.get('group')
    return '[%s]%s' % (getattr(group, 'name', group) or 'DEFAULT',
                       frame.f_locals.get('name'))


def _substitution_loop(e: RecursionError) -> list[str] | None:
    """The options of the ``$name`` substitution loop that raised ``e``:
    the first option looked up again, the ones its value led to, and it."""
    chain: list[str] = []
    for frame, _lineno in traceback.walk_tb(e.__traceback__):
        option = _option_read(frame)
        if option is None:
            continue
        if option in chain:
            return chain[chain.index(option):] + [option]
        chain.append(option)
    return None


@contextlib.contextmanager
def config_value_errors() -> Iterator[None]:
    """Raise :class:`ConfigValueError` for an option, read in the block,
    whose value substitutes itself (``$name``), directly or through
    others, for ever: oslo.config recurses until Python stops it."""
    try:
        yield
    except RecursionError as e:
        loop = _substitution_loop(e)
        if loop is None:
            raise
        raise ConfigValueError('%s: substitution loop (%s)' % (
            loop[0], ' -> '.join(loop))) from None


def version() -> str:
    """nova-imgtype's version, as installed (``--version``)."""
    try:
        return importlib.metadata.version('nova-imgtype')
    except importlib.metadata.PackageNotFoundError:
        return 'unknown (not installed)'


def exit_quietly_on_closed_pipe(main: Callable[[], int]) -> int:
    """``main()``; when whoever reads its output stops reading (``| head``),
    the rest is dropped without a traceback, as a Unix tool does, and the
    exit status says so (141, a shell's for SIGPIPE)."""
    try:
        status = main()
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        # Python flushes stdout again at exit: into nothing, this time.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


def describe(e: BaseException) -> str:
    """``e`` in one line, for an operator. A value oslo.config cannot take
    is ``[group]name in <where it was set>: <why>``: oslo's own message
    names the option without its group and carries the repr of its
    ``LocationInfo``."""
    if (isinstance(e, (cfg.ConfigFileValueError,
                       cfg.ConfigSourceValueError)) and
            isinstance(e.__context__, ValueError)):
        frames = [frame for frame, _lineno
                  in traceback.walk_tb(e.__traceback__)
                  if _option_read(frame)]
        if frames:
            option = _option_read(frames[-1])
            where = getattr(frames[-1].f_locals.get('alt_loc'), 'detail',
                            None)
            return ' '.join(('%s%s: %s' % (
                option, ' in %s' % where if where else '',
                e.__context__)).split())
    return ' '.join(str(e).split())


#: The driver nova-imgtype's checks are for (``[DEFAULT]compute_driver``).
PLUGIN_DRIVERS = ('imgtype.LibvirtDriver', 'nova.virt.imgtype.LibvirtDriver')

#: The groups nova-imgtype adds options to, all of whose options are
#: registered once Nova's and ours are.
OWN_GROUPS = ('libvirt', 'image_cache', 'scheduler')


def unknown_options(conf: cfg.ConfigOpts,
                    groups: Iterable[str]) -> list[str]:
    """``[group]name`` of each option set in the config files read into
    ``conf``, in one of ``groups``, that no one registered there: most
    likely a misspelt one, which oslo.config and Nova ignore without a
    word. Only groups whose options are all registered once Nova's and
    ours are (not ``[keystone_authtoken]`` and the like, which other
    libraries register when they load) are worth asking about."""
    unknown = []
    for path in conf.config_file or []:
        sections: dict[str, dict[str, list[str]]] = {}
        cfg.ConfigParser(path, sections).parse()
        for group in groups:
            if group not in sections:
                continue
            known = set(conf[group])
            for name in sections[group]:
                if name.replace('-', '_') not in known:
                    unknown.append('[%s]%s' % (group, name))
    return sorted(set(unknown))


def check_as_nova_compute(conf: cfg.ConfigOpts) -> None:
    """Check nova-imgtype's options as nova-compute does when it starts
    (the driver's ``__init__`` and ``init_host``), refusing what it refuses
    with the reason it gives: ``images_type_mapping`` and ``images_type``
    read, ``[image_cache]template_image_handler`` loaded by the driver's
    loader, every mapped backend one this host can serve.

    Imports Nova (registering its options and ours on ``conf``).

    :raises ConfigFileValueError, ValueError: an invalid value.
    :raises ImgtypeException: an invalid mapping entry, an unknown
        template image handler or one that cannot be loaded.
    """
    import nova_imgtype.conf  # noqa: F401  (Nova's options and ours)
    from nova_imgtype.conf import opts
    from nova_imgtype.virt.libvirt import resolver as resolver_mod
    from nova_imgtype.virt.libvirt import template_handlers

    # Every option of ours read, as nova-compute reads each sooner or
    # later: a value it cannot take is found now, not at the first build.
    for group, group_opts in opts.list_opts():
        for opt in group_opts:
            getattr(conf[group.name], opt.dest)
    resolver = resolver_mod.BackendResolver(conf)
    _ = resolver.mapping
    resolver.default_backend()
    template_handlers.load(conf.image_cache.template_image_handler)
    resolver.check_host()
