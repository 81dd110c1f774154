"""Exceptions raised by nova-imgtype.

Every exception carries a message template (``msg_fmt``) filled from keyword
arguments, the way Nova's and os-brick's exceptions do, so the message always
names what is wrong.
"""

from typing import Any

from nova import exception as nova_exception
from nova.i18n import _


class ImgtypeException(nova_exception.NovaException):
    """Base class of every nova-imgtype exception."""

    msg_fmt = _("An unknown nova-imgtype error occurred.")

    def __init__(self, message: str | None = None, **kwargs: Any) -> None:
        """Fill ``msg_fmt`` from ``kwargs`` unless a message is given."""
        super().__init__(message, **kwargs)


class InvalidImagesTypeMapping(ImgtypeException, nova_exception.Invalid,
                               ValueError):
    """``[libvirt]images_type_mapping`` is invalid.

    Raised by the parser (and so by oslo.config when the option is read) and
    by the host checks nova-compute runs at start. It is also a ValueError so
    that oslo.config reports it as a bad option value.
    """

    msg_fmt = _("Invalid [libvirt]images_type_mapping entry %(entry)r: "
                "%(reason)s")


class UnknownImageBackend(ImgtypeException, nova_exception.Invalid):
    """No image backend of that name is registered."""

    msg_fmt = _("Unknown image backend %(name)r; registered backends in "
                "the 'nova_imgtype.image_backends' namespace: %(known)s")


class BackendNotServedByHost(ImgtypeException, nova_exception.Invalid):
    """The instance's recorded backend cannot be used on this host."""

    msg_fmt = _("Instance %(instance_uuid)s uses image backend %(backend)r, "
                "which host %(host)s cannot serve: %(reason)s")


class DestinationWithoutImgtype(ImgtypeException, nova_exception.Invalid):
    """A move's destination runs no nova-imgtype: it reports no
    ``CUSTOM_IMGTYPE_BACKEND_*`` trait to placement."""

    msg_fmt = _("Destination host %(host)s runs no nova-imgtype (it reports "
                "no CUSTOM_IMGTYPE_BACKEND_* trait to placement): it would "
                "not use the disks of instance %(instance_uuid)s, which are "
                "on image backend %(backend)r (%(storage)s) recorded by "
                "nova-imgtype")


class DiskCopyFailed(ImgtypeException):
    """A disk could not be copied to another host through its libvirtd;
    what was copied before it was removed there."""

    msg_fmt = _("Copying %(src)s to %(host)s:%(target)s through libvirt "
                "failed: %(reason)s")


class StorageException(ImgtypeException):
    """Base of the storage pool errors; each names the pool."""

    msg_fmt = _("libvirt storage error on pool %(pool)s")


class StorageUnavailable(StorageException):
    """libvirt does not answer, or refuses, for the pool: nothing can be
    said of it (never "not found")."""

    msg_fmt = _("Storage pool %(pool)s is unavailable: %(reason)s")


class PoolNotFound(StorageException):
    msg_fmt = _("Storage pool %(pool)s does not exist")


class PoolInactive(StorageException):
    msg_fmt = _("Storage pool %(pool)s exists but is not active")


class PoolConflict(StorageException):
    msg_fmt = _("Storage pool %(pool)s exists with another definition: "
                "%(reason)s; it is not redefined")


class VolumeExists(StorageException):
    msg_fmt = _("Volume %(volume)s already exists in storage pool %(pool)s; "
                "it is not overwritten")


class DiskFileExists(StorageException):
    msg_fmt = _("Disk file %(path)s already exists while volume %(volume)s "
                "of the instance is in storage pool %(pool)s; neither is "
                "overwritten")


class VolumeNotFound(StorageException):
    msg_fmt = _("Volume %(volume)s not found in storage pool %(pool)s")


class VolumeCreateFailed(StorageException):
    msg_fmt = _("Creating volume %(volume)s in storage pool %(pool)s "
                "failed: %(reason)s")


class VolumeFormatMismatch(StorageException):
    """libvirt reads a volume in another format than the one recorded."""

    msg_fmt = _("Volume %(volume)s is recorded as %(recorded)s but libvirt "
                "reads it as %(probed)s: it is not copied, its content is "
                "not followed")


class NotSupportedOnPools(ImgtypeException, nova_exception.Invalid):
    """An operation nova-imgtype cannot do yet for a pool instance."""

    msg_fmt = _("%(operation)s is not supported yet for instance "
                "%(instance_uuid)s, whose disks are libvirt storage volumes "
                "([libvirt]use_storage_pools)")


class UnknownTemplateImageHandler(ImgtypeException, nova_exception.Invalid):
    msg_fmt = _('Unknown [image_cache]template_image_handler %(name)r; '
                'registered handlers: %(known)s')


class TemplateImageHandlerLoadFailed(ImgtypeException):
    msg_fmt = _('[image_cache]template_image_handler %(name)r is registered '
                'but could not be loaded: %(reason)s')


class LinkedTemplateUnsafe(ImgtypeException, nova_exception.Invalid):
    """A backend that copies templates as files met a linked template."""

    msg_fmt = _('Template %(template)s is linked to an image volume, which '
                'image backend %(backend)s would copy as a link (sharing '
                'the volume with the instance); it is not used. Use '
                '[image_cache]template_image_handler = downloading on hosts '
                'with such instances')


class LinkedTemplateChanged(ImgtypeException,
                            nova_exception.ImageUnacceptable):
    """A linked template is no longer what was accepted when linked."""

    msg_fmt = _('Image %(image_id)s is unacceptable: linked template '
                '%(template)s is not what was accepted (%(fmt)s): '
                '%(reason)s')


class StockFactBroken(ImgtypeException):
    """The installed Nova's source no longer does what a hook of
    :mod:`nova_imgtype.stock` relies on."""

    msg_fmt = _("Stock Nova's %(where)s no longer matches %(step)r, in "
                "order: %(why)s")
