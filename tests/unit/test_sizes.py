"""Virtual sizes read in this process
(:mod:`nova_imgtype.virt.libvirt.sizes`), of real files made by qemu-img."""

import json
import os
import subprocess

import pytest

from nova_imgtype.virt.libvirt import sizes

MiB = 1024 * 1024


def _qemu_img(*args):
    subprocess.run(('qemu-img',) + args, check=True, capture_output=True)


def _info_size(path):
    out = subprocess.run(['qemu-img', 'info', '--output=json', path],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)['virtual-size']


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


def test_sizes_kept_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(sizes, 'KEEP', 3)
    for i in range(5):
        path = tmp_path / ('d%d' % i)
        path.write_bytes(bytes(512 * (i + 1)))
        assert sizes.virtual_size(str(path)) == 512 * (i + 1)
    kept = [p for p in sizes._known if p.startswith(str(tmp_path))]
    assert kept == [str(tmp_path / ('d%d' % i)) for i in (2, 3, 4)]


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
