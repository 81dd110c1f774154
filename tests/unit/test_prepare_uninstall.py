"""nova-imgtype prepare-uninstall: the command around the way back.

The way back itself (moves, pools) runs against a real libvirtd in
tests/real/test_way_back.py. Here: what the command asks of conductor,
libvirt and placement, in which order, and what it prints and returns.
Faked: conductor's answers (instances, the service), placement's traits,
and the way back (its findings given).
"""

import json
from unittest import mock

import libvirt
import pytest
from nova import exception as nova_exception
from nova import objects
from nova.scheduler.client import report

from nova_imgtype.cmd import manage
from nova_imgtype.cmd import prepare_uninstall as prepare
from nova_imgtype.virt.libvirt import way_back as way_back_mod
from tests.unit.test_cmd import _conf

UUID_A = '11111111-1111-4111-8111-111111111111'
UUID_B = '22222222-2222-4222-8222-222222222222'
RP = '33333333-3333-4333-8333-333333333333'
OWN = {'CUSTOM_IMGTYPE_BACKEND_QCOW2', 'CUSTOM_IMGTYPE_NATIVE_QCOW2'}


class FakeWayBack:
    def __init__(self, outcomes, pools=('nova-disks-pool',)):
        self.outcomes = outcomes
        self.pools = list(pools)
        self.reviewed = []
        self.removed = False

    def stock_backend(self):
        return 'flat'

    def review(self, inst, stopped, apply, running=True):
        self.reviewed.append((inst.uuid, stopped, apply, running))
        return way_back_mod.Finding(inst.uuid, 'vm', inst.vm_state,
                                    self.outcomes[inst.uuid], 'why')

    def own_pools(self):
        return list(self.pools)

    def remove_pools(self):
        self.removed = True
        return [(p, 'undefined, its storage kept') for p in self.pools]


def _inst(uuid, vm_state='stopped'):
    return objects.Instance(uuid=uuid, vm_state=vm_state, task_state=None,
                            system_metadata={})


@pytest.fixture
def host(monkeypatch):
    """Conductor, placement and the way back, faked; returns the state."""
    import nova.conf

    state = mock.Mock(up=False, traits={RP: set(OWN)},
                      instances=[_inst(UUID_A), _inst(UUID_B, 'active')],
                      back=None, removed_traits=[], conflicts=0)
    monkeypatch.setattr(prepare, 'compute_is_up',
                        lambda ctx, h: state.up)
    monkeypatch.setattr(prepare, 'way_back', lambda conf, get: state.back)

    class Placement:
        def get_provider_traits(self, ctx, rp):
            return report.TraitInfo(traits=set(state.traits[rp]),
                                    generation=7)

        def put(self, url, data, version=None, global_request_id=None):
            # What placement checks: the microversion, the generation.
            rp = url.split('/')[2]
            assert (url, version) == ('/resource_providers/%s/traits' % rp,
                                      '1.6')
            if state.conflicts:
                state.conflicts -= 1
                return mock.Mock(status_code=409, text='generation')
            assert data['resource_provider_generation'] == 7
            traits = set(data['traits'])
            state.removed_traits.append((rp, state.traits[rp] - traits))
            state.traits[rp] = traits
            return mock.Mock(status_code=200, text='')
    monkeypatch.setattr(report, 'report_client_singleton', Placement)
    monkeypatch.setattr(
        objects.ComputeNodeList, 'get_all_by_host',
        lambda ctx, h: [objects.ComputeNode(uuid=rp) for rp in state.traits])
    monkeypatch.setattr(objects.InstanceList, 'get_by_host',
                        lambda ctx, h, expected_attrs=None: state.instances)
    monkeypatch.setattr(prepare, 'guest_stopped',
                        lambda conn, inst: inst.vm_state == 'stopped')
    state.conf = nova.conf.CONF
    return state


def test_apply_is_refused_while_nova_compute_is_up(host, capsys):
    host.up = True
    host.back = FakeWayBack({UUID_A: way_back_mod.TO_MOVE,
                             UUID_B: way_back_mod.READY})
    assert prepare.prepare(host.conf, True, 'table', conn=object()) == 2
    assert 'nova-compute on' in capsys.readouterr().err
    assert host.back.reviewed == []


def test_dry_run_lists_and_changes_nothing(host, capsys):
    host.back = FakeWayBack({UUID_A: way_back_mod.TO_MOVE,
                             UUID_B: way_back_mod.READY})
    assert prepare.prepare(host.conf, False, 'table', conn=object()) == 1
    out = capsys.readouterr().out
    assert UUID_A in out and 'to move' in out
    assert 'Storage pool nova-disks-pool: defined' in out
    assert 'CUSTOM_IMGTYPE_BACKEND_QCOW2' in out
    assert host.back.reviewed == [(UUID_A, True, False, False),
                                  (UUID_B, False, False, True)]
    assert not host.back.removed and host.removed_traits == []


def test_apply_removes_pools_and_traits_once_nothing_is_left(host, capsys):
    host.traits[RP].add('COMPUTE_IMAGE_TYPE_QCOW2')
    host.back = FakeWayBack({UUID_A: way_back_mod.MOVED,
                             UUID_B: way_back_mod.READY})
    assert prepare.prepare(host.conf, True, 'json', conn=object()) == 0
    out = json.loads(capsys.readouterr().out)
    assert host.back.removed
    # Only nova-imgtype's traits go; stock's stay.
    assert host.removed_traits == [(RP, OWN)]
    assert host.traits[RP] == {'COMPUTE_IMAGE_TYPE_QCOW2'}
    assert out['traits'] == []
    assert [i['outcome'] for i in out['instances']] == ['moved', 'ready']


def test_apply_keeps_pools_and_traits_while_an_instance_is_left(host,
                                                                capsys):
    host.back = FakeWayBack({UUID_A: way_back_mod.MOVED,
                             UUID_B: way_back_mod.LEFT})
    assert prepare.prepare(host.conf, True, 'table', conn=object()) == 1
    assert not host.back.removed and host.removed_traits == []
    assert 'left' in capsys.readouterr().out


def test_the_command_parses_its_options(tmp_path, monkeypatch):
    seen = {}

    def fake(conf, apply, out_format, conn=None):
        seen.update(apply=apply, out_format=out_format, host=conf.host)
        return 1
    monkeypatch.setattr(prepare, 'prepare', fake)
    path = _conf(tmp_path, '''
        [DEFAULT]
        host = compute7
    ''')
    assert manage.main(['prepare-uninstall', '--apply', '--config-file',
                        path, '--format', 'json']) == 1
    assert seen == {'apply': True, 'out_format': 'json', 'host': 'compute7'}


def test_an_unreachable_daemon_is_one_error_line(tmp_path, monkeypatch,
                                                 capsys):
    def fail(conf, apply, out_format, conn=None):
        raise libvirt.libvirtError('Failed to connect socket')
    monkeypatch.setattr(prepare, 'prepare', fail)
    assert manage.main(['prepare-uninstall', '--config-file',
                        _conf(tmp_path, '')]) == 2
    err = capsys.readouterr().err
    assert err.startswith('ERROR: ') and 'Failed to connect' in err


class FakeDomain:
    def __init__(self, active):
        self.active = active

    def isActive(self):
        return self.active


class FakeConn:
    def __init__(self, domains):
        self.domains = domains

    def lookupByUUIDString(self, uuid):
        if uuid not in self.domains:
            err = libvirt.libvirtError('no domain')
            err.err = (libvirt.VIR_ERR_NO_DOMAIN,) + (None,) * 8
            raise err
        return self.domains[uuid]


@pytest.mark.parametrize('vm_state, task_state, domain, stopped', [
    ('stopped', None, FakeDomain(False), True),
    ('stopped', None, None, True),
    ('stopped', None, FakeDomain(True), False),     # started behind Nova
    ('stopped', 'powering-on', FakeDomain(False), False),
    ('active', None, FakeDomain(True), False),
    ('error', None, FakeDomain(False), False),
])
def test_only_a_stopped_guest_is_moved(vm_state, task_state, domain,
                                       stopped):
    inst = objects.Instance(uuid=UUID_A, vm_state=vm_state,
                            task_state=task_state)
    conn = FakeConn({UUID_A: domain} if domain else {})
    assert prepare.guest_stopped(conn, inst) is stopped


@pytest.mark.parametrize('vm_state, task_state, running', [
    ('active', None, True),
    ('active', 'rebooting_hard', False),
    ('resized', None, False),       # a resize to confirm or revert
    ('rescued', None, False),
    ('error', None, False),
    ('stopped', None, False),
])
def test_only_an_active_idle_guest_is_marked_for_its_hard_reboot(
        vm_state, task_state, running):
    inst = objects.Instance(uuid=UUID_A, vm_state=vm_state,
                            task_state=task_state)
    assert prepare.guest_running(inst) is running


def test_a_trait_update_that_races_nova_compute_is_read_again(host, capsys):
    """Placement answers 409 when the provider's generation changed since
    it was read: the traits are read again and set."""
    host.conflicts = 2
    host.back = FakeWayBack({UUID_A: way_back_mod.MOVED,
                             UUID_B: way_back_mod.READY})
    assert prepare.prepare(host.conf, True, 'table', conn=object()) == 0
    assert host.removed_traits == [(RP, OWN)]


def test_a_refused_trait_update_is_an_error(host, capsys, monkeypatch):
    host.conflicts = 5
    host.back = FakeWayBack({UUID_A: way_back_mod.MOVED,
                             UUID_B: way_back_mod.READY})
    with pytest.raises(nova_exception.ResourceProviderUpdateFailed,
                       match='generation'):
        prepare.prepare(host.conf, True, 'table', conn=object())


def test_conductor_is_asked_on_novas_exchange():
    """Found by the gate's way-back check: the command sent its questions
    on oslo.messaging's default exchange ('openstack'), where no conductor
    listens, and every run in a cloud timed out. Nova's services set the
    default to 'nova' (nova.config.set_lib_defaults); so does the
    command."""
    from nova import conf as nova_conf
    from nova import rpc
    from nova.objects import base as objects_base

    conf = nova_conf.CONF
    conf([], project='nova')
    try:
        # The transport connects at its first message: none is sent.
        prepare.use_conductor(conf)
        assert conf.control_exchange == 'nova'
        assert rpc.TRANSPORT.conf.control_exchange == 'nova'
    finally:
        objects_base.NovaObject.indirection_api = None
        rpc.cleanup()
        conf.reset()
