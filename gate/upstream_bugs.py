"""Stock Nova's own defects the gate cloud can hit, told apart from the
plugin's by what the computes logged.

A test that fails because stock Nova's compute manager raced with itself
says nothing about either driver: both runs go through the same manager.
Each bug here is named by the traceback its compute logs for the
instance it failed, every line of it needed (never by the test's name or
its failure message alone), so only a build that met that very bug is
told apart; :mod:`gate.results` still lists it, with the instance and
the bug, and a run that meets it too often still fails the gate's
minimum of tests passing on both.

``native-threads-build-race``: Nova 34's compute runs native threads.
``ComputeManager._allocate_network_async``, now a real thread, adds
``network_allocated`` to ``instance.system_metadata`` while the build's
own thread iterates that dict (``_default_block_device_names`` ->
``blockinfo.get_disk_info`` -> ``configdrive.required_by`` ->
``instance.image_meta`` -> ``utils.get_image_from_system_metadata``):
``RuntimeError: dictionary changed size during iteration``, the build
aborted ("Failure prepping block device"), the server in ERROR. Under
eventlet the iteration never yielded. Seen once in a CI gate run of
2026-11-27 (stock's run, ``LiveAutoBlockMigrationV225Test``'s server).

``shelve-offload-host-race``: ``ComputeManager._shelve_offload_instance``
saves the instance ``SHELVED_OFFLOADED`` (what tempest waits for), then
updates the resource tracker (which waits for its lock behind the host's
other claims), and only then nulls ``host`` and ``node`` in a second save
that checks no task state. An unshelve requested in between lands on the
other compute, whose claim finds the host already set ("Host field should
not be set on the instance until resources have been claimed") and sets
its own; the offloading compute's second save then erases it, and the
unshelved server runs with no host (that compute's power sync: "the
instance has moved from host None"); the next action on it gets a 500,
"Unable to find host for Instance". Seen in two Ceph-profile gates of
2026-11-27 and 2026-11-28 (``ServersNegativeTestJSON``'s shared server,
once on stock's run, once on the plugin's). Its lines are a WARNING and an
INFO of two events, found on the unshelving compute.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import re
from collections.abc import Iterable

_LINE = re.compile(
    r'^(?P<stamp>\S+ \S+ \d+) (?P<level>[A-Z]+) \S+ '
    r'(?:\[[^\]]*\] )?\[instance: (?P<instance>[0-9a-f-]{36})\] '
    r'(?P<text>.*)$')


@dataclasses.dataclass(frozen=True)
class Bug:
    """One defect of stock Nova, as its compute logs it for an instance:
    every one of ``lines`` is found among the ERROR lines of one logged
    event (one time stamp and process) about one instance; or, with
    ``one_event`` False, among all the lines one compute logged about the
    instance, whatever their level."""

    name: str
    title: str
    lines: tuple[str, ...]
    one_event: bool = True

    def hit_by(self, texts: Iterable[str]) -> bool:
        texts = list(texts)
        return all(any(wanted in t for t in texts) for wanted in self.lines)


BUGS = (
    Bug('native-threads-build-race',
        "stock Nova's build thread iterates instance.system_metadata while "
        "its network allocation thread adds network_allocated to it",
        ('Failure prepping block device: RuntimeError: dictionary changed '
         'size during iteration',
         'in get_image_from_system_metadata')),
    Bug('shelve-offload-host-race',
        "stock Nova's shelve offload nulls the host after an unshelve "
        "elsewhere set it (its second save, after the resource tracker)",
        ('Host field should not be set on the instance until resources '
         'have been claimed.',
         'During the sync_power process the instance has moved from host '
         'None to host'),
        one_event=False),
)


def instances_hit(lines: Iterable[str],
                  bugs: Iterable[Bug] = BUGS) -> dict[str, str]:
    """``{instance uuid: bug name}`` for every instance a compute log's
    ``lines`` show a bug hit."""
    bugs = list(bugs)
    events: dict[tuple[str, str], list[str]] = {}
    logged: dict[str, list[str]] = {}
    for line in lines:
        m = _LINE.match(line.rstrip('\n'))
        if not m:
            continue
        logged.setdefault(m['instance'], []).append(m['text'])
        if m['level'] == 'ERROR':
            events.setdefault((m['stamp'], m['instance']), []).append(
                m['text'])
    hit = {}
    for (_, instance), texts in events.items():
        for bug in bugs:
            if bug.one_event and bug.hit_by(texts):
                hit[instance] = bug.name
    for instance, texts in logged.items():
        for bug in bugs:
            if not bug.one_event and bug.hit_by(texts):
                hit[instance] = bug.name
    return hit


def instances_hit_in(log_dir: str) -> dict[str, str]:
    """:func:`instances_hit` over every compute's Nova log in a cloud's
    (or a kept) log directory."""
    hit: dict[str, str] = {}
    for path in sorted(glob.glob(os.path.join(log_dir,
                                              '*-nova-compute.log'))):
        with open(path, errors='replace') as f:
            hit.update(instances_hit(f))
    return hit


def title(name: str) -> str:
    return next((b.title for b in BUGS if b.name == name), name)
