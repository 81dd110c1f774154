"""The wheel holds what a compute, scheduler or API node runs: not the
test harness nor the demo (they are the source tree's,
``nova_imgtype_testing``)."""

import pathlib
import shutil
import subprocess
import sys
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_wheel_holds_no_test_harness_nor_demo(tmp_path):
    # Built from a copy: a build leaves build/ and *.egg-info behind.
    src = tmp_path / 'src'
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        '.venv*', '.git', 'build', '*.egg-info', '__pycache__', 'results'))
    subprocess.run(
        [sys.executable, '-m', 'pip', 'wheel', '--no-deps', '--no-cache-dir',
         '--no-build-isolation', '--quiet', '--wheel-dir', str(tmp_path),
         str(src)], check=True, capture_output=True, cwd=tmp_path)
    [wheel] = tmp_path.glob('nova_imgtype-*.whl')
    names = zipfile.ZipFile(wheel).namelist()
    packages = {n.split('/')[0] for n in names}
    # What a node runs is there...
    assert 'nova_imgtype/virt/libvirt/driver.py' in names
    assert 'nova/virt/imgtype/__init__.py' in names
    # ...and nothing only the tests and the demo use.
    assert not [n for n in names if n.startswith(
        ('nova_imgtype/testing/', 'nova_imgtype/demo'))]
    assert 'nova_imgtype_testing' not in packages
    assert 'tests' not in packages and 'benchmarks' not in packages
