"""pbr reads setup.cfg (and the version from git); see pyproject.toml."""

import setuptools

setuptools.setup(pbr=True)
