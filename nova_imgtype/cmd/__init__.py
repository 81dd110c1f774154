"""Console scripts of nova-imgtype.

Nothing here imports Nova or parses a config file: the commands do, in
``main()``, where a config file that cannot be read or parsed is one line
(:func:`config_file_errors`), not a traceback. ``nova-imgtype demo``, which
runs Nova's services in-process, chooses Nova's concurrency mode (native
threads, as Nova 34's services) before it imports anything of Nova.
"""

from __future__ import annotations

import codecs
import contextlib
import traceback
import warnings
from collections.abc import Iterator

from oslo_config import cfg

# Importing Nova imports eventlet, which announces its own deprecation on
# stderr; it says nothing about the command the operator ran.
warnings.filterwarnings('ignore', message=r'\s*Eventlet is deprecated',
                        category=Warning)


class ConfigFileError(cfg.Error):
    """A config file cannot be read or parsed: ``<file>: <what is wrong>``."""


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
