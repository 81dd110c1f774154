"""Test helpers for the tests, the benchmarks, the gate and the demo
(``python -m nova_imgtype_testing``, ``make demo``): in the source tree
only, not in nova-imgtype's wheel (a compute node runs none of it).

* :mod:`.libvirtd`: a throwaway libvirtd (system daemon in a private mount
  namespace as root, a session daemon otherwise) and real-image helpers.
* :mod:`.functional`: stock Nova's in-process functional harness with
  computes on ``imgtype.LibvirtDriver`` and real disks.

Importing them needs Nova's test fixtures (``nova.tests``, shipped in its
wheel) and the packages of ``test-requirements.txt``.
"""
