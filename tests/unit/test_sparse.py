"""Copies of a file's data alone (:mod:`nova_imgtype.virt.libvirt.sparse`),
on real files of the local filesystem."""

import os

import pytest

from nova_imgtype.virt.libvirt import sparse
from tests.files import sparse_file

MiB = 1024 * 1024


def test_extents_are_where_the_data_is(tmp_path):
    path = tmp_path / 'f'
    sparse_file(path, 16 * MiB, [(MiB, b'a' * MiB), (8 * MiB, b'b' * MiB)])
    with open(path, 'rb') as f:
        found = sparse.extents(f.fileno(), 16 * MiB)
    # Filesystems report extents in blocks; each covers its data.
    assert len(found) == 2
    assert found[0][0] <= MiB < 2 * MiB <= found[0][1] <= 8 * MiB
    assert found[1][0] <= 8 * MiB < 9 * MiB <= found[1][1] <= 16 * MiB


def test_sections_walk_the_file_as_sparse_send_all_does(tmp_path):
    """libvirt's sparseSendAll asks for the section at the offset, then
    reads or skips it: the walk covers the file once, its data as data."""
    path = tmp_path / 'f'
    sparse_file(path, 16 * MiB, [(MiB, b'a' * MiB), (8 * MiB, b'b' * MiB)])
    walked = []
    with open(path, 'rb') as f:
        fd = f.fileno()
        while True:
            in_data, length = sparse.section(fd, 16 * MiB)
            if length == 0:
                break
            assert os.lseek(fd, 0, os.SEEK_CUR) == sum(n for _d, n in walked)
            walked.append((in_data, length))
            os.lseek(fd, length, os.SEEK_CUR)
    assert sum(n for _d, n in walked) == 16 * MiB
    data = [n for d, n in walked if d]
    assert MiB * 2 <= sum(data) < 16 * MiB      # blocks around the data
    assert walked[0][0] is False and walked[-1][0] is False


def test_copy_data_copies_what_is_there_and_writes_no_hole(tmp_path):
    src, dst = tmp_path / 'src', tmp_path / 'dst'
    sparse_file(src, 32 * MiB, [(0, b'head'), (20 * MiB, os.urandom(MiB))])
    dst.write_bytes(b'')
    os.truncate(dst, 64 * MiB)
    copied = sparse.copy_data(str(src), str(dst))
    assert copied < 4 * MiB
    with open(dst, 'rb') as f:
        assert f.read(32 * MiB) == src.read_bytes()
        assert f.read() == bytes(32 * MiB)
    assert os.stat(dst).st_blocks * 512 < 4 * MiB


def test_a_file_of_holes_copies_nothing(tmp_path):
    src, dst = tmp_path / 'src', tmp_path / 'dst'
    sparse_file(src, 8 * MiB, [])
    dst.write_bytes(b'')
    os.truncate(dst, 8 * MiB)
    assert sparse.copy_data(str(src), str(dst)) == 0


def test_a_missing_destination_is_an_error(tmp_path):
    src = tmp_path / 'src'
    src.write_bytes(b'x')
    with pytest.raises(FileNotFoundError):
        sparse.copy_data(str(src), str(tmp_path / 'nowhere'))


def test_only_regular_files_are_copied_here(tmp_path):
    # A block device (a linked template) has no length in st_size and no
    # SEEK_DATA: it is left to libvirt, and refused here rather than read
    # as empty.
    assert sparse.is_regular_file(__file__)
    assert not sparse.is_regular_file('/dev/null')
    assert not sparse.is_regular_file(str(tmp_path / 'nothing'))
    dst = tmp_path / 'dst'
    dst.write_bytes(b'')
    with pytest.raises(OSError, match='not a regular file'):
        sparse.copy_data('/dev/zero', str(dst))
