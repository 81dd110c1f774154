"""Flavor extra spec validators of the ``imgtype`` namespace.

Loaded by stock Nova's API through the ``nova.api.extra_spec_validators``
entry point, so that ``openstack flavor set --property imgtype:...``
rejects unknown keys and bad values.
"""

from nova.api.validation.extra_specs import base

EXTRA_SPEC_VALIDATORS = [
    base.ExtraSpecValidator(
        name='imgtype:native',
        description=(
            'Whether instances of this flavor must land on hosts that use '
            'the image in its own format, without conversion (hosts with '
            'the trait CUSTOM_IMGTYPE_NATIVE_<DISK_FORMAT>). Needs '
            '[scheduler]filter_hosts_by_image_type_support.'),
        value={
            'type': str,
            'description': 'required: only native hosts; optional: any '
                           'host that can use the image.',
            'enum': ('required', 'optional'),
        },
    ),
]


def register() -> list[base.ExtraSpecValidator]:
    return EXTRA_SPEC_VALIDATORS
