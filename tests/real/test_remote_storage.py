"""Real: files on "another host" through its libvirtd
(:mod:`nova_imgtype.virt.libvirt.remote_storage`), without SSH.

The other host is the session's throwaway libvirtd (every host name maps
to its URI); the files are real, made and read by this process.
"""

import os
import signal
import subprocess
import threading

import libvirt
import pytest

from nova_imgtype import exception
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import remote_storage
from nova_imgtype_testing import libvirtd as real
from tests.files import sparse_file

MiB = 1024 * 1024


@pytest.fixture
def remote(libvirt_uri):
    hosts = []

    def uri_for(host):
        hosts.append(host)
        return libvirt_uri

    fs = remote_storage.LibvirtRemoteFilesystem(uri_for)
    fs.hosts = hosts
    return fs


def test_directories_and_files(remote, tmp_path):
    target = tmp_path / 'instances' / 'uuid'
    remote.create_dir('dest', str(target))
    assert target.is_dir()
    remote.create_file('dest', str(target / 'x.tmp'))
    assert (target / 'x.tmp').exists()
    remote.remove_file('dest', str(target / 'x.tmp'))
    assert not (target / 'x.tmp').exists()
    (target / 'disk.info').write_text('{}')
    (target / 'console.log').write_text('')
    remote.remove_dir('dest', str(target))
    assert not target.exists()
    # rm -rf of nothing.
    remote.remove_dir('dest', str(target))
    assert remote.hosts == ['dest'] * 5


def test_no_pool_is_left_behind(remote, libvirt_conn, tmp_path):
    target = tmp_path / 'd'
    remote.create_dir('dest', str(target))
    remote.create_file('dest', str(target / 'f'))
    remote.remove_file('dest', str(target / 'f'))
    remote.remove_dir('dest', str(target))
    assert not [p for p in libvirt_conn.listAllStoragePools(0)
                if p.name().startswith('nova-imgtype-remote-')]


def test_a_sparse_file_is_copied_with_its_holes(remote, tmp_path):
    src = tmp_path / 'src'
    size = 64 * MiB
    sparse_file(src, size, [(0, b'head' * 1024),
                            (40 * MiB, b'middle' * 100000),
                            (size - 4096, b'z' * 4096)])
    dest_dir = tmp_path / 'dest'
    dest_dir.mkdir()
    remote.copy_file(str(src), 'dest:%s' % (dest_dir / 'disk'))
    copied = dest_dir / 'disk'
    assert copied.read_bytes() == src.read_bytes()
    # Holes stayed holes: a few MiB allocated, not 64.
    assert os.stat(copied).st_blocks * 512 < 4 * MiB


def test_fill_writes_into_the_empty_file_the_destination_made(remote,
                                                               tmp_path):
    # A config drive on its way: the destination made an empty file of its
    # size (as it makes every arriving disk); the source's bytes go in.
    src = tmp_path / 'disk.config'
    sparse_file(src, 8 * MiB, [(32 * 1024, b'CD001' * 1000),
                               (6 * MiB, b'data' * 5000)])
    dest_dir = tmp_path / 'dest'
    dest_dir.mkdir()
    made = dest_dir / 'uuid_disk.config'
    made.write_bytes(b'')
    os.truncate(made, 8 * MiB)
    inode = os.stat(made).st_ino
    remote.fill(str(src), 'dest', str(made))
    assert made.read_bytes() == src.read_bytes()
    # The file it made, written in place; its holes still holes.
    assert os.stat(made).st_ino == inode
    assert os.stat(made).st_blocks * 512 < 2 * MiB


def test_fill_without_the_destinations_file_is_an_error(remote, tmp_path):
    src = tmp_path / 'disk.config'
    src.write_bytes(b'x' * 4096)
    with pytest.raises(libvirt.libvirtError):
        remote.fill(str(src), 'dest', str(tmp_path / 'missing'))
    assert not (tmp_path / 'missing').exists()


def test_a_qcow2_overlay_keeps_its_backing_file(remote, tmp_path):
    base = tmp_path / 'base.qcow2'
    real.make_image(str(base), 'qcow2', 16 * MiB)
    overlay = tmp_path / 'overlay'
    real.qemu_img('create', '-q', '-f', 'qcow2', '-F', 'qcow2', '-b',
                  str(base), str(overlay))
    dest_dir = tmp_path / 'dest'
    dest_dir.mkdir()
    remote.upload(str(overlay), 'dest', str(dest_dir / 'disk'))
    info = real.qemu_img_info(str(dest_dir / 'disk'))
    assert info['format'] == 'qcow2'
    assert info['backing-filename'] == str(base)
    assert (dest_dir / 'disk').read_bytes() == overlay.read_bytes()


def test_into_the_directory_of_a_defined_pool(remote, libvirt_conn,
                                              tmp_path):
    disks = tmp_path / 'disks'
    disks.mkdir()
    pool = libvirt_conn.storagePoolCreateXML(
        "<pool type='dir'><name>nova-test-remote-disks</name><target>"
        "<path>%s</path></target></pool>" % disks, 0)
    try:
        src = tmp_path / 'vol'
        sparse_file(src, MiB, [(0, b'data')])
        remote.upload(str(src), 'dest', str(disks / 'uuid_disk'))
        assert 'uuid_disk' in pool.listVolumes()
        assert (disks / 'uuid_disk').read_bytes() == src.read_bytes()
    finally:
        pool.destroy()


def test_a_failed_copy_leaves_nothing(remote, tmp_path, monkeypatch):
    src = tmp_path / 'src'
    sparse_file(src, MiB, [(0, b'data')])
    dest_dir = tmp_path / 'dest'
    dest_dir.mkdir()

    def broken(stream, f, size, what):
        stream.send(b'x' * 512)
        raise OSError('the source went away')

    monkeypatch.setattr(remote_storage, '_send_sparse', broken)
    with pytest.raises(OSError, match='went away'):
        remote.upload(str(src), 'dest', str(dest_dir / 'disk'))
    assert os.listdir(dest_dir) == []


def test_a_missing_directory_is_an_error(remote, tmp_path):
    src = tmp_path / 'src'
    sparse_file(src, MiB, [(0, b'data')])
    with pytest.raises(libvirt.libvirtError):
        remote.upload(str(src), 'dest', str(tmp_path / 'nowhere' / 'disk'))


def _dense(path, size):
    with open(path, 'wb') as f:
        f.write(os.urandom(size))


@pytest.fixture
def small_disk(tmp_path, libvirt_daemon):
    """A 2 MiB filesystem, the destination's pool directory, mounted where
    its libvirtd sees it (its own mount namespace when it has one); yields
    (the directory, a function listing it as the daemon sees it)."""
    where = tmp_path / 'small'
    where.mkdir()
    pid = open(libvirt_daemon.pidfile).read().strip()
    ns = ['nsenter', '-t', pid, '-m', '--'] if libvirt_daemon.mnt_ns else []
    subprocess.run([*ns, 'mount', '-t', 'tmpfs', '-o', 'size=2m', 'tmpfs',
                    str(where)], check=True)

    def listing():
        out = subprocess.run([*ns, 'ls', '-A', str(where)], check=True,
                             capture_output=True, text=True).stdout
        return out.split()

    yield where, listing
    subprocess.run([*ns, 'umount', str(where)], check=True)


def test_a_full_destination_fails_the_copy_and_leaves_nothing(
        remote, tmp_path, small_disk):
    where, listing = small_disk
    first, second = tmp_path / 'first', tmp_path / 'second'
    _dense(first, 512 * 1024)
    _dense(second, 8 * MiB)
    with pytest.raises(exception.DiskCopyFailed) as e:
        remote_storage.send(remote, 'dest', [
            (str(first), str(where / 'disk'), False),
            (str(second), str(where / 'disk.local'), False)])
    assert str(second) in str(e.value) and 'dest:' in str(e.value)
    # The first copy, made, is removed too.
    assert listing() == []


def test_the_connection_lost_mid_stream(remote, tmp_path, monkeypatch):
    first, second = tmp_path / 'first', tmp_path / 'second'
    _dense(first, MiB)
    _dense(second, 4 * MiB)
    dest = tmp_path / 'dest'
    dest.mkdir()
    real_send = remote_storage._send_sparse

    def cut(stream, f, size, what):
        if f.name == str(second):
            stream.send(f.read(MiB))
            raise libvirt.libvirtError('End of file while reading data: '
                                       'Input/output error')
        return real_send(stream, f, size, what)

    monkeypatch.setattr(remote_storage, '_send_sparse', cut)
    with pytest.raises(exception.DiskCopyFailed, match='End of file'):
        remote_storage.send(remote, 'dest', [
            (str(first), str(dest / 'disk'), False),
            (str(second), str(dest / 'disk.local'), False)])
    assert os.listdir(dest) == []


def test_the_destination_libvirtd_killed_mid_copy_then_a_retry(tmp_path,
                                                               monkeypatch):
    """A libvirtd of its own, killed (SIGKILL) in the middle of the stream:
    the copy fails naming the file; with the daemon started again, the same
    copy succeeds (over what the killed one left)."""
    src = tmp_path / 'src'
    _dense(src, 16 * MiB)
    dest = tmp_path / 'dest'
    dest.mkdir()
    daemons = [real.start_libvirtd('system')]
    remote = remote_storage.LibvirtRemoteFilesystem(
        lambda host: daemons[-1].uri)
    real_send = remote_storage._send_sparse

    def kill_after_a_chunk(stream, f, size, what):
        stream.send(f.read(MiB))
        with open(daemons[-1].pidfile) as p:
            os.kill(int(p.read()), signal.SIGKILL)
        return real_send(stream, f, size, what)

    try:
        monkeypatch.setattr(remote_storage, '_send_sparse',
                            kill_after_a_chunk)
        with pytest.raises(exception.DiskCopyFailed, match=str(src)):
            remote_storage.send(remote, 'dest',
                                [(str(src), str(dest / 'disk'), False)])
        daemons[-1].stop()
        # Nothing could remove it: the destination was gone.
        assert os.path.getsize(dest / 'disk') == 16 * MiB
        monkeypatch.setattr(remote_storage, '_send_sparse', real_send)
        daemons.append(real.start_libvirtd('system'))
        # What the killed daemon left of the file is replaced.
        remote_storage.send(remote, 'dest',
                            [(str(src), str(dest / 'disk'), False)])
        assert (dest / 'disk').read_bytes() == src.read_bytes()
    finally:
        for d in daemons:
            d.stop()


def _other_request(libvirt_conn, tmp_path):
    """Another request's transient pool, as :func:`remote_storage._pool_at`
    makes them, over a directory of its own."""
    other = tmp_path / 'other-instance'
    other.mkdir()
    return libvirt_conn.storagePoolCreateXML(
        remote_storage._pool_xml(str(other)), 0)


def test_another_copy_ending_while_the_pools_are_listed(
        remote, libvirt_conn, tmp_path, monkeypatch):
    # Two cold moves to one host at once, each into its own instance
    # directory: the other one's transient pool, listed here, is destroyed
    # by its maker before this copy reads its target. That pool is not this
    # copy's business; the copy goes on.
    other = _other_request(libvirt_conn, tmp_path)
    real_open = libvirt.open

    def open_(uri):
        conn = real_open(uri)
        listed = conn.listAllStoragePools

        def list_then_the_other_ends(flags=0):
            pools = listed(flags)
            try:
                other.destroy()
            except libvirt.libvirtError:
                pass  # destroyed at an earlier listing
            return pools

        conn.listAllStoragePools = list_then_the_other_ends
        return conn

    monkeypatch.setattr(remote_storage.libvirt, 'open', open_)
    src = tmp_path / 'src'
    sparse_file(src, MiB, [(0, b'data')])
    dest = tmp_path / 'dest'
    dest.mkdir()
    remote.upload(str(src), 'dest', str(dest / 'disk.eph0'))
    assert (dest / 'disk.eph0').read_bytes() == src.read_bytes()


def test_two_copies_into_one_directory_at_once(remote, libvirt_conn,
                                               tmp_path, monkeypatch):
    # Two requests of this process into one directory: the first one's
    # transient pool must not be destroyed under the second one.
    dest = tmp_path / 'dest'
    dest.mkdir()
    first, second = tmp_path / 'first', tmp_path / 'second'
    sparse_file(first, MiB, [(0, b'first')])
    sparse_file(second, MiB, [(0, b'second')])
    first_sending = threading.Event()
    second_sending = threading.Event()
    first_done = threading.Event()
    real_send = remote_storage._send_sparse

    def send(stream, f, size, what):
        if f.name == str(first):
            first_sending.set()
            # The second one starts meanwhile (unless it must wait).
            second_sending.wait(2)
        else:
            second_sending.set()
            first_done.wait(10)
        return real_send(stream, f, size, what)

    monkeypatch.setattr(remote_storage, '_send_sparse', send)
    errors = []

    def copy(src, name, done=None):
        try:
            remote.upload(str(src), 'dest', str(dest / name))
        except Exception as e:
            errors.append(e)
        finally:
            if done is not None:
                done.set()

    one = threading.Thread(target=copy, args=(first, 'disk', first_done))
    one.start()
    assert first_sending.wait(10)
    two = threading.Thread(target=copy, args=(second, 'disk.eph0'))
    two.start()
    one.join(30)
    two.join(30)
    assert errors == []
    assert (dest / 'disk').read_bytes() == first.read_bytes()
    assert (dest / 'disk.eph0').read_bytes() == second.read_bytes()
    assert not [p for p in libvirt_conn.listAllStoragePools(0)
                if pool_specs.pool_target(p) == str(dest)]


def test_copies_into_a_defined_pool_run_at_once(remote, libvirt_conn,
                                                tmp_path, monkeypatch):
    # The destination's disks pool outlives every copy: two copies into it
    # (two resizes of pool instances to one host) do not wait for each
    # other, as copies through one transient pool must.
    disks = tmp_path / 'disks'
    disks.mkdir()
    pool = libvirt_conn.storagePoolDefineXML(
        "<pool type='dir'><name>nova-test-remote-defined</name><target>"
        "<path>%s</path></target></pool>" % disks, 0)
    pool.create(0)
    first, second = tmp_path / 'first', tmp_path / 'second'
    sparse_file(first, MiB, [(0, b'first')])
    sparse_file(second, MiB, [(0, b'second')])
    both_sending = threading.Barrier(2, timeout=10)
    real_send = remote_storage._send_sparse

    def send(stream, f, size, what):
        both_sending.wait()
        return real_send(stream, f, size, what)

    monkeypatch.setattr(remote_storage, '_send_sparse', send)
    errors = []

    def copy(src, name):
        try:
            remote.upload(str(src), 'dest', str(disks / name))
        except Exception as e:
            errors.append(e)

    try:
        threads = [threading.Thread(target=copy, args=(src, name))
                   for src, name in ((first, 'a_disk'), (second, 'b_disk'))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert errors == []
        assert (disks / 'a_disk').read_bytes() == first.read_bytes()
        assert (disks / 'b_disk').read_bytes() == second.read_bytes()
    finally:
        pool.destroy()
        pool.undefine()
