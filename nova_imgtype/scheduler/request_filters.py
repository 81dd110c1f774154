"""Request filters: what a scheduling request asks of placement.

Found through the stevedore namespace
``nova_imgtype.scheduler.request_filters`` and run by stock Nova's
``nova.scheduler.request_filter.process_reqspec``
(see :mod:`nova_imgtype.scheduler.filters` for how they get there). Each is
``filter(context, request_spec) -> bool``: it may add to the request spec and
returns whether it did anything; it raises ``RequestFilterFailed`` (which the
scheduler turns into NoValidHost) for a request no host can ever satisfy.
"""

from __future__ import annotations

from typing import Any

from nova import context as nova_context
from nova import exception as nova_exception
from nova import objects
from nova.i18n import _
from nova.scheduler import request_filter
from oslo_config import cfg
from oslo_log import log as logging

import nova_imgtype.conf
from nova_imgtype import record
from nova_imgtype import traits

LOG = logging.getLogger(__name__)
CONF: cfg.ConfigOpts = nova_imgtype.conf.CONF

#: Flavor extra spec: ``required`` asks for hosts using the image natively.
NATIVE_EXTRA_SPEC = 'imgtype:native'


def image_disk_format(request_spec: Any) -> str | None:
    """The disk_format of the request's image; None when it has none (or
    the request boots from volume)."""
    if 'is_bfv' in request_spec and request_spec.is_bfv:
        return None
    image = request_spec.image if 'image' in request_spec else None
    if image is None or not image.obj_attr_is_set('disk_format'):
        return None
    disk_format: str | None = image.disk_format
    return disk_format or None


def wants_native(request_spec: Any) -> bool:
    flavor = request_spec.flavor if 'flavor' in request_spec else None
    specs = (flavor.extra_specs if flavor is not None and
             flavor.obj_attr_is_set('extra_specs') else None) or {}
    return specs.get(NATIVE_EXTRA_SPEC) == 'required'


def required_traits(request_spec: Any) -> set[str]:
    """The traits a host needs for the request's image.

    :raises RequestFilterFailed: the image's disk_format has no trait, so no
        host can claim to support it.
    """
    disk_format = image_disk_format(request_spec)
    if disk_format is None:
        return set()
    trait = traits.image_type_trait(disk_format)
    if trait is None:
        raise nova_exception.RequestFilterFailed(
            reason=_('image disk_format %s has no COMPUTE_IMAGE_TYPE trait: '
                     'no host reports support for it') % disk_format)
    wanted = {trait}
    if wants_native(request_spec):
        wanted.add(traits.native_trait(disk_format))
    return wanted


@request_filter.trace_request_filter
def image_type_support(ctxt: Any, request_spec: Any) -> bool:
    """Require hosts that can use the request's image (toggle:
    ``[scheduler]filter_hosts_by_image_type_support``)."""
    if not CONF.scheduler.filter_hosts_by_image_type_support:
        return False
    wanted = required_traits(request_spec)
    if not wanted:
        return False
    request_spec.root_required.update(wanted)
    # Said at INFO: when no host has them, this line is what names the
    # image format behind stock's bare "No valid host was found".
    LOG.info('Image %(image)s is %(fmt)s: only hosts with %(traits)s '
             '(image_type_support request filter)', {
                 'image': request_spec.image.id
                 if request_spec.image.obj_attr_is_set('id') else '-',
                 'fmt': image_disk_format(request_spec),
                 'traits': ', '.join(sorted(wanted))})
    return True


def recorded_backend(ctxt: Any, request_spec: Any) -> str | None:
    """The backend recorded with the request's instance when it exists in
    a cell already (a move: resize, migration, live migration, evacuation,
    unshelve); None for a new build or an instance from before
    nova-imgtype."""
    uuid = (request_spec.instance_uuid
            if 'instance_uuid' in request_spec else None)
    if not uuid:
        return None
    try:
        mapping = objects.InstanceMapping.get_by_instance_uuid(ctxt, uuid)
    except nova_exception.InstanceMappingNotFound:
        return None
    if mapping.cell_mapping is None:
        return None                     # not built yet
    with nova_context.target_cell(ctxt, mapping.cell_mapping) as cctxt:
        try:
            instance = objects.Instance.get_by_uuid(
                cctxt, uuid, expected_attrs=['system_metadata'])
        except nova_exception.InstanceNotFound:
            return None
    backend: str | None = record.backend(instance.system_metadata)
    return backend or None


@request_filter.trace_request_filter
def instance_backend(ctxt: Any, request_spec: Any) -> bool:
    """Move an instance only to hosts that serve its recorded backend.

    Each compute running nova-imgtype reports one
    ``CUSTOM_IMGTYPE_BACKEND_<NAME>`` trait per backend it can serve; a
    host without nova-imgtype reports none and would treat the instance's
    disks as its own ``images_type``. Always on where nova-imgtype's
    request filters are loaded: it keeps disks from being lost, whatever
    ``[scheduler]filter_hosts_by_image_type_support`` says.
    """
    backend = recorded_backend(ctxt, request_spec)
    if backend is None:
        return False
    trait = traits.backend_trait(backend)
    request_spec.root_required.add(trait)
    LOG.info('Instance %(uuid)s is on image backend %(backend)s: only hosts '
             'with %(trait)s (instance_backend request filter)',
             {'uuid': request_spec.instance_uuid, 'backend': backend,
              'trait': trait})
    return True
