"""tempest.conf for the gate cloud, and the test selection as regexes.

Pure functions: what :mod:`gate.tempest` writes, from ``cloud.json``, the
ids of the images and flavors it made, and the computes' configuration.
"""

from __future__ import annotations

import configparser
import dataclasses
import re
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any

Sections = dict[str, dict[str, str]]

#: Nova's default [filter_scheduler]enabled_filters (Nova 34).
NOVA_DEFAULT_FILTERS = (
    'ComputeFilter', 'ComputeCapabilitiesFilter', 'ImagePropertiesFilter',
    'ServerGroupAntiAffinityFilter', 'ServerGroupAffinityFilter')

#: tempest's wait for a server status (tempest's default: 300 s). The
#: slowest passing operation seen on a loaded 2-core machine (unshelve to a
#: host: snapshot, offload, unshelve) took 65 s; a move the driver refuses
#: leaves the server ACTIVE and tempest waits the whole timeout, so a
#: shorter one keeps a failing gate within its time budget.
BUILD_TIMEOUT = 180


@dataclasses.dataclass(frozen=True)
class Resources:
    """What the gate made in the cloud for tempest (ids)."""

    image_ref: str
    image_ref_alt: str
    flavor_ref: str
    flavor_ref_alt: str
    qcow2_image_file: str
    unsupported_disk_format: str
    unsupported_image_file: str


def read_oslo_conf(path: str) -> configparser.RawConfigParser:
    """An oslo.config file as configparser sees it (duplicate keys, no
    interpolation, case kept)."""
    parser = configparser.RawConfigParser(strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(path)
    return parser


def _get(conf: configparser.RawConfigParser, section: str, key: str,
         default: str | None = None) -> str | None:
    if section == 'DEFAULT':
        return conf.defaults().get(key, default)
    if conf.has_section(section) and conf.has_option(section, key):
        return conf.get(section, key)
    return default


def _true(value: str | None, default: bool) -> bool:
    if value is None:
        return default
    return value.strip().lower() in ('true', '1', 'yes', 'on')


def enabled_filters(nova_conf: configparser.RawConfigParser) -> list[str]:
    """The scheduler's enabled filters (tempest skips tests whose filter
    is not there)."""
    value = _get(nova_conf, 'filter_scheduler', 'enabled_filters')
    if value is None:
        return list(NOVA_DEFAULT_FILTERS)
    return [f.strip() for f in value.split(',') if f.strip()]


def native_qcow2_hosts(
        computes: Iterable[tuple[str, configparser.RawConfigParser]]
) -> list[str]:
    """Hosts whose ``[libvirt]images_type_mapping`` keeps qcow2 native."""
    hosts = []
    for host, conf in computes:
        mapping = _get(conf, 'libvirt', 'images_type_mapping', '') or ''
        pairs = {p.split(':', 1)[0].strip(): p.split(':', 1)[1].strip()
                 for p in mapping.split(',') if ':' in p}
        if pairs.get('qcow2') == 'qcow2':
            hosts.append(host)
    return hosts


def unsupported_format(
        computes: Iterable[configparser.RawConfigParser]) -> str:
    """A Glance disk_format no compute supports: vhdx when every compute
    has ``force_raw_images = False`` (else they convert it), ploop
    otherwise (only ``virt_type = parallels`` supports it)."""
    confs = list(computes)
    if confs and not any(
            _true(_get(c, 'DEFAULT', 'force_raw_images'), True)
            for c in confs):
        return 'vhdx'
    return 'ploop'


def tempest_sections(cloud: Mapping[str, Any], res: Resources,
                     filters: Iterable[str], imgtype_scheduling: bool,
                     native_hosts: Iterable[str],
                     log_dir: str | None = None,
                     build_timeout: int = BUILD_TIMEOUT) -> Sections:
    """Every option the gate sets in tempest.conf, by section."""
    admin = cloud['admin']
    computes = cloud.get('computes', [])
    yes, no = 'True', 'False'
    # On the ceph profile the root disks of both computes are shared (RBD
    # images of one cluster): a live migration there is not a block
    # migration, as devstack-plugin-ceph configures tempest.
    shared = cloud.get('profile') == 'ceph'
    sections: Sections = {
        'DEFAULT': {'debug': yes, 'use_stderr': no},
        'auth': {
            'admin_username': admin['username'],
            'admin_password': admin['password'],
            'admin_project_name': admin['project_name'],
            'admin_domain_name': admin['user_domain_name'],
            'admin_user_domain_name': admin['user_domain_name'],
            'admin_project_domain_name': admin['project_domain_name'],
            'use_dynamic_credentials': yes,
            'create_isolated_networks': no,
        },
        'identity': {
            'uri_v3': cloud['auth_url'],
            'auth_version': 'v3',
            'region': cloud.get('region', 'RegionOne'),
            'v3_endpoint_type': 'public',
        },
        'identity-feature-enabled': {'api_v2': no, 'api_v3': yes},
        'compute': {
            'image_ref': res.image_ref,
            'image_ref_alt': res.image_ref_alt,
            'flavor_ref': res.flavor_ref,
            'flavor_ref_alt': res.flavor_ref_alt,
            'build_timeout': str(build_timeout),
            'build_interval': '1',
            'min_compute_nodes': str(max(1, len(computes))),
            'min_microversion': '2.1',
            'max_microversion': 'latest',
            'region': cloud.get('region', 'RegionOne'),
        },
        'compute-feature-enabled': {
            'resize': yes,
            'cold_migration': yes,
            'live_migration': yes,
            'block_migration_for_live_migration': no if shared else yes,
            'volume_backed_live_migration': no,
            'live_migrate_back_and_forth': yes,
            'can_migrate_between_any_hosts': yes,
            'console_output': yes,
            'shelve': yes,
            'shelve_migrate': no,
            'pause': yes,
            'suspend': yes,
            'snapshot': yes,
            'disk_config': yes,
            'enable_instance_password': yes,
            'change_password': no,
            'rescue': yes,
            'stable_rescue': yes,
            'vnc_console': no,
            'spice_console': no,
            'serial_console': no,
            'interface_attach': no,
            'metadata_service': no,
            'config_drive': no,
            'personality': no,
            'attach_encrypted_volume': no,
            'swap_volume': no,
            'volume_multiattach': no,
            'scheduler_enabled_filters': ', '.join(filters),
        },
        # Neutron "available": the cloud's network endpoint is the stub
        # (gate.neutron_stub), an empty Neutron with no extensions. With
        # neutron = False, tempest skips every class that declares
        # create_default_network (servers, images, live migration, ...)
        # although they need no network; with it True and no isolated
        # networks, they boot servers without a NIC, as Nova does anyway.
        'service_available': {
            'nova': yes, 'glance': yes, 'neutron': yes, 'cinder': no,
            'swift': no, 'horizon': no,
        },
        'network-feature-enabled': {'api_extensions': '',
                                    'available_features': ''},
        'validation': {'run_validation': no},
        'image': {'region': cloud.get('region', 'RegionOne')},
        'image-feature-enabled': {'api_v2': yes},
        'placement': {'min_microversion': '1.0',
                      'max_microversion': 'latest'},
        'scenario': {'img_file': res.qcow2_image_file,
                     'img_disk_format': 'qcow2'},
        'imgtype': {
            'native_qcow2_hosts': ', '.join(native_hosts),
            'qcow2_image_file': res.qcow2_image_file,
            'unsupported_disk_format': res.unsupported_disk_format,
            'unsupported_image_file': res.unsupported_image_file,
        },
        'imgtype-feature-enabled': {
            'image_type_scheduling': yes if imgtype_scheduling else no,
        },
    }
    if shared:
        # Glance on RBD refuses to delete an image that instance disks are
        # clones of (409, on stock's side as on the plugin's): the image
        # dependency test needs glance_store's deletion of such images,
        # which this cluster's Glance does not make. A Glance matter.
        sections['volume-feature-enabled'] = {
            'enable_volume_image_dep_tests': no}
    if log_dir:
        sections['DEFAULT']['log_dir'] = log_dir
        sections['DEFAULT']['log_file'] = 'tempest.log'
    return sections


def render_conf(sections: Mapping[str, Mapping[str, str]]) -> str:
    """INI text, sections and keys in the given order."""
    out = ['# Written by gate/tempest.py for the gate cloud; do not edit.\n']
    for name, opts in sections.items():
        out.append('\n[%s]\n' % name)
        for key, value in opts.items():
            out.append('%s = %s\n' % (key, value))
    return ''.join(out)


def parse_selection(text: str) -> list[str]:
    """Ids of a selection file: one per line, ``#`` comments, blanks."""
    ids = []
    for line in text.splitlines():
        line = line.split('#', 1)[0].strip()
        if line:
            ids.append(line)
    return ids


def selection_regexes(ids: Iterable[str]) -> list[str]:
    """An anchored regex per id, matching the test itself (its full id
    carries ``[id-...,attrs]``) or every test under a module/class id."""
    return [r'^%s(\.|\[|$)' % re.escape(i) for i in ids]
