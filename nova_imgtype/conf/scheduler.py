"""Options of nova-imgtype's scheduler part, in Nova's ``[scheduler]``."""

from oslo_config import cfg

scheduler_group = cfg.OptGroup('scheduler', title='Scheduler configuration')

filter_hosts_by_image_type_support_opt = cfg.BoolOpt(
    'filter_hosts_by_image_type_support',
    default=False,
    help="""
Ask placement only for hosts that can use the image of the request.

When enabled, the ``image_type_support`` request filter of nova-imgtype adds
the trait ``COMPUTE_IMAGE_TYPE_<DISK_FORMAT>`` of the request's image to the
required traits of the root provider, for every scheduling request that
carries an image: boot, resize, cold migration, evacuate, unshelve (the
shelve snapshot's format) and scheduled live migration. Boot from volume is
left alone. A flavor with the extra spec ``imgtype:native=required`` also
requires ``CUSTOM_IMGTYPE_NATIVE_<DISK_FORMAT>``: hosts that use the image
in its own format, without conversion. An image whose disk_format has no
such trait fails the request (NoValidHost, naming the format).

The filter is loaded by a stock nova-scheduler through
``[filter_scheduler]available_filters =
nova_imgtype.scheduler.filters.all_filters``, next to Nova's default.

Enable it only once every compute node reports its image-type traits (run
``nova-imgtype-status upgrade check``): a node that does not is never
chosen while it is on.

Possible values:

* False (default): no image-type requirement from nova-imgtype.
* True: require the image's type (and, with ``imgtype:native=required``,
  native use) from candidate hosts.

Related options:

* ``[scheduler]query_placement_for_image_type_support``: Nova's own,
  narrower toggle (host-wide ``images_type`` only). Enabling both gives the
  same result as this one alone.
* ``[filter_scheduler]available_filters``: must list
  ``nova_imgtype.scheduler.filters.all_filters``.
""")

ALL_OPTS: list[cfg.Opt] = [filter_hosts_by_image_type_support_opt]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(scheduler_group)
    conf.register_opts(ALL_OPTS, group=scheduler_group)


def list_opts() -> dict[cfg.OptGroup, list[cfg.Opt]]:
    return {scheduler_group: ALL_OPTS}
