"""``[libvirt]images_type_mapping``: which image backend uses which image
format in its own format.

The value is a comma separated list of ``<source disk_format>:<backend>``
entries, for example ``raw:lvm, qcow2:qcow2``. A source format named there is
used without conversion by that backend; any other format is converted to
``[libvirt]images_type`` as stock Nova does.

The option is registered wherever ``nova_imgtype.conf`` is imported: in
nova-scheduler and nova-api too, on hosts that have neither Nova's libvirt
driver loaded nor libvirt-python installed. So the registry of backends
(:mod:`.backends`, which imports both) is imported only when a value is
validated, which only a compute (or ``nova-imgtype check``) does.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping

from oslo_config import cfg
from oslo_config import types

from nova_imgtype import exception

#: Every disk_format Glance accepts (glance-api's default ``disk_formats``);
#: only these can be a source. Nova's own ``fields.DiskFormat`` is the list of
#: block device formats (it has lvm and rbd), not of image formats.
SOURCE_FORMATS: tuple[str, ...] = (
    'ami', 'ari', 'aki', 'vhd', 'vhdx', 'vmdk', 'raw', 'qcow2', 'vdi',
    'ploop', 'iso')


class ImagesTypeMapping(Mapping[str, str]):
    """A validated, immutable ``{source disk_format: backend name}``.

    ``str()`` gives the option's syntax back, and parsing it again gives an
    equal mapping.
    """

    __slots__ = ('_entries',)

    def __init__(self, entries: Iterable[tuple[str, str]] = ()) -> None:
        self._entries: dict[str, str] = dict(entries)

    def __getitem__(self, source: str) -> str:
        return self._entries[source]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __hash__(self) -> int:
        return hash(tuple(self._entries.items()))

    def __str__(self) -> str:
        return ', '.join('%s:%s' % item for item in self._entries.items())

    def __repr__(self) -> str:
        return 'ImagesTypeMapping(%r)' % str(self)

    def formats_for(self, backend: str) -> tuple[str, ...]:
        """The source formats mapped to ``backend``."""
        return tuple(s for s, b in self._entries.items() if b == backend)


def _invalid(entry: str, reason: str) -> exception.InvalidImagesTypeMapping:
    return exception.InvalidImagesTypeMapping(entry=entry, reason=reason)


def _parse_entry(entry: str) -> tuple[str, str]:
    from nova_imgtype.virt.libvirt import backends  # noqa: PLC0415 - see the docstring

    if not entry:
        raise _invalid(entry, 'empty entry (a stray comma?)')
    if entry != entry.strip() or any(c.isspace() for c in entry):
        raise _invalid(entry, 'blanks are not allowed inside an entry')
    parts = entry.split(':')
    if len(parts) != 2 or not all(parts):
        raise _invalid(entry, "expected '<source disk_format>:<backend>'")
    source, backend = parts
    if source not in SOURCE_FORMATS:
        raise _invalid(entry, 'unknown source disk_format %r; one of: %s'
                       % (source, ', '.join(SOURCE_FORMATS)))
    if backend == backends.DEFAULT:
        raise _invalid(entry, "'default' names no backend of its own; "
                       "name the backend (e.g. qcow2 or flat)")
    if backend not in backends.names():
        raise _invalid(entry, 'unknown backend %r; registered backends: %s'
                       % (backend, ', '.join(backends.names())))
    native = backends.native_formats(backend)
    if source not in native:
        raise _invalid(entry, 'backend %r cannot use %s images in their own '
                       'format (it uses: %s); leave %s unmapped to have it '
                       'converted to [libvirt]images_type'
                       % (backend, source, ', '.join(native), source))
    return source, backend


def parse(value: str | Iterable[str] | None) -> ImagesTypeMapping:
    """Parse and validate the option's value.

    :param value: the raw option text, or a list of entries.
    :returns: the mapping; empty for an empty value.
    :raises InvalidImagesTypeMapping: naming the first offending entry, for
        malformed entries, unknown source formats or backends, a source
        format given twice, and a backend that would have to convert.
    """
    if value is None:
        return ImagesTypeMapping()
    if isinstance(value, str):
        if not value.strip():
            return ImagesTypeMapping()
        raw_entries = [e.strip() for e in value.split(',')]
    else:
        raw_entries = list(value)
    result: dict[str, str] = {}
    for entry in raw_entries:
        if not isinstance(entry, str):
            raise _invalid(repr(entry), 'entries must be strings')
        source, backend = _parse_entry(entry)
        if source in result:
            raise _invalid(entry, 'ambiguous: %s is already mapped to %r'
                           % (source, result[source]))
        result[source] = backend
    return ImagesTypeMapping(result.items())


def check_host(mapping: Mapping[str, str], conf: cfg.ConfigOpts) -> None:
    """Check that this host can serve every backend the mapping names.

    :raises InvalidImagesTypeMapping: naming the entry whose backend this
        host cannot serve, and why.
    """
    from nova_imgtype.virt.libvirt import backends  # noqa: PLC0415 - see the docstring

    for source, backend in mapping.items():
        reason = backends.host_support_error(backend, conf)
        if reason:
            raise _invalid('%s:%s' % (source, backend),
                           'this host cannot serve backend %r: %s'
                           % (backend, reason))


class ImagesTypeMappingType(types.ConfigType):
    """oslo.config type: the option's value is parsed when it is read."""

    def __init__(self, type_name: str = 'images type mapping') -> None:
        super().__init__(type_name=type_name)

    def __call__(self, value: object) -> ImagesTypeMapping:
        if isinstance(value, ImagesTypeMapping):
            return value
        return parse(value)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return 'ImagesTypeMapping'

    def __eq__(self, other: object) -> bool:
        return self.__class__ == other.__class__

    def _formatter(self, value: object) -> str:
        return str(self(value))
