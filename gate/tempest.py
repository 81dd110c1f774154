"""Tempest against the gate cloud: resources, tempest.conf, run, results.

Given the ``cloud.json`` of a running gate cloud (``gate.cloud``):

1. :func:`prepare`: the bootable test image (:mod:`gate.image`) uploaded
   to Glance as qcow2 (``image_ref``) and raw (``image_ref_alt``: a
   rebuild changes the format), a vhdx of it, an image in a format no
   compute supports (:func:`gate.tempest_conf.unsupported_format`), and
   two flavors; made once per cloud (found again by name), their ids in
   ``<base>/tempest/resources.json``;
2. :func:`run`: a tempest workspace ``<base>/tempest/<label>`` with a
   tempest.conf (:mod:`gate.tempest_conf`), then ``tempest run --subunit
   --concurrency N --include-list`` of ``gate/tempest-selection.txt``,
   progress printed per test, the stream kept in ``results.subunit``;
3. per-test results (:mod:`gate.tempest_parse`) in
   ``<base>/tempest/<label>/results.json``, the path printed on stdout.

CLI::

    python -m gate.tempest --cloud <base>/cloud.json --label stock|plugin

The computes' driver is whatever the cloud runs (``gate.cloud computes
--driver ...``); ``--label`` only names the run. The project's scenarios
(``[imgtype-feature-enabled]image_type_scheduling``) are enabled when the
computes' driver is the plugin's (``--imgtype-scheduling on|off`` to
force).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import IO
from typing import Any

from gate import image
from gate import tempest_conf
from gate import tempest_parse

HERE = os.path.dirname(os.path.abspath(__file__))
SELECTION = os.path.join(HERE, 'tempest-selection.txt')
DEFAULT_TIMEOUT = 1800.0
#: tempest workers. The selection's ~590 tests mostly wait on the API
#: (servers building, migrating, deleting), not on the CPU: six workers on
#: the gate's 2 cores run it in about 7 minutes a driver, two in about 13.
CONCURRENCY = 6

#: name: (ram MiB, vcpus, root disk GiB, ephemeral GiB, swap MiB).
#: tempest: flavor_ref, _alt (the first two); the move matrix: the others.
FLAVORS = {'gate.tiny': (128, 1, 1, 0, 0), 'gate.small': (192, 1, 2, 0, 0),
           'gate.disks': (128, 1, 1, 1, 16),
           'gate.disks.big': (128, 1, 2, 1, 16)}
IMAGES = {'qcow2': 'gate-boot-qcow2', 'raw': 'gate-boot-raw',
          'vhdx': 'gate-boot-vhdx'}
UNSUPPORTED_NAME = 'gate-unsupported-%s'


def load_cloud(path: str) -> dict[str, Any]:
    with open(path) as f:
        cloud: dict[str, Any] = json.load(f)
    return cloud


def connect(cloud: Mapping[str, Any]) -> Any:
    """An openstacksdk connection as the cloud's admin."""
    import openstack
    admin = cloud['admin']
    return openstack.connect(
        auth_url=cloud['auth_url'], region_name=cloud.get('region'),
        username=admin['username'], password=admin['password'],
        project_name=admin['project_name'],
        user_domain_name=admin['user_domain_name'],
        project_domain_name=admin['project_domain_name'],
        identity_api_version='3')


def _compute_confs(cloud: Mapping[str, Any]) -> list[tuple[str, Any]]:
    return [(c['host'], tempest_conf.read_oslo_conf(c['config']))
            for c in cloud.get('computes', []) if c.get('config')]


def _image_files(workdir: str, unsupported: str) -> dict[str, str]:
    """The image files (made once): qcow2, raw, vhdx, and the unsupported
    one (a real file for formats qemu-img writes, else zeroes)."""
    os.makedirs(workdir, exist_ok=True)
    files = {}
    for fmt in ('qcow2', 'raw', 'vhdx'):
        path = os.path.join(workdir, 'boot.' + fmt)
        if not os.path.exists(path):
            image.make_image(path + '.tmp', fmt)
            os.rename(path + '.tmp', path)
        files[fmt] = path
    path = os.path.join(workdir, 'unsupported.' + unsupported)
    if not os.path.exists(path):
        if unsupported in ('vhdx', 'vhd', 'vmdk', 'vdi'):
            image.make_image(path, 'vpc' if unsupported == 'vhd'
                             else unsupported)
        else:
            # ploop & co.: content Glance cannot inspect (zeroes) passes
            # its format check; nothing boots it anyway.
            with open(path, 'wb') as f:
                f.truncate(image.MiB)
    files['unsupported'] = path
    return files


def _ensure_image(conn: Any, name: str, path: str, disk_format: str) -> str:
    found = conn.image.find_image(name, ignore_missing=True)
    if found is not None and found.status == 'active':
        return str(found.id)
    if found is not None:
        conn.image.delete_image(found, ignore_missing=True)
    created = conn.image.create_image(
        name=name, filename=path, disk_format=disk_format,
        container_format='bare', visibility='public', wait=True,
        timeout=300, allow_duplicates=True)
    return str(created.id)


def _ensure_flavor(conn: Any, name: str, ram: int, vcpus: int,
                   disk: int, ephemeral: int, swap: int) -> str:
    found = conn.compute.find_flavor(name, ignore_missing=True)
    if found is not None:
        return str(found.id)
    return str(conn.compute.create_flavor(
        name=name, ram=ram, vcpus=vcpus, disk=disk, ephemeral=ephemeral,
        swap=swap, is_public=True).id)


def prepare(cloud: Mapping[str, Any]) -> dict[str, Any]:
    """Images and flavors for tempest (idempotent); their ids, also
    written to ``<base>/tempest/resources.json``."""
    base = os.path.join(cloud['base'], 'tempest')
    confs = _compute_confs(cloud)
    unsupported = tempest_conf.unsupported_format(c for _, c in confs)
    files = _image_files(os.path.join(base, 'images'), unsupported)
    conn = connect(cloud)
    images = {fmt: _ensure_image(conn, name, files[fmt], fmt)
              for fmt, name in IMAGES.items()}
    images[unsupported] = _ensure_image(
        conn, UNSUPPORTED_NAME % unsupported, files['unsupported'],
        unsupported)
    flavors = {name: _ensure_flavor(conn, name, *spec)
               for name, spec in FLAVORS.items()}
    resources = {
        'images': images, 'image_names': {
            **IMAGES, unsupported: UNSUPPORTED_NAME % unsupported},
        'files': files, 'flavors': flavors,
        'unsupported_disk_format': unsupported,
        'native_qcow2_hosts': tempest_conf.native_qcow2_hosts(confs),
    }
    _write_json(os.path.join(base, 'resources.json'), resources)
    return resources


def _write_json(path: str, data: Any) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + '.tmp', 'w') as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write('\n')
    os.replace(path + '.tmp', path)


def plugin_driver(cloud: Mapping[str, Any]) -> bool:
    """Whether the computes run nova-imgtype's driver."""
    drivers = {str(c.get('driver', '')) for c in cloud.get('computes', [])}
    return bool(drivers) and all('imgtype' in d or d == 'plugin'
                                 for d in drivers)


def write_conf(cloud: Mapping[str, Any], resources: Mapping[str, Any],
               workspace: str, imgtype_scheduling: bool,
               build_timeout: int = tempest_conf.BUILD_TIMEOUT) -> str:
    """``<workspace>/etc/tempest.conf``; its path."""
    nova_conf = tempest_conf.read_oslo_conf(cloud['nova_conf'])
    flavors = list(FLAVORS)
    res = tempest_conf.Resources(
        image_ref=resources['images']['qcow2'],
        image_ref_alt=resources['images']['raw'],
        flavor_ref=resources['flavors'][flavors[0]],
        flavor_ref_alt=resources['flavors'][flavors[1]],
        qcow2_image_file=resources['files']['qcow2'],
        unsupported_disk_format=resources['unsupported_disk_format'],
        unsupported_image_file=resources['files']['unsupported'])
    sections = tempest_conf.tempest_sections(
        cloud, res, tempest_conf.enabled_filters(nova_conf),
        imgtype_scheduling, resources['native_qcow2_hosts'],
        log_dir=os.path.join(workspace, 'logs'),
        build_timeout=build_timeout)
    path = os.path.join(workspace, 'etc', 'tempest.conf')
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        f.write(tempest_conf.render_conf(sections))
    return path


def _bin(name: str) -> str:
    return os.path.join(os.path.dirname(sys.executable), name)


def init_workspace(workspace: str) -> None:
    """``tempest init`` once (``.stestr.conf``, etc/, logs/), registered
    in a workspace file of its own next to it rather than in
    ~/.tempest."""
    if os.path.exists(os.path.join(workspace, '.stestr.conf')):
        return
    os.makedirs(os.path.dirname(workspace), exist_ok=True)
    registry = workspace + '.workspace.yaml'
    if os.path.exists(registry):
        os.unlink(registry)
    proc = subprocess.run(
        [_bin('tempest'), 'init', '--workspace-path', registry, '--name',
         os.path.basename(workspace), workspace],
        capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError('tempest init %s failed: %s'
                           % (workspace, proc.stderr or proc.stdout))


def list_tests(workspace: str, include_list: str) -> list[str]:
    """The ids the selection matches (``tempest run --list-tests``)."""
    proc = subprocess.run(
        [_bin('tempest'), 'run', '--list-tests', '--include-list',
         include_list], cwd=workspace, capture_output=True, text=True,
        check=True)
    return [line.strip() for line in proc.stdout.splitlines()
            if line.strip() and not line.startswith(' ')
            and '.' in line and ' ' not in line.strip()]


def seed_times(workspace: str, listed: list[str],
               durations: Mapping[str, float]) -> int:
    """Give the workspace's stestr repository the tests' durations of a
    run before (``durations``: base id -> seconds), so that ``tempest
    run`` splits the tests among its workers by time, as stestr does in
    a workspace that has run them before: without any, it deals the test
    classes out in turn, and one worker got the longest classes while the
    others idled (the plugin's run took 1.7-1.9 times the sum of its
    tests' durations over the six workers).

    Loaded as a subunit stream of its own (``stestr load``), each listed
    test that has a duration a success of that length. The number of
    tests given a duration; none when there is none to give.
    """
    from subunit import v2 as subunit_v2  # noqa: PLC0415 - tempest's venv

    known = [(t, durations[tempest_parse.base_id(t)]) for t in listed
             if tempest_parse.base_id(t) in durations]
    if not known:
        return 0
    path = os.path.join(workspace, 'durations.subunit')
    start = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)
    with open(path, 'wb') as f:
        stream = subunit_v2.StreamResultToBytes(f)
        for test_id, seconds in known:
            stream.status(test_id=test_id, test_status='inprogress',
                          timestamp=start)
            stream.status(test_id=test_id, test_status='success',
                          timestamp=start + datetime.timedelta(
                              seconds=seconds))
    subprocess.run([_bin('stestr'), 'load', '--force-init', path],
                   cwd=workspace, capture_output=True, check=True)
    return len(known)


def previous_durations(results_path: str, label: str) -> dict[str, float]:
    """Base id -> seconds of each test ``label``'s side ran in a gate's
    committed results (``gate/results/.../latest.json``), the plugin's
    where stock's did not run; empty without them."""
    try:
        with open(results_path) as f:
            rows = json.load(f).get('tests', [])
    except (OSError, ValueError):
        return {}
    out = {}
    for row in rows:
        for side in (label, 'plugin'):
            result = row.get(side) or {}
            if result.get('status') in ('passed', 'failed', 'skipped'):
                out[row['id']] = float(result.get('duration') or 0.0)
                break
    return out


class _Tee:
    """A byte source that copies what is read from it into a file."""

    def __init__(self, src: IO[bytes], dst: IO[bytes]) -> None:
        self.src, self.dst = src, dst

    def read(self, n: int = -1) -> bytes:
        data = self.src.read(n)
        self.dst.write(data)
        return data


def run(cloud_path: str, label: str, selection: str = SELECTION,
        concurrency: int = CONCURRENCY, timeout: float = DEFAULT_TIMEOUT,
        imgtype_scheduling: bool | None = None,
        out: IO[str] = sys.stderr,
        build_timeout: int = tempest_conf.BUILD_TIMEOUT,
        durations: Mapping[str, float] | None = None) -> str:
    """Run the selection against the cloud; the results.json path.
    ``durations``: the tests' durations in a run before (base id ->
    seconds), for stestr to split them among workers (:func:`seed_times`).
    """
    cloud = load_cloud(cloud_path)
    t0 = time.monotonic()
    resources = prepare(cloud)
    print('gate.tempest: images and flavors ready (%.0f s)'
          % (time.monotonic() - t0), file=out, flush=True)
    workspace = os.path.join(cloud['base'], 'tempest', label)
    init_workspace(workspace)
    if imgtype_scheduling is None:
        imgtype_scheduling = plugin_driver(cloud)
    write_conf(cloud, resources, workspace, imgtype_scheduling,
               build_timeout)
    data = execute(workspace, label, selection, concurrency, timeout, out,
                   durations)
    data.update({
        'cloud': os.path.abspath(cloud_path),
        'drivers': {c['host']: c.get('driver')
                    for c in cloud.get('computes', [])},
        'imgtype_scheduling': imgtype_scheduling,
        'resources': resources,
    })
    path = os.path.join(workspace, 'results.json')
    _write_json(path, data)
    print('gate.tempest[%s]: %s in %.0f s: %s' % (
        label, ', '.join('%d %s' % (n, s) for s, n in data['counts'].items()),
        data['wall_seconds'], path), file=out, flush=True)
    return path


def execute(workspace: str, label: str, selection: str = SELECTION,
            concurrency: int = CONCURRENCY, timeout: float = DEFAULT_TIMEOUT,
            out: IO[str] = sys.stderr,
            durations: Mapping[str, float] | None = None) -> dict[str, Any]:
    """``tempest run`` of the selection in a configured workspace; its
    results (what results.json holds, less the cloud's part)."""
    with open(selection) as f:
        ids = tempest_conf.parse_selection(f.read())
    include = os.path.join(workspace, 'include-list.txt')
    with open(include, 'w') as f:
        f.write('\n'.join(tempest_conf.selection_regexes(ids)) + '\n')
    listed = list_tests(workspace, include)
    timed = seed_times(workspace, listed, durations or {})
    print('gate.tempest[%s]: %d tests selected, concurrency %d, %d with '
          'a duration from a run before' % (label, len(listed), concurrency,
                                            timed), file=out, flush=True)
    stream_path = os.path.join(workspace, 'results.subunit')
    cmd = [_bin('tempest'), 'run', '--subunit', '--concurrency',
           str(concurrency), '--include-list', include]
    done = 0

    def progress(test_id: str, result: tempest_parse.Result) -> None:
        nonlocal done
        done += 1
        print('gate.tempest[%s] %4d/%d %-7s %6.1fs %s' % (
            label, done, len(listed), result['status'],
            result['duration'], test_id), file=out, flush=True)

    started = time.time()
    with open(stream_path, 'wb') as stream, \
            open(os.path.join(workspace, 'tempest-run.log'), 'wb') as log:
        proc = subprocess.Popen(cmd, cwd=workspace, stdout=subprocess.PIPE,
                                stderr=log, start_new_session=True)
        assert proc.stdout is not None
        timer = _Killer(proc, timeout)
        try:
            raw = tempest_parse.read_stream(_Tee(proc.stdout, stream),
                                            progress)
            rc = proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:
                _kill(proc)
    results = tempest_parse.expand(raw, listed)
    # The servers of a failed test's 5xx answers, from tempest's log: what
    # gate.upstream_bugs needs where the failure names none.
    log_path = os.path.join(workspace, 'logs', 'tempest.log')
    if os.path.exists(log_path):
        with open(log_path, errors='replace') as f:
            tempest_parse.add_failed_request_servers(results, f)
    return {
        'label': label,
        'started': time.strftime('%Y-%m-%dT%H:%M:%SZ',
                                 time.gmtime(started)),
        'wall_seconds': round(time.time() - started, 1),
        'returncode': rc,
        'timed_out': timer.fired,
        'command': cmd,
        'selection': os.path.abspath(selection),
        'counts': tempest_parse.counts(results),
        'tests': results,
    }


def not_passed_selection(results_path: str, out_path: str) -> int:
    """Write a selection file (``out_path``) of the tests a run did not
    pass (failed, skipped or missing in the ``results.json`` at
    ``results_path``): what stock must run for a verdict when it runs
    only where needed (:data:`gate.results.STOCK_SCOPES`). A skipped test
    is among them: a plugin compute that is down makes tempest skip the
    tests that need two, which stock would pass. How many it lists."""
    with open(results_path) as f:
        tests = json.load(f)['tests']
    ids = sorted(t for t, r in tests.items() if r['status'] != 'passed')
    with open(out_path, 'w') as f:
        f.write('# The tests %s did not pass (gate/tempest.py).\n'
                % results_path)
        f.write(''.join('%s\n' % t for t in ids))
    return len(ids)


class _Killer:
    """Kills a run that outlives its timeout (process group)."""

    def __init__(self, proc: subprocess.Popen[bytes], timeout: float):
        import threading
        self.fired = False
        self._proc = proc
        self._timer = threading.Timer(timeout, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        self.fired = True
        _kill(self._proc)

    def cancel(self) -> None:
        self._timer.cancel()


def _kill(proc: subprocess.Popen[bytes]) -> None:
    import signal
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog='python -m gate.tempest',
        description='Run the gate tempest selection against a gate cloud.')
    parser.add_argument('--cloud', required=True, help='cloud.json')
    parser.add_argument('--label', default='plugin',
                        help='name of the run (stock, plugin)')
    parser.add_argument('--selection', default=SELECTION)
    parser.add_argument('--concurrency', type=int, default=CONCURRENCY)
    parser.add_argument('--timeout', type=float, default=DEFAULT_TIMEOUT)
    parser.add_argument('--build-timeout', type=int,
                        default=tempest_conf.BUILD_TIMEOUT,
                        help='tempest [compute]build_timeout (seconds)')
    parser.add_argument('--imgtype-scheduling', choices=('auto', 'on', 'off'),
                        default='auto')
    parser.add_argument('--prepare-only', action='store_true',
                        help='only make images and flavors; print their ids')
    args = parser.parse_args(argv)
    if args.prepare_only:
        resources = prepare(load_cloud(args.cloud))
        print(json.dumps(resources, indent=2, sort_keys=True))
        return 0
    scheduling = {'auto': None, 'on': True, 'off': False}[
        args.imgtype_scheduling]
    print(run(args.cloud, args.label, args.selection, args.concurrency,
              args.timeout, scheduling, build_timeout=args.build_timeout))
    return 0


if __name__ == '__main__':
    sys.exit(main())
