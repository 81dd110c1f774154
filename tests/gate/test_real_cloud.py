"""The real cloud, as ``make test`` runs it: ``python -m gate --skip-tempest``.

A whole OpenStack of separate processes (MariaDB, RabbitMQ, keystone,
glance, placement, nova-api, conductor, scheduler with the request filter,
two nova-computes on the plugin, each with its own libvirtd, sshd and
instances_path), then every gate check (:mod:`gate.checks`), then all of it
stopped and removed. The differential tempest runs are ``make gate``'s.

Needs root, as ``make test`` does to install what it runs.
"""

import os
import re
import subprocess
import sys

import pytest

from gate import checks
from gate.cloud import layout

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


@pytest.mark.skipif(os.geteuid() != 0, reason='the gate cloud needs root')
def test_real_cloud_passes_every_gate_check():
    proc = subprocess.run(
        [sys.executable, '-m', 'gate', '--skip-tempest'], cwd=ROOT,
        capture_output=True, text=True, timeout=1500, check=False)
    out = proc.stdout + proc.stderr
    said = dict(re.findall(r'^\[check\] (\S+)\s+(\w+)', proc.stdout,
                           re.MULTILINE))
    assert said == {name: 'pass' for name in checks.CHECKS}, out[-6000:]
    assert proc.returncode == 0, out[-6000:]
    assert 'cloud up in' in out
    # Everything it started is gone: no compute's sshd or libvirtd answers.
    for c in layout.COMPUTES:
        probe = subprocess.run(['ss', '-Hltn', 'src', c.ip],
                               capture_output=True, text=True, check=False)
        assert probe.stdout.strip() == '', probe.stdout
    assert not [d for d in os.listdir('/tmp')
                if d.startswith('gate-') and os.path.isdir(
                    os.path.join('/tmp', d, 'mysql'))]
