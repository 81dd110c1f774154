"""nova-imgtype on a control node: no libvirt-python, no libvirt driver.

nova-scheduler loads nova-imgtype's filters (``available_filters``),
nova-api its flavor extra spec validator, and an operator runs
``nova-imgtype-status upgrade check`` on the node that reaches placement.
Such a node has Nova, not libvirt-python (Nova does not require it; only
compute nodes have it). Each case runs in a Python of its own where
``import libvirt`` fails as it does there: a ``libvirt`` module first on
the path that raises ``ModuleNotFoundError``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

#: The source tree, on the path after the shadow: the console script runs
#: this code, not the copy installed in the virtualenv when it was built.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
NO_LIBVIRT = textwrap.dedent('''\
    raise ModuleNotFoundError("No module named 'libvirt'", name='libvirt')
''')


@pytest.fixture
def control_node(tmp_path):
    """Environment of a process on a host without libvirt-python."""
    shadow = tmp_path / 'shadow'
    shadow.mkdir()
    (shadow / 'libvirt.py').write_text(NO_LIBVIRT)
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join(filter(None, [
        str(shadow), ROOT, env.get('PYTHONPATH')]))
    return env


def _python(env, code):
    proc = subprocess.run([sys.executable, '-c', textwrap.dedent(code)],
                          capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_shadow_stands_for_a_missing_libvirt_python(control_node):
    out = _python(control_node, '''
        import json
        try:
            import libvirt
        except ModuleNotFoundError as e:
            print(json.dumps(e.name))
    ''')
    assert out == 'libvirt'


def test_scheduler_and_api_load_nova_imgtype_without_libvirt(control_node):
    out = _python(control_node, '''
        import json, sys
        from nova import objects
        from nova.api.validation.extra_specs import validators
        from nova.scheduler import filters, request_filter
        objects.register_all()
        classes = filters.HostFilterHandler().get_matching_classes(
            ['nova.scheduler.filters.all_filters',
             'nova_imgtype.scheduler.filters.all_filters'])
        validators.load_validators()
        validators.validate('imgtype:native', 'required')
        print(json.dumps({
            'filter': any(c.__name__ == 'ImageTypeSupportFilter'
                          for c in classes),
            'request_filters': [f.__name__ for f in
                                request_filter.ALL_REQUEST_FILTERS][-2:],
            'libvirt_driver': sorted(m for m in sys.modules if m in (
                'nova.virt.libvirt.driver',
                'nova_imgtype.virt.libvirt.backends')),
        }))
    ''')
    assert out == {'filter': True,
                   'request_filters': ['image_type_support',
                                       'instance_backend'],
                   'libvirt_driver': []}


def test_status_on_a_control_node_says_what_it_cannot_check(control_node,
                                                           tmp_path):
    conf = tmp_path / 'nova.conf'
    conf.write_text('[scheduler]\nfilter_hosts_by_image_type_support = '
                    'True\n')
    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), 'nova-imgtype-status'),
         '--config-file', str(conf), 'upgrade', 'check'],
        capture_output=True, text=True, env=control_node, timeout=300)
    text = proc.stdout + proc.stderr
    assert 'Traceback' not in text, text
    assert 'Options not checked on this host: libvirt-python is not' in text
    assert "No module named 'libvirt'" in ' '.join(text.split())
    # The hooks into stock's code are checked there all the same.
    assert 'Check: Stock Nova hooks' in text
