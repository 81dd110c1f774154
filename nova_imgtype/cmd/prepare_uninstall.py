"""``nova-imgtype prepare-uninstall``: take a compute back to stock's driver.

Run on the compute, with its ``nova.conf``, while its nova-compute is
stopped (with ``--apply`` it refuses otherwise: nova-compute would move the
files back into pools at the next hard reboot). It lists, instance by
instance, what would keep the host from returning to
``libvirt.LibvirtDriver`` (:mod:`nova_imgtype.virt.libvirt.way_back`);
with ``--apply`` it moves each stopped instance back to stock's layout,
and once nothing is left, undefines the storage pools nova-imgtype made
(their storage kept) and removes its ``CUSTOM_IMGTYPE_*`` traits from the
node's resource provider. Instances are read and saved through
nova-conductor, as nova-compute does; placement through the ``[placement]``
credentials.

Exit codes: 0 when nothing keeps the host from stock's driver (after
``--apply``: everything was done), 1 when something is left (or, without
``--apply``, something to do), 2 on an error.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any

import libvirt
from oslo_config import cfg

from nova_imgtype import traits as traits_mod
from nova_imgtype.virt.libvirt import way_back as way_back_mod

#: vm_states in which the guest is not running and stays so while
#: nova-compute is down.
STOPPED_STATES = ('stopped',)


def connect(conf: cfg.ConfigOpts) -> Any:
    """A read-write libvirt connection to this host's daemon: the URI
    nova-compute's libvirt driver uses."""
    from nova.virt.libvirt import driver as stock_driver
    return libvirt.open(stock_driver.LibvirtDriver._uri())


def way_back(conf: cfg.ConfigOpts,
             get_connection: Callable[[], Any]) -> way_back_mod.WayBack:
    """The way back on the storage of ``get_connection``'s daemon."""
    from nova_imgtype.virt.libvirt import instance_disks
    from nova_imgtype.virt.libvirt import pools as pools_mod
    from nova_imgtype.virt.libvirt import resolver as resolver_mod

    pools = pools_mod.StoragePools(get_connection)
    resolver = resolver_mod.BackendResolver(
        conf, locate=lambda key, name: pools.name_for(key, name))
    disks = instance_disks.InstanceDisks(resolver, pools, None, conf)
    return way_back_mod.WayBack(resolver, disks, conf)


def use_conductor(conf: cfg.ConfigOpts) -> None:
    """Read and save Nova objects through nova-conductor, as nova-compute
    does (a compute has no database)."""
    from nova import config as nova_config
    from nova import objects
    from nova import rpc
    from nova.conductor import rpcapi as conductor_rpcapi
    from nova.objects import base as objects_base

    objects.register_all()
    # Nova's defaults for the libraries, as its services set them: the
    # 'nova' exchange conductor listens on (oslo.messaging's is
    # 'openstack').
    nova_config.set_lib_defaults()
    rpc.init(conf)
    objects_base.NovaObject.indirection_api = conductor_rpcapi.ConductorAPI()


def compute_is_up(context: Any, host: str) -> bool:
    """Whether nova-compute on ``host`` reports as up."""
    from nova import objects
    from nova import servicegroup

    service = objects.Service.get_by_compute_host(context, host)
    return bool(servicegroup.API().service_is_up(service))


def guest_stopped(conn: Any, instance: Any) -> bool:
    """Whether the instance is stopped, with no task under way, and its
    guest (if defined here) not running."""
    if instance.vm_state not in STOPPED_STATES or instance.task_state:
        return False
    try:
        dom = conn.lookupByUUIDString(instance.uuid)
    except libvirt.libvirtError as e:
        if e.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
            return True
        raise
    return not dom.isActive()


def guest_running(instance: Any) -> bool:
    """Whether the instance is active with no task under way (its next
    hard reboot can take it back)."""
    return instance.vm_state == 'active' and not instance.task_state


def own_traits(context: Any, host: str) -> dict[str, set[str]]:
    """nova-imgtype's traits on each resource provider of ``host``'s
    compute nodes."""
    from nova import objects
    from nova.scheduler.client import report

    client = report.report_client_singleton()
    found = {}
    for node in objects.ComputeNodeList.get_all_by_host(context, host):
        info = client.get_provider_traits(context, node.uuid)
        found[node.uuid] = {
            t for t in info.traits
            if traits_mod.ours(t, traits_mod.NATIVE_PREFIX) or
            traits_mod.ours(t, traits_mod.BACKEND_PREFIX)}
    return found


def remove_traits(context: Any, provider: str, remove: set[str]) -> None:
    """Remove ``remove`` from the provider's traits, keeping the others.

    Placement's own call (``PUT /resource_providers/{uuid}/traits`` with
    the generation just read): the report client's
    ``set_traits_for_provider`` works on nova-compute's cache of the
    provider tree, which this command does not have. A generation that
    changed meanwhile (nova-compute updating the provider) is read again,
    a few times.

    :raises ResourceProviderUpdateFailed: placement refused.
    """
    from nova import exception as nova_exception
    from nova.scheduler.client import report

    client = report.report_client_singleton()
    url = '/resource_providers/%s/traits' % provider
    for _attempt in range(3):
        info = client.get_provider_traits(context, provider)
        resp = client.put(url, {
            'traits': sorted(info.traits - remove),
            'resource_provider_generation': info.generation},
            version='1.6', global_request_id=context.global_id)
        if resp.status_code != 409:
            break
    if resp.status_code != 200:
        raise nova_exception.ResourceProviderUpdateFailed(
            url=url, error=resp.text)


def prepare(conf: cfg.ConfigOpts, apply: bool, out_format: str,
            conn: Any = None) -> int:
    """Review (and with ``apply``, take back) this host; print; the exit
    code (see the module)."""
    from nova import context as nova_context
    from nova import objects

    if conn is None:
        use_conductor(conf)
        conn = connect(conf)
    context = nova_context.get_admin_context()
    host = conf.host
    if apply and compute_is_up(context, host):
        print('ERROR: nova-compute on %s is up: stop it first (it would '
              'move the instances back into storage pools at their next '
              'hard reboot)' % host, file=sys.stderr)
        return 2
    back = way_back(conf, lambda: conn)
    findings = []
    for inst in objects.InstanceList.get_by_host(
            context, host, expected_attrs=['system_metadata']):
        findings.append(back.review(inst, guest_stopped(conn, inst), apply,
                                    running=guest_running(inst)))
    outcomes = {f.outcome for f in findings}
    clear = not outcomes & {way_back_mod.LEFT, way_back_mod.TO_MOVE,
                             way_back_mod.AT_REBOOT}
    pools: list[tuple[str, str]] = []
    traits = own_traits(context, host)
    if apply and clear:
        pools = back.remove_pools()
        for provider, own in traits.items():
            if own:
                remove_traits(context, provider, own)
        traits = own_traits(context, host)
    else:
        pools = [(name, 'defined') for name in back.own_pools()]
    left_traits = sorted(set().union(*traits.values()))
    done = (clear and not left_traits and
            all(what.startswith('undefined') for _n, what in pools))
    _print(out_format, host, back.stock_backend(), findings, pools,
           left_traits, apply)
    return 0 if done else 1


def _print(out_format: str, host: str, stock: str,
           findings: Sequence[way_back_mod.Finding],
           pools: Sequence[tuple[str, str]], traits: Sequence[str],
           apply: bool) -> None:
    from nova_imgtype.cmd import manage

    if out_format == 'json':
        print(json.dumps({
            'host': host, 'images_type_backend': stock, 'applied': apply,
            'instances': [f.__dict__ for f in findings],
            'storage_pools': [{'name': n, 'state': s} for n, s in pools],
            'traits': list(traits)}, indent=2))
        return
    print('Host %s: stock\'s driver will use backend %s' % (host, stock))
    if findings:
        print(manage.format_table([
            {'instance': f.uuid, 'name': f.name, 'vm_state': f.vm_state,
             'outcome': f.outcome, 'detail': f.detail} for f in findings]))
    else:
        print('No instance on this host.')
    for name, state in pools:
        print('Storage pool %s: %s' % (name, state))
    print('nova-imgtype traits left: %s' % (', '.join(traits) or 'none'))
