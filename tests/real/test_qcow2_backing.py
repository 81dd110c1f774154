"""Real: a qcow2 instance disk that already exists backs onto a base whose
name ends in ``_<digits>`` (``swap_1``, ``ephemeral_1_<hash>``).

That is what a cold migration or resize finds on the destination: the disk
was copied from the source, and ``finish_migration`` asks the backend to
make it again. Stock ``Qcow2.create_image`` reads such a backing name as a
legacy ``<base>_<GiB>`` backing (the size in GiB after the last ``_``),
copies the raw base to ``swap_1_1`` and resizes that copy as qcow2:
``qemu-img resize -f qcow2`` fails on the raw file, and the move with it
(upstream tempest ``test_cold_migration_with_swap``).

Everything is real: qemu-img, files, locks; the backend is the one the
``nova_imgtype.image_backends`` entry point ``qcow2`` names.
"""

import os

import nova.conf
import pytest
from nova import objects
from nova.tests import fixtures as nova_fixtures
from nova.virt.libvirt import utils as libvirt_utils
from oslo_concurrency import processutils
from oslo_config import fixture as config_fixture
from oslo_utils import units

from nova_imgtype.virt.libvirt import backends
from nova_imgtype_testing import libvirtd as real

CONF = nova.conf.CONF
objects.register_all()


@pytest.fixture
def instances(tmp_path):
    fix = config_fixture.Config(CONF)
    fix.setUp()
    fix.config(instances_path=str(tmp_path), use_cow_images=True)
    fix.config(lock_path=str(tmp_path / 'locks'), group='oslo_concurrency')
    privsep = nova_fixtures.PrivsepFixture()
    privsep.setUp()
    os.makedirs(tmp_path / '_base')
    os.makedirs(tmp_path / 'uuid')
    yield tmp_path
    privsep.cleanUp()
    fix.cleanUp()


def _make_raw(target, size_mb, **kwargs):
    """What stock's ``_create_swap``/``_create_ephemeral`` leave: raw."""
    libvirt_utils.create_image(target, 'raw', '%dM' % size_mb)


def _backing(path):
    return real.qemu_img_info(path)['backing-filename']


def _qemu_io(path, command):
    out, _ = processutils.execute('qemu-io', '-f', 'qcow2', '-c', command,
                                  path)
    assert 'Pattern verification failed' not in out, out


@pytest.mark.parametrize('base_name', ['swap_1', 'ephemeral_1_1234567'])
def test_existing_disk_on_a_base_named_like_a_legacy_backing(
        instances, base_name):
    qcow2 = backends.get_class('qcow2')
    disk = str(instances / 'uuid' / 'disk.swap')
    base = str(instances / '_base' / base_name)
    qcow2(path=disk).create_image(_make_raw, base, units.Mi, size_mb=1,
                                  safe=True)
    _qemu_io(disk, 'write -P 0x5a 0 64k')
    # The destination of a move: the disk copied there, no base yet.
    os.unlink(base)

    qcow2(path=disk).create_image(_make_raw, base, units.Mi, size_mb=1,
                                  safe=True)

    assert os.path.exists(base), 'the base is made again'
    assert _backing(disk) == base
    assert sorted(os.listdir(instances / '_base')) == [base_name], \
        'no "legacy" copy of the base is made'
    _qemu_io(disk, 'read -P 0x5a 0 64k')


def test_a_real_legacy_backing_is_still_made(instances):
    """Stock's case: a disk backed onto ``<base>_<GiB>`` gets that copy of
    the base, resized to the size in its name."""
    qcow2 = backends.get_class('qcow2')
    base = str(instances / '_base' / ('a' * 40))
    legacy = base + '_1'
    real.make_image(base, 'qcow2', units.Mi)
    real.qemu_img('create', '-q', '-f', 'qcow2', '-F', 'qcow2', '-b',
                  base, legacy, str(units.Gi))
    disk = str(instances / 'uuid' / 'disk')
    real.qemu_img('create', '-q', '-f', 'qcow2', '-F', 'qcow2', '-b',
                  legacy, disk)
    os.unlink(legacy)

    qcow2(path=disk).create_image(_make_raw, base, units.Mi, size_mb=1,
                                  safe=True)

    assert os.path.exists(legacy)
    assert real.qemu_img_info(legacy)['virtual-size'] == units.Gi
