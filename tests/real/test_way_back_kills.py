"""Real: ``prepare-uninstall --apply`` killed (SIGKILL, in a process of its
own) at steps of the way back of a pool instance whose raw disks become
qcow2 (issue 54, defect 4), then run again: it finishes the move, and
the record, ``disk.info`` and the files agree, every disk with its data.

Real: the kill, the throwaway libvirtd's dir pool, qemu-img, qemu-io. The
record the killed process saves goes to a file (no Nova DB runs here);
the next run reads it, as the command reads it from the DB. Every step is
killed in tests/unit/test_way_back_kills.py.
"""

import json
import os
import signal
import subprocess
import sys
import uuid
from unittest import mock

import pytest
from nova import objects

from nova_imgtype.cmd import prepare_uninstall
from nova_imgtype.virt.libvirt import pool_specs
from nova_imgtype.virt.libvirt import way_back as way_back_mod
from tests.real.test_libvirt_storage import pool_driver  # noqa: F401
from tests.real.test_native_images import conf  # noqa: F401
from tests.real.test_native_images import driver  # noqa: F401
from tests.real.test_way_back import _reads
from tests.real.test_way_back import _write

SCRIPT = os.path.join(os.path.dirname(__file__), 'scripts',
                      'way_back_then_die.py')
NAMES = ('disk', 'disk.local', 'disk.config')
SIZE = 4 * 1024 * 1024


@pytest.mark.parametrize('die_at', [
    'save-1',       # the move recorded, nothing moved
    'rename-1',     # one volume out of the pool
    'replace-0',    # every volume out, disk.info not written
    'convert-0',    # half way through the first qcow2 copy
    'rename-3',     # the first conversion recorded, its copy not renamed
    'save-4',       # every disk converted, the last record not saved
])
def test_killed_then_run_again(pool_driver, conf, libvirt_uri,  # noqa: F811
                               libvirt_conn, tmp_path, die_at):
    # The command's node: stock's driver will use qcow2 (the raw disks are
    # converted), the node of the killed run.
    conf.config(host='host1')
    conf.config(images_type='qcow2', group='libvirt')
    instances_path = pool_driver._resolver._conf.instances_path
    pools = pool_driver._pools
    disks = pools.get(pool_specs.DISKS_POOL)
    inst_uuid = str(uuid.uuid4())
    sysmeta = {'imgtype_backend': 'flat', 'imgtype_native_formats': 'raw',
               'imgtype_storage': 'pools',
               'imgtype_pool': pool_specs.DISKS_POOL}
    for pattern, name in enumerate(NAMES, start=0x41):
        vol = pools.create_empty(disks, pool_specs.volume_name(
            inst_uuid, name), 'raw', SIZE)
        _write(vol.path(), 'raw', pattern)
    record = str(tmp_path / 'record.json')
    proc = subprocess.run(
        [sys.executable, SCRIPT, libvirt_uri, instances_path, inst_uuid,
         json.dumps(sysmeta), die_at, record],
        capture_output=True, text=True, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    with open(record) as f:
        saved = json.load(f)

    inst = objects.Instance(uuid=inst_uuid, display_name='vm',
                            vm_state='stopped', task_state=None,
                            system_metadata=saved)
    back = prepare_uninstall.way_back(conf.conf, lambda: libvirt_conn)
    with mock.patch.object(objects.Instance, 'save'):
        dry = back.review(inst, stopped=True, apply=False)
        assert dry.outcome == way_back_mod.TO_MOVE, dry
        assert 'interrupted' in dry.detail
        found = back.review(inst, stopped=True, apply=True)
        assert found.outcome == way_back_mod.MOVED, found
        assert back.review(inst, stopped=True, apply=False).outcome == (
            way_back_mod.READY)

    decision = pool_driver._resolver.recorded(inst)
    assert (decision.backend, decision.storage) == ('qcow2', 'legacy')
    assert 'imgtype_way_back_move' not in inst.system_metadata
    pools.refresh(pool_specs.DISKS_POOL)
    assert not [v for v in pools.get(pool_specs.DISKS_POOL).listVolumes()
                if v.startswith(inst_uuid)]
    inst_dir = os.path.join(instances_path, inst_uuid)
    assert sorted(os.listdir(inst_dir)) == sorted((*NAMES, 'disk.info'))
    with open(os.path.join(inst_dir, 'disk.info')) as f:
        listed = json.load(f)
    formats = {'disk': 'qcow2', 'disk.local': 'qcow2', 'disk.config': 'raw'}
    assert listed == {os.path.join(inst_dir, n): fmt
                      for n, fmt in formats.items()}
    for pattern, name in enumerate(NAMES, start=0x41):
        path = os.path.join(inst_dir, name)
        assert decision.volume_format(name) == formats[name]
        assert _reads(path, formats[name], pattern), name
        info = json.loads(subprocess.run(
            ['qemu-img', 'info', '-f', formats[name], '--output', 'json',
             path], capture_output=True, text=True, check=True).stdout)
        assert 'backing-filename' not in info
