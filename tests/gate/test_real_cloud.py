"""The real cloud, as ``make test`` runs it: ``python -m gate``, whole.

A whole OpenStack of separate processes (MariaDB, RabbitMQ, keystone,
glance, placement, nova-api, conductor, scheduler with the request filter,
two nova-computes on the plugin, each with its own libvirtd, sshd and
instances_path), then every gate check (:mod:`gate.checks`), then the
differential tempest runs (the selection and the project's scenarios on the
plugin's computes, the selection on stock's), the results in
``gate/results/latest.{md,json}``, and all of it stopped and removed.

Needs root, as ``make test`` does to install what it runs.
"""

import datetime
import json
import os
import re
import subprocess
import sys

import pytest

from gate import checks
from gate import timing
from gate.cloud import layout
from gate.cloud import up

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


@pytest.mark.skipif(os.geteuid() != 0, reason='the gate cloud needs root')
# The whole gate takes about 25 minutes on 2 cores (7 of them the boot
# times): the project's 900 s per-test limit would stop it.
@pytest.mark.timeout(2400)
def test_real_cloud_passes_the_gate():
    # A cloud left by an earlier, interrupted run is not this run's to judge.
    before = set(_clouds())
    started = datetime.datetime.now(datetime.UTC).replace(
        microsecond=0)
    proc = subprocess.run(
        [sys.executable, '-m', 'gate'], cwd=ROOT,
        capture_output=True, text=True, timeout=2400, check=False)
    out = proc.stdout + proc.stderr
    said = dict(re.findall(r'^\[check\] (\S+)\s+(\w+)', proc.stdout,
                           re.MULTILINE))
    assert said == {name: 'pass' for name in checks.CHECKS}, out[-6000:]
    assert proc.returncode == 0, out[-6000:]
    assert 'cloud up in' in out
    with open(os.path.join(ROOT, 'gate', 'results', 'latest.json')) as f:
        results = json.load(f)
    summary = results['summary']
    # Written by this run, not the committed one.
    assert datetime.datetime.fromisoformat(
        results['generated'].replace('Z', '+00:00')) >= started
    # The plugin passes everything stock passes, its own scenarios too,
    # and enough upstream tests pass on both to mean something.
    assert summary['ok'], summary['problems']
    assert summary['defects'] == 0 and summary['plugin_failures'] == 0
    assert summary['upstream_passed_on_both'] >= summary['min_passed'] >= 40
    # Boot times on stock's computes and on the plugin's, for every
    # compute, image and cache state: timing.RUNS cold boots, and
    # timing.WARM_BOOTS warm ones after each.
    rows = results['timing']['rows']
    assert {(r['host'], r['format'], r['state']) for r in rows} == {
        (c.host, fmt, state) for c in layout.COMPUTES
        for fmt in timing.FORMATS for state in timing.STATES}
    boots = {'cold': timing.RUNS, 'warm': timing.RUNS * timing.WARM_BOOTS}
    assert all(len(r['stock']) == len(r['plugin']) == boots[r['state']]
               and min(r['stock'] + r['plugin']) > 0 for r in rows)
    # nova-compute's own build time of every one of those boots was found
    # in its log, and is part of the boot.
    assert all(len(r[side + '_compute']) == len(r[side])
               and r[side + '_compute_median'] < r[side + '_median']
               for r in rows for side in ('stock', 'plugin'))
    # The cold qcow2's 0.7x is the target only where the plugin maps qcow2.
    assert {r['host']: r['target'] for r in rows
            if (r['format'], r['state']) == ('qcow2', 'cold')} == {
        c.host: 0.7 if 'qcow2:' in c.mapping else 1.0
        for c in layout.COMPUTES}
    # Everything it started is gone: no compute's sshd or libvirtd answers.
    for c in layout.COMPUTES:
        probe = subprocess.run(['ss', '-Hltn', 'src', c.ip],
                               capture_output=True, text=True, check=False)
        assert probe.stdout.strip() == '', probe.stdout
    assert set(_clouds()) <= before


def _clouds():
    """The gate clouds' directories under /tmp (:func:`.up.new_base`)."""
    return [d for d in os.listdir('/tmp')
            if d.startswith(up.BASE_PREFIX) and os.path.isdir(
                os.path.join('/tmp', d, 'mysql'))]
