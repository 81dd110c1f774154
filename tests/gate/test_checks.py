"""gate.checks' pure parts."""

from nova.virt.libvirt import imagecache

from gate import checks


def test_cache_name_is_novas():
    # Said again in the gate (which imports no Nova): must stay Nova's.
    image_id = '4b7f0a52-9c3e-4f0d-8a61-2e5d7c9b1f30'
    assert checks._cache_name(image_id) == imagecache.get_cache_fname(
        image_id)


def test_every_check_is_named_in_the_docstring():
    for name in checks.CHECKS:
        assert '``%s``' % name in str(checks.__doc__)


def test_every_ceph_check_is_named_in_its_docstring():
    from gate import check_ceph
    for name in check_ceph.CHECKS:
        assert '``%s``' % name in str(check_ceph.__doc__)


def test_each_profile_runs_its_own_checks():
    from gate import check_ceph
    ceph = checks.checks_of({'profile': 'ceph'})
    assert set(ceph) == set(check_ceph.CHECKS) | {'move-matrix'}
    assert ceph['move-matrix'] is checks.CHECKS['move-matrix']
    assert checks.checks_of({'profile': 'default'}) is checks.CHECKS
    # A cloud.json of before profiles were.
    assert checks.checks_of({}) is checks.CHECKS


def test_the_way_back_runs_last():
    # It restarts each compute on stock's driver and back: a check after
    # it would meet computes it restarted.
    assert list(checks.CHECKS)[-1] == 'way-back'
