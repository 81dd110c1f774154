"""Real: the one template inspection gives stock ``fetch_to_raw``'s verdicts.

:func:`nova_imgtype.virt.libvirt.template_handlers.inspection.inspect`
states once the checks stock keeps inline in ``fetch_to_raw``. Both run
here on the same crafted images (real files, real qemu-img, Nova's format
inspector), with deep inspection on and off: a Nova release that changes a
verdict fails this test, and the inspection is then brought in line.

Fake: only the image service (``fetch`` copies a local file, ``get`` says
what the image claims to be).
"""

import os
import shutil

import pytest
from nova.virt import images

from nova_imgtype.virt.libvirt.template_handlers import inspection
from nova_imgtype_testing import crafted_images as crafted
from nova_imgtype_testing import libvirtd as real
from tests.real.test_native_images import conf  # noqa: F401
from tests.real.test_native_images import driver  # noqa: F401


def _plain(fmt):
    return crafted.Crafted('plain-' + fmt, fmt, False,
                           lambda path, secret: real.make_image(
                               path, fmt, crafted.SIZE))


def _verdict(call):
    try:
        call()
    except Exception as e:  # noqa: BLE001 - the verdict is the exception
        return type(e).__name__
    return 'accepted'


@pytest.mark.parametrize('deep', [True, False], ids=['deep', 'no-deep'])
@pytest.mark.parametrize('image', crafted.CRAFTED + (
    _plain('raw'), _plain('qcow2')), ids=lambda c: c.name)
def test_inspection_agrees_with_stock_fetch_to_raw(
        image, deep, driver, conf, tmp_path, monkeypatch):  # noqa: F811
    driver()                        # privsep in-process, as the others
    conf.config(force_raw_images=False)   # the verdict, not a conversion
    conf.config(disable_deep_image_inspection=not deep, group='workarounds')
    secret = crafted.make_secret(str(tmp_path))
    path = crafted.make(image, str(tmp_path), secret)
    meta = {'id': 'img', 'disk_format': image.claimed}
    monkeypatch.setattr(images, 'fetch', lambda ctx, href, dest, tc=None:
                        shutil.copyfile(path, dest))
    monkeypatch.setattr(images.IMAGE_API, 'get', lambda ctx, href: meta)

    stock = _verdict(lambda: images.fetch_to_raw(
        None, 'img', str(tmp_path / 'stock')))
    ours = _verdict(lambda: inspection.inspect(meta, 'img', path))

    assert ours == stock
    if image.hostile:
        assert ours == 'ImageUnacceptable'
    assert not os.path.exists(tmp_path / 'stock.part')
