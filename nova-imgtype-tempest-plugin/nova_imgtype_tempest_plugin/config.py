"""Tempest options of nova-imgtype's scenarios.

In ``tempest.conf``::

    [imgtype-feature-enabled]
    image_type_scheduling = True

    [imgtype]
    unsupported_disk_format = vhdx

Tempest exposes the groups as ``CONF.imgtype`` and
``CONF.imgtype_feature_enabled``.
"""

from __future__ import annotations

from oslo_config import cfg

imgtype_group = cfg.OptGroup(
    name='imgtype', title='nova-imgtype scenario options')

ImgtypeGroup: list[cfg.Opt] = [
    cfg.ListOpt(
        'native_qcow2_hosts',
        default=[],
        help='nova-compute hosts (OS-EXT-SRV-ATTR:host) that use qcow2 '
             'images natively (images_type_mapping qcow2:qcow2). When set, '
             'servers of an imgtype:native=required flavor booted from a '
             'qcow2 image must land on one of them, on top of the check '
             'that their node has the CUSTOM_IMGTYPE_NATIVE_QCOW2 trait in '
             'placement.'),
    cfg.StrOpt(
        'qcow2_image_file',
        help='Path of the qcow2 image the scenarios upload to Glance. '
             'Default: [scenario]img_file, which must then be a qcow2 '
             'image (devstack\'s cirros image is).'),
    cfg.StrOpt(
        'unsupported_disk_format',
        default='vhdx',
        help='A Glance disk_format for which no compute node reports '
             'COMPUTE_IMAGE_TYPE_<FORMAT>, so that a boot from such an '
             'image ends in NoValidHost. With force_raw_images = True '
             '(Nova\'s default) nova-imgtype computes convert, and so '
             'support, vhd, vhdx, vmdk and vdi: use vhdx with '
             'force_raw_images = False on every compute, or ploop '
             '(unsupported unless virt_type = parallels) with '
             'unsupported_image_file.'),
    cfg.StrOpt(
        'unsupported_image_file',
        help='Path of an image in unsupported_disk_format to upload. '
             'Default: made from the qcow2 image with qemu-img convert '
             '(vhd, vhdx, vmdk, vdi and raw only).'),
    cfg.StrOpt(
        'qemu_img',
        default='qemu-img',
        help='qemu-img command used to make the unsupported image when '
             'unsupported_image_file is not set.'),
]

imgtype_feature_group = cfg.OptGroup(
    name='imgtype-feature-enabled',
    title='nova-imgtype features enabled in the cloud under test')

ImgtypeFeatureGroup: list[cfg.Opt] = [
    cfg.BoolOpt(
        'image_type_scheduling',
        default=False,
        help='Whether the cloud schedules by image type with nova-imgtype: '
             'computes run compute_driver = imgtype.LibvirtDriver, and '
             'nova-scheduler has [scheduler]'
             'filter_hosts_by_image_type_support = True and '
             'nova_imgtype.scheduler.filters.all_filters in '
             '[filter_scheduler]available_filters. The scenarios are '
             'skipped when False.'),
]

#: (group, options) of every group the plugin registers.
GROUPS: list[tuple[cfg.OptGroup, list[cfg.Opt]]] = [
    (imgtype_group, ImgtypeGroup),
    (imgtype_feature_group, ImgtypeFeatureGroup),
]
