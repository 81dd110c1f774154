"""Options of nova-imgtype in Nova's ``[image_cache]`` group."""

from oslo_config import cfg

image_cache_group = cfg.OptGroup('image_cache', title='Image Cache Options')

template_image_handler_opt = cfg.StrOpt(
    'template_image_handler',
    default='downloading',
    help="""
How the image cache gets the template of an image (the file in
``<instances_path>/_base`` that instance disks are made from).

Handlers are found in the stevedore namespace
``nova_imgtype.template_image_handlers``; a third-party handler registered
there can be named here. nova-compute refuses to start with a name that is
not registered, listing those that are.

Possible values:

* ``downloading`` (default): every byte from the image service, as stock
  Nova, streamed to a temporary file (glanceclient checks it against the
  image's ``os_hash_algo``/``os_hash_value`` as it is read), inspected as
  stock, then renamed into place; one download per image per host.
* ``volume-based-linking``: for an image stored in a Cinder volume (Glance's
  cinder store, location ``cinder://<volume>``), the volume is attached to
  this host (a Cinder attachment, connected with os-brick) and linked as the
  template, not copied; instance disks are copy-on-write on it. Reconnected
  after a restart; disconnected and detached once no instance uses it. Other
  images, and volumes that cannot be attached, are downloaded (logged).
* the name of any other registered handler.

Related options:

* ``[image_cache]remove_unused_base_images`` and the other image cache
  options: unused templates are removed through the handler.
* ``force_raw_images``: applies to downloaded images.
""")

ALL_OPTS: list[cfg.Opt] = [template_image_handler_opt]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(image_cache_group)
    conf.register_opts(ALL_OPTS, group=image_cache_group)


def list_opts() -> dict[cfg.OptGroup, list[cfg.Opt]]:
    return {image_cache_group: ALL_OPTS}
