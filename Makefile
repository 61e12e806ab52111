# Two commands for a user: `make demo` and `make test`. Both set the environment up on first use
# (virtual environment, pinned dependencies, ROS 2 interface build) and reuse it afterwards.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
DURATION ?= 60
PYTEST_ARGS ?=

LEROBOT_VENV ?= .venv-lerobot
LEROBOT_STAMP := $(LEROBOT_VENV)/.ready
LEROBOT06_VENV ?= .venv-lerobot06
LEROBOT06_STAMP := $(LEROBOT06_VENV)/.ready
# openpi's own client from PyPI (it pins numpy<2, so a venv of its own): the openpi gateway's tests
# run it as an unmodified robot would, and bench/serving_vs_openpi.py runs openpi's serving pattern.
OPENPI_VENV ?= .venv-openpi
OPENPI_STAMP := $(OPENPI_VENV)/.ready

DEPS_STAMP := $(VENV)/.deps-installed
PKG_STAMP := $(VENV)/.package-installed
IFACE_STAMP := $(VENV)/.interfaces-built
INTERFACE_SOURCES := $(wildcard msg/*.msg srv/*.srv) interfaces/CMakeLists.txt interfaces/package.xml

.PHONY: setup demo demo-pipeline test test-stress bench clean distclean lerobot-reference colcon-tools rqt-tools

setup: $(DEPS_STAMP) $(IFACE_STAMP) $(PKG_STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade "pip>=24" "setuptools>=70" wheel

$(DEPS_STAMP): requirements.txt requirements-ros-distro.txt constraints.txt | $(PY)
	$(PY) -m pip install -q -c constraints.txt -r requirements.txt
	touch $@

$(IFACE_STAMP): $(INTERFACE_SOURCES) scripts/build_interfaces.py $(DEPS_STAMP)
	$(PY) scripts/build_interfaces.py
	touch $@

# The editable install plus the layout a colcon install has (ament index marker, share/physai_ros
# linked to this checkout, lib/physai_ros executables), so ROS tools find the package in the venv;
# lab/ (physai_lab: training, evaluation, simulators the tests and benchmarks use) and bench/'s
# library (physai_bench), editable.
$(PKG_STAMP): setup.py setup.cfg lab/setup.py bench/setup.py scripts/install_ament_layout.py $(wildcard launch/* config/*) $(DEPS_STAMP)
	$(PY) -m pip install -q -c constraints.txt --no-deps --no-build-isolation -e .
	$(PY) -m pip install -q -c constraints.txt --no-deps --no-build-isolation -e lab
	$(PY) -m pip install -q -c constraints.txt --no-deps --no-build-isolation -e bench
	$(PY) scripts/install_ament_layout.py > /dev/null
	touch $@

# Debian's colcon builds a colcon install of the repository in test/packaging (what a ROS 2 user
# runs). Installed on first use when we may (root, as in CI); otherwise the message says how.
colcon-tools:
	@command -v colcon > /dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq colcon python3-colcon-ros > /dev/null; } || \
		{ echo "make: the colcon install test needs Debian's colcon: sudo apt-get install colcon python3-colcon-ros" >&2; exit 1; }

# rqt's widgets (rqt_robot_monitor, rqt_plot) need Qt, which is not on PyPI for them: Debian's PyQt5
# (with QtSvg, for matplotlib's Qt backend) and Xvfb for a display (test/ros/test_ros2_launch.py).
rqt-tools:
	@{ [ -d /usr/lib/python3/dist-packages/PyQt5 ] && [ -f /usr/lib/python3/dist-packages/PyQt5/QtSvg.abi3.so ] && \
		command -v Xvfb > /dev/null; } || { [ "$$(id -u)" = 0 ] && apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pyqt5 python3-pyqt5.qtsvg xvfb > /dev/null; } || \
		{ echo "make: the rqt tests need Debian's Qt and Xvfb: sudo apt-get install python3-pyqt5 python3-pyqt5.qtsvg xvfb" >&2; exit 1; }

# The LeRobot reference (lerobot 0.3.2) lives in its own venv so its pins never touch ours;
# the engine's equivalence tests run it live (docs/lerobot_reference.md).
$(LEROBOT_STAMP): scripts/lerobot_reference/requirements.txt scripts/lerobot_reference/setup_venv.sh constraints.txt
	LEROBOT_VENV=$(LEROBOT_VENV) PYTHON=$(PYTHON) bash scripts/lerobot_reference/setup_venv.sh

# The second reference, lerobot 0.6.1 (PI05 and 0.6-format PI0), in its own venv: installed with
# --no-deps on Python 3.11 beside torch 2.13 with its PEP 695 lines rewritten (docs/lerobot_reference.md).
$(LEROBOT06_STAMP): scripts/lerobot_reference/requirements06.txt scripts/lerobot_reference/setup_venv06.sh \
		scripts/lerobot_reference/patch_pep695.py constraints.txt
	LEROBOT06_VENV=$(LEROBOT06_VENV) PYTHON=$(PYTHON) bash scripts/lerobot_reference/setup_venv06.sh

lerobot-reference: $(LEROBOT_STAMP) $(LEROBOT06_STAMP)

$(OPENPI_STAMP): bench/openpi_baseline/requirements.txt bench/openpi_baseline/setup_venv.sh
	OPENPI_VENV=$(OPENPI_VENV) PYTHON=$(PYTHON) bash bench/openpi_baseline/setup_venv.sh

demo: setup
	$(VENV)/bin/physai-fleet --duration $(DURATION)

# The task-pipeline fleet (docs/pipelines.md "The pipeline demo"): planner, safety and
# monitor beside the action model; the summary prints per-component counters.
PIPELINE_DURATION ?= 60
demo-pipeline: setup
	$(VENV)/bin/physai-fleet --fleet config/fleet_pipeline.yaml --duration $(PIPELINE_DURATION) \
		--summary-json out/demo_pipeline_summary.json --contact-sheet out/demo_pipeline_contact_sheet.png \
		--log-dir out/fleet_pipeline_logs

test: setup $(LEROBOT_STAMP) $(LEROBOT06_STAMP) $(OPENPI_STAMP) colcon-tools rqt-tools
	$(PY) scripts/run_tests.py $(PYTEST_ARGS)

# The suite beside STRESS_PER_CORE busy processes per core (default 2, at STRESS_NICE niceness,
# default 0: they compete as another user's jobs would). Run it before submitting a change to a
# test that starts real processes; the burners stop with the run.
STRESS_PER_CORE ?= 2
STRESS_NICE ?= 0
test-stress: setup $(LEROBOT_STAMP) $(LEROBOT06_STAMP) $(OPENPI_STAMP) colcon-tools
	$(PY) scripts/run_under_load.py --per-core $(STRESS_PER_CORE) --nice $(STRESS_NICE) -- \
		$(PY) scripts/run_tests.py $(PYTEST_ARGS)

# Every benchmark entry at full size, one after another, then the README's performance summary and
# docs/results.md from the results files (docs/benchmarks.md; `bench/suite.py --list` names them).
bench: setup $(OPENPI_STAMP)
	$(PY) bench/suite.py

clean:
	rm -rf build .pytest_cache

distclean: clean
	rm -rf $(VENV) $(LEROBOT_VENV) $(LEROBOT06_VENV) $(OPENPI_VENV)
