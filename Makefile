# nova-imgtype: the two commands an operator or a developer needs.
#   make demo   - the main job on an embedded default
#   make test   - every test tier (unit, functional, real, gate: a real
#                 cloud brought up, checked and taken down)
#   make gate   - a real cloud on this machine (as root), judged by tempest
#                 against stock Nova; KEEP=1 leaves it running, TIMING=1
#                 measures boot times on both drivers too; PROFILE=ceph
#                 judges the Ceph profile's cloud (both computes and Glance
#                 on one Ceph cluster) instead
# Both set up what is missing: Debian packages from bindep.txt (as root;
# make demo only the demo profile's: no database, message queue or Ceph),
# a .venv, and the Python packages pinned by constraints/$(NOVA).txt.
#
# NOVA=<release> picks the Nova release to run on: 2026.2 (Nova 34, the
# default, in .venv) or 2026.1 (Nova 33, in .venv-2026.1). `make test
# NOVA=2026.1` runs the unit, functional and real tiers on it; the gate
# runs on 2026.2.
#
# GATE_PROFILES=default,ceph makes `make test` run the gate on each profile
# named (default: the default profile only; the Ceph one adds ~20 minutes).

NOVA ?= 2026.2
DEFAULT_NOVA := 2026.2
CONSTRAINTS := constraints/$(NOVA).txt
PYTHON3 ?= python3
VENV ?= $(if $(filter $(DEFAULT_NOVA),$(NOVA)),.venv,.venv-$(NOVA))
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# Packages are installed with uv (pinned in the constraints, installed in
# the venv by pip): the same versions pip would pick from the same
# constraints, in 60% of pip's time (the requirements: 73 s with pip, 44 s
# with uv, its cache warm, bytecode compiled; measured 2026-11-28). Our
# own two distributions are installed by pip, as an operator does
# (tools/check-install): uv would reuse its cached build of a source tree
# whose setup.cfg did not change.
UV := $(VENV)/bin/uv
# --compile-bytecode: as pip does (uv does not by default). Where
# PYTHONDONTWRITEBYTECODE is set (as here and on CI) nothing writes the
# .pyc later: every process (each CLI the tests start, each of the gate's
# services) compiled Nova from source, and the unit tier took 45% longer.
PIP_INSTALL := $(UV) pip install -q --compile-bytecode --python $(PY) -c $(CONSTRAINTS)
PYTEST_ARGS ?=
PROFILE ?= default
GATE_PROFILES ?= default
export GATE_PROFILES
# The tiers in two pytest processes at once, a core each (one process used
# one core of two): the functional tier, the longest (its output saved and
# shown after), beside the unit tier and then the real tier. Not
# pytest-xdist: under Nova 33's eventlet the monkey-patched main thread of
# an xdist worker never hears execnet's native receiver thread; and the
# real tier's package-scoped daemons (a libvirtd, a one-node Ceph cluster
# in RAM) would be started once per worker. BALANCE: unit tests run beside
# the functional tier instead, to even the two processes out: the
# mypy-typo test (~30 s of one core), the wheel, bindep.txt (those three on
# the default release only) and the control plane's tests. Alone on this
# machine (2026-11-28), once the fake RPC driver stopped polling, the
# functional tier took 217 s (the mypy-typo test apart), the unit and
# real tiers 288 s, of which the wheel, bindep.txt and control plane's
# tests 22 s.
BALANCE := tests/unit/test_collaborators_typed.py tests/unit/test_wheel.py \
	tests/unit/test_bindep.py tests/unit/test_control_plane.py
# The stock tier (tests/stock) beside them too: stock Nova's own libvirt
# unit tests, run as shipped and twice with our driver in stock's place
# (stestr, two workers at nice 19), judged by tests/stock/differences.yaml,
# which lists Nova 34's tests: on the default release only until the list
# covers Nova 33.
STOCK_TIER := $(if $(filter $(DEFAULT_NOVA),$(NOVA)),tests/stock)
BESIDE_TIER := tests/functional $(STOCK_TIER) $(BALANCE)
TIERS := tests/unit tests/real $(addprefix --ignore=,$(BALANCE))
# The gate tier in a pytest process of its own: nothing the other tiers
# leave in their process (the functional tier's services left about 60
# idle threads, a third of a core, before tests/functional/conftest.py
# collected them) takes CPU from the gate's cloud.
GATE_TIER := $(if $(filter $(DEFAULT_NOVA),$(NOVA)),tests/gate)
# BESIDE_TESTS='<command>': a command run beside the tests, at the lowest
# CPU priority (nice 19), its output shown after theirs; make test fails
# if it fails. CI installs the next release's venv so (.ci/run), on the
# CPU the tests leave idle (little: both cores are busy most of a CI run,
# and the install took 426 s there where it takes about 75 s alone).
# Nothing it runs may wait on a clock: it gets only what the tests leave.
BESIDE_TESTS ?=
# Tests that check nothing of Nova (the wheel, bindep.txt, mypy) run on
# the default release only.
RELEASE_TESTS := $(if $(filter $(DEFAULT_NOVA),$(NOVA)),,-m 'not release_independent')

ifeq ($(wildcard $(CONSTRAINTS)),)
$(error NOVA=$(NOVA): no $(CONSTRAINTS); releases: $(patsubst constraints/%.txt,%,$(wildcard constraints/*.txt)))
endif

.PHONY: all demo test unit functional real bench bench-compare pep8 genconfig venv clean \
	gate gate-venv test-venv docs releasenotes

all: test

$(PY):
	$(PYTHON3) -m venv $(VENV)
	$(PIP) install -q --disable-pip-version-check -U pip setuptools wheel

$(UV): | $(PY)
	$(PIP) install -q --disable-pip-version-check -c $(CONSTRAINTS) uv

# System packages come first: libvirt-python builds against libvirt-dev.
# The demo's profile is what a venv and make demo need (no database,
# message queue or Ceph); the tests' adds the real tier's Ceph and the
# gate's cloud.
$(VENV)/.stamp-system-demo: bindep.txt | $(UV)
	$(PIP_INSTALL) bindep
	tools/install-system-packages.sh $(VENV)/bin/bindep demo
	touch $@

$(VENV)/.stamp-system: $(VENV)/.stamp-system-demo bindep.txt
	tools/install-system-packages.sh $(VENV)/bin/bindep test
	tools/link-ceph-bindings $(PY)
	touch $@

$(VENV)/.stamp-python: $(VENV)/.stamp-system-demo $(CONSTRAINTS) requirements.txt test-requirements.txt
	$(PIP_INSTALL) -r requirements.txt -r test-requirements.txt
	touch $@

# Our own package is installed (not editable) so that its entry points and
# the nova/virt/imgtype shim are where stock Nova looks for them. Installed
# as an operator would, with its requirements and without constraints: it
# must change nothing that is installed (Nova's version above all), and the
# driver must load (tools/check-install).
$(VENV)/.stamp-self: $(VENV)/.stamp-python setup.cfg setup.py pyproject.toml requirements.txt $(shell find nova_imgtype nova -name '*.py')
	tools/check-install $(PY)
	rm -rf build
	touch $@

# The tempest plugin, a distribution of its own, next to tempest (here the
# same venv): the unit tests check it as tempest sees it, the gate runs its
# scenarios.
TEMPEST_PLUGIN := nova-imgtype-tempest-plugin
$(VENV)/.stamp-tempest-plugin: $(VENV)/.stamp-python $(TEMPEST_PLUGIN)/setup.cfg $(TEMPEST_PLUGIN)/requirements.txt $(shell find $(TEMPEST_PLUGIN) -name '*.py')
	$(PIP) install -q --disable-pip-version-check -c $(CONSTRAINTS) ./$(TEMPEST_PLUGIN)
	rm -rf $(TEMPEST_PLUGIN)/build $(TEMPEST_PLUGIN)/*.egg-info
	touch $@

venv: $(VENV)/.stamp-self $(VENV)/.stamp-tempest-plugin

# What the test tiers need on top: the test profile's system packages.
test-venv: venv $(VENV)/.stamp-system

# The gate's services (keystone, glance, uwsgi, ...), next to Nova.
$(VENV)/.stamp-gate: $(VENV)/.stamp-self $(VENV)/.stamp-tempest-plugin $(VENV)/.stamp-system gate/requirements.txt $(CONSTRAINTS)
	@test "$(NOVA)" = "$(DEFAULT_NOVA)" || { \
	    echo "make gate runs on NOVA=$(DEFAULT_NOVA) only"; exit 2; }
	$(PIP_INSTALL) -r gate/requirements.txt
	touch $@

gate-venv: $(VENV)/.stamp-gate

test: $(if $(filter $(DEFAULT_NOVA),$(NOVA)),gate-venv,test-venv)
	status=0; beside=$$(mktemp); \
	$(if $(BESIDE_TESTS),also=$$(mktemp); ( started=$$(date +%s); \
	    nice -n 19 $(BESIDE_TESTS); rc=$$?; \
	    echo "beside the tests: $(BESIDE_TESTS) took $$(( $$(date +%s) - started )) s"; \
	    exit $$rc ) > $$also 2>&1 & also_pid=$$!;) \
	$(PY) -m pytest $(BESIDE_TIER) $(RELEASE_TESTS) $(PYTEST_ARGS) > $$beside 2>&1 & pid=$$!; \
	$(PY) -m pytest $(TIERS) $(RELEASE_TESTS) $(PYTEST_ARGS) || status=$$?; \
	wait $$pid || status=$$?; cat $$beside; rm -f $$beside; \
	$(if $(GATE_TIER),$(PY) -m pytest $(GATE_TIER) $(PYTEST_ARGS) || status=$$?;) \
	$(if $(BESIDE_TESTS),wait $$also_pid || status=$$?; cat $$also; rm -f $$also;) \
	exit $$status

unit: test-venv
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

functional: test-venv
	$(PY) -m pytest tests/functional $(PYTEST_ARGS)

real: test-venv
	$(PY) -m pytest tests/real $(PYTEST_ARGS)

gate: gate-venv
	$(PY) -m gate --profile $(PROFILE) $(if $(KEEP),--keep) $(if $(TIMING),--timing)

demo: venv
	$(PY) -m nova_imgtype_testing


# The time-to-first-disk benchmark serves its images from a real
# glance-api: the gate's services are needed.
bench: gate-venv
	$(PY) -m benchmarks

# Now (HEAD) against BASE, both in one run: make bench-compare BASE=<commit>
bench-compare: gate-venv
	$(if $(BASE),,$(error BASE=<commit> is needed))
	$(PY) -m benchmarks.compare $(BASE) $(BENCHMARKS)

pep8: venv
	$(VENV)/bin/ruff check nova_imgtype nova_imgtype_testing nova tests benchmarks gate $(TEMPEST_PLUGIN)
	$(VENV)/bin/mypy nova_imgtype nova_imgtype_testing gate benchmarks $(TEMPEST_PLUGIN)/nova_imgtype_tempest_plugin

# The manual and the release notes, warnings as errors, built in the
# default release's venv (the configuration reference lists the options
# through their oslo.config entry point: the package is installed there),
# with doc/requirements.txt added. tox -e docs / -e releasenotes build the
# same in environments of their own (a whole Nova installed again: two
# more minutes).
$(VENV)/.stamp-docs: $(VENV)/.stamp-self doc/requirements.txt $(CONSTRAINTS)
	@test "$(NOVA)" = "$(DEFAULT_NOVA)" || { \
	    echo "make docs builds on NOVA=$(DEFAULT_NOVA) only"; exit 2; }
	$(PIP_INSTALL) -r doc/requirements.txt
	touch $@

docs: $(VENV)/.stamp-docs
	$(VENV)/bin/sphinx-build -a -E -W --keep-going -b html -d doc/build/doctrees doc/source doc/build/html

releasenotes: $(VENV)/.stamp-docs
	$(VENV)/bin/reno lint
	$(VENV)/bin/sphinx-build -a -E -W --keep-going -b html -d releasenotes/build/doctrees releasenotes/source releasenotes/build/html

genconfig: venv
	$(VENV)/bin/oslo-config-generator --config-file etc/oslo-config-generator/nova-imgtype.conf

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache \
	    $(TEMPEST_PLUGIN)/build $(TEMPEST_PLUGIN)/*.egg-info
