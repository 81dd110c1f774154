"""Virtual sizes read in this process
(:mod:`nova_imgtype.virt.libvirt.sizes`), of real files made by qemu-img."""

import json
import os
import subprocess

import cachetools
import pytest

from nova_imgtype.virt.libvirt import sizes

MiB = 1024 * 1024


def _qemu_img(*args):
    subprocess.run(('qemu-img',) + args, check=True, capture_output=True)


def _info(path):
    out = subprocess.run(['qemu-img', 'info', '--output=json', path],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def _info_size(path):
    return _info(path)['virtual-size']


def _info_format(path):
    return _info(path)['format']


@pytest.mark.parametrize('fmt', ['raw', 'qcow2'])
def test_the_size_qemu_img_gives(tmp_path, fmt):
    path = str(tmp_path / 'disk')
    _qemu_img('create', '-q', '-f', fmt, path, '10G')
    assert sizes.virtual_size(path) == _info_size(path) == 10 * 1024 * MiB


def test_a_qcow2_overlay_has_its_own_size(tmp_path):
    base = str(tmp_path / 'base')
    _qemu_img('create', '-q', '-f', 'qcow2', base, '1G')
    overlay = str(tmp_path / 'overlay')
    _qemu_img('create', '-q', '-f', 'qcow2', '-F', 'qcow2', '-b', base,
              overlay, '3G')
    assert sizes.virtual_size(overlay) == 3 * 1024 * MiB


def test_other_formats_are_left_to_qemu_img(tmp_path):
    path = str(tmp_path / 'disk.vmdk')
    _qemu_img('create', '-q', '-f', 'vmdk', path, '1G')
    assert sizes.virtual_size(path) is None


@pytest.mark.parametrize('fmt', ['raw', 'qcow2'])
def test_the_disk_format_qemu_img_gives(tmp_path, fmt):
    path = str(tmp_path / 'disk')
    _qemu_img('create', '-q', '-f', fmt, path, '1G')
    assert sizes.disk_format(path) == _info_format(path) == fmt


def test_an_iso_is_a_raw_disk_as_qemu_img_says(tmp_path):
    (tmp_path / 'files').mkdir()
    (tmp_path / 'files' / 'meta_data.json').write_text('{}')
    iso = str(tmp_path / 'disk.config')
    subprocess.run(['genisoimage', '-quiet', '-J', '-r', '-V', 'config-2',
                    '-o', iso, str(tmp_path / 'files')], check=True)
    assert sizes.disk_format(iso) == _info_format(iso) == 'raw'


def test_the_disk_format_of_other_formats_is_left_to_qemu_img(tmp_path):
    path = str(tmp_path / 'disk.vmdk')
    _qemu_img('create', '-q', '-f', 'vmdk', path, '1G')
    assert sizes.disk_format(path) is None
    assert sizes.disk_format(str(tmp_path / 'nothing')) is None


def test_a_format_only_qemu_probes_is_raw_bytes(tmp_path):
    # parallels is no Glance disk_format and Nova's inspector does not know
    # it: its bytes are the disk, no format probed from them.
    path = str(tmp_path / 'disk')
    _qemu_img('create', '-q', '-f', 'parallels', path, '1G')
    assert _info_format(path) == 'parallels'
    assert sizes.disk_format(path) == 'raw'


def test_a_qcow_version_1_header_is_left_to_qemu_img(tmp_path):
    # The inspector takes it for qcow2; qemu's qcow2 driver would refuse it.
    path = str(tmp_path / 'disk')
    with open(path, 'wb') as f:
        f.write(b'QFI\xfb' + (1).to_bytes(4, 'big') + bytes(504))
    assert sizes.disk_format(path) is None
    qcow2 = str(tmp_path / 'disk.qcow2')
    _qemu_img('create', '-q', '-f', 'qcow2', '-o', 'compat=0.10', qcow2,
              '1G')
    assert sizes.disk_format(qcow2) == 'qcow2'


def test_a_file_that_changed_is_read_again(tmp_path):
    path = str(tmp_path / 'disk')
    _qemu_img('create', '-q', '-f', 'qcow2', path, '1G')
    assert sizes.virtual_size(path) == 1024 * MiB
    _qemu_img('resize', '-q', path, '2G')
    assert sizes.virtual_size(path) == 2048 * MiB
    os.unlink(path)
    with open(path, 'wb') as f:
        f.truncate(5 * MiB)
    assert sizes.virtual_size(path) == 5 * MiB


def test_a_missing_file_is_left_to_qemu_img(tmp_path):
    # Stock's qemu-img info raises DiskNotFound for it, which callers know.
    assert sizes.virtual_size(str(tmp_path / 'nothing')) is None


def test_the_backends_say_a_missing_disk_as_stock_says_it(tmp_path):
    from nova import exception as nova_exception
    from nova.virt.libvirt import imagebackend

    from nova_imgtype.virt.libvirt import qcow2
    image = qcow2.Qcow2.__new__(qcow2.Qcow2)
    missing = str(tmp_path / 'nothing')
    with pytest.raises(nova_exception.DiskNotFound):
        image.get_disk_size(missing)
    with pytest.raises(nova_exception.DiskNotFound):
        imagebackend.Qcow2.get_disk_size(image, missing)


def test_a_block_device_is_as_long_as_its_end(tmp_path):
    # A linked template is a block device: its length is not st_size.
    backing = tmp_path / 'backing'
    with open(backing, 'wb') as f:
        f.truncate(24 * MiB)
    loop = subprocess.run(['losetup', '--find', '--show', str(backing)],
                          check=True, capture_output=True,
                          text=True).stdout.strip()
    try:
        link = tmp_path / 'template'
        link.symlink_to(loop)
        assert os.path.getsize(link) == 0
        assert sizes.virtual_size(str(link)) == 24 * MiB
    finally:
        subprocess.run(['losetup', '--detach', loop], check=True)


def test_a_broken_qcow2_header_is_left_to_qemu_img(tmp_path):
    # qcow2's magic and nothing a qcow2 header needs: qemu-img says what
    # is wrong with it, not a size read here.
    path = tmp_path / 'broken'
    path.write_bytes(b'QFI\xfb' + bytes(8))
    assert sizes.virtual_size(str(path)) is None


def test_sizes_kept_are_bounded_the_least_recently_used_dropped(
        tmp_path, monkeypatch):
    assert sizes._known.maxsize == sizes.KEEP
    monkeypatch.setattr(sizes, '_known', cachetools.LRUCache(maxsize=3))

    def size(i):
        path = tmp_path / ('d%d' % i)
        if not path.exists():
            path.write_bytes(bytes(512 * (i + 1)))
        assert sizes.virtual_size(str(path)) == 512 * (i + 1)

    for i in range(3):
        size(i)
    size(0)             # d0 read again: d1 is now the least recently used
    size(3)
    size(4)
    assert set(sizes._known) == {str(tmp_path / ('d%d' % i))
                                 for i in (0, 3, 4)}


def _counting_inspections(monkeypatch):
    from nova.virt import images
    calls = []
    real = images.get_image_format

    def counted(path):
        calls.append(path)
        return real(path)

    monkeypatch.setattr(images, 'get_image_format', counted)
    # What Nova's privsep utime does, without a privsep daemon.
    monkeypatch.setattr(sizes.imagebackend, '_update_utime_ignore_eacces',
                        lambda path: os.utime(path, None))
    return calls


def test_a_template_is_checked_once_while_it_is_the_same(tmp_path,
                                                         monkeypatch):
    calls = _counting_inspections(monkeypatch)
    base = str(tmp_path / 'base')
    _qemu_img('create', '-q', '-f', 'qcow2', base, '1G')
    first = sizes.checked_template(base)
    again = sizes.checked_template(base)
    assert calls == [base]
    assert again is first and str(again) == 'qcow2'
    # Its size, read by that check, reads nothing either.
    assert sizes.virtual_size(base) == 1024 * MiB
    assert calls == [base]


def test_a_template_replaced_by_a_bad_one_is_refused(tmp_path, monkeypatch):
    from nova import exception
    calls = _counting_inspections(monkeypatch)
    base = str(tmp_path / 'base')
    _qemu_img('create', '-q', '-f', 'qcow2', base, '1G')
    sizes.checked_template(base)
    # A qcow2 backed by another file, renamed over the checked one (as a
    # download is put in place): another inode, checked again, refused.
    bad = str(tmp_path / 'bad')
    _qemu_img('create', '-q', '-f', 'qcow2', '-F', 'raw', '-b', '/etc/hosts',
              bad, '1G')
    os.replace(bad, base)
    with pytest.raises(exception.InvalidDiskInfo):
        sizes.checked_template(base)
    # A failed check is not kept: refused again, read again.
    with pytest.raises(exception.InvalidDiskInfo):
        sizes.checked_template(base)
    assert calls == [base] * 3


def test_a_template_rewritten_in_place_is_checked_again(tmp_path,
                                                        monkeypatch):
    from nova import exception
    calls = _counting_inspections(monkeypatch)
    base = str(tmp_path / 'base')
    _qemu_img('create', '-q', '-f', 'qcow2', base, '1G')
    sizes.checked_template(base)
    st = os.stat(base)
    # The same inode and length, its header given a backing file (its
    # modification time set apart from the check's, which a coarse clock
    # could otherwise give both).
    _qemu_img('rebase', '-u', '-f', 'qcow2', '-F', 'raw', '-b', '/etc/hosts',
              base)
    os.utime(base, ns=(st.st_atime_ns, st.st_mtime_ns - 10 ** 9))
    assert os.stat(base).st_ino == st.st_ino
    with pytest.raises(exception.InvalidDiskInfo):
        sizes.checked_template(base)
    assert calls == [base, base]


def test_a_block_device_template_is_checked_every_time(monkeypatch):
    calls = _counting_inspections(monkeypatch)
    # /dev/zero: a character device, not a regular file (a linked
    # template is a block device): never taken as unchanged. (Its times
    # are left as they are.)
    monkeypatch.setattr(sizes.imagebackend, '_update_utime_ignore_eacces',
                        lambda path: None)
    for _ in range(2):
        sizes.checked_template('/dev/zero')
    assert calls == ['/dev/zero', '/dev/zero']


@pytest.fixture
def flat_disk(conf, tmp_path, monkeypatch):
    """A Flat backend's disk path (being made) and the backend; the
    qemu-img info runs it makes are counted."""
    from nova.virt import images

    from nova_imgtype.virt.libvirt import flat
    conf.config(lock_path=str(tmp_path / 'locks'), group='oslo_concurrency')
    (tmp_path / 'inst').mkdir()
    path = str(tmp_path / 'inst' / 'disk')
    image = flat.Flat(path=path)
    # Within create_image, which makes the disk: its bytes are Nova's.
    image._making = True
    runs = []
    info = images.qemu_img_info
    monkeypatch.setattr(images, 'qemu_img_info',
                        lambda *a, **k: runs.append(a) or info(*a, **k))
    return path, image, runs


@pytest.mark.parametrize('fmt', ['raw', 'qcow2'])
def test_flat_reads_a_new_disks_format_here(flat_disk, fmt):
    path, image, runs = flat_disk
    _qemu_img('create', '-q', '-f', fmt, path, '1G')
    image.correct_format()
    assert image.driver_format == fmt
    assert runs == []
    # Kept in disk.info, as stock keeps it.
    with open(image.disk_info_path) as f:
        assert json.load(f) == {path: fmt}


def test_flat_leaves_other_formats_to_qemu_img(flat_disk):
    path, image, runs = flat_disk
    _qemu_img('create', '-q', '-f', 'vmdk', path, '1G')
    image.correct_format()
    assert image.driver_format == 'vmdk'
    assert len(runs) == 1


def test_without_deep_inspection_flat_asks_qemu_img_as_stock(conf,
                                                             flat_disk):
    # The operator turned Nova's inspector off: qemu-img decides.
    conf.config(disable_deep_image_inspection=True, group='workarounds')
    path, image, runs = flat_disk
    _qemu_img('create', '-q', '-f', 'parallels', path, '1G')
    image.correct_format()
    assert image.driver_format == 'parallels'
    assert len(runs) == 1


def test_flat_reads_no_format_from_a_disk_it_is_not_making(flat_disk):
    # An existing disk that neither the record nor disk.info names: its
    # bytes are the guest's (issue 54): the backend's raw, nothing read.
    path, image, runs = flat_disk
    image._making = False
    _qemu_img('create', '-q', '-f', 'qcow2', path, '1G')
    image.correct_format()
    assert image.driver_format == 'raw'
    assert runs == []
