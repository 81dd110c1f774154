"""etc/nova-imgtype.conf.sample must be what the generator makes now."""

import pathlib

from oslo_config import cfg
from oslo_config import generator

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_sample_config_is_current(tmp_path):
    out = tmp_path / 'sample.conf'
    conf = cfg.ConfigOpts()
    generator.register_cli_opts(conf)
    conf(['--config-file',
          str(ROOT / 'etc/oslo-config-generator/nova-imgtype.conf'),
          '--output-file', str(out)])
    generator.generate(conf)
    current = (ROOT / 'etc/nova-imgtype.conf.sample').read_text()
    assert out.read_text() == current, (
        'etc/nova-imgtype.conf.sample is stale: run `make genconfig`')


def test_sample_documents_every_option():
    sample = (ROOT / 'etc/nova-imgtype.conf.sample').read_text()
    assert '#images_type_mapping =' in sample
    assert 'Possible values:' in sample and 'Related options:' in sample
