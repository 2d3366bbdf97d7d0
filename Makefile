# MotionVL: every target sets itself up first (a .venv beside this file), so a fresh clone with
# only python3 needs nothing else. Set-up is skipped while the requirements files and setup.py are
# unchanged (a stamp file named after their hash).
#
#   make demo    run the main job on embedded defaults (the language loop, quick preset, offline backends)
#   make test    run the test suite (pytest)
#   make bench   print measured throughput figures
#   make setup   only the set-up

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# runtime, ROS 2 wheels (pip-only route), test tools: see requirements.txt
REQUIREMENTS := requirements.txt requirements-ros.txt requirements-test.txt
SETUP_HASH := $(shell cat $(REQUIREMENTS) setup.py | sha256sum | cut -c1-16)
STAMP := $(VENV)/.motionvl-setup-$(SETUP_HASH)
# The ROS interfaces (msg/, srv/, action/) generated from the ROS 2 wheels with cmake and g++ (1-4 minutes
# on 2 cores, tools/build_interfaces.py): rebuilt only when they, the build or the ROS wheels change.
INTERFACE_FILES := $(sort $(wildcard msg/*.msg srv/*.srv action/*.action)) CMakeLists.txt package.xml \
	tools/build_interfaces.py requirements-ros.txt
INTERFACES_HASH := $(shell cat $(INTERFACE_FILES) | sha256sum | cut -c1-16)
INTERFACES_STAMP := $(VENV)/.motionvl-interfaces-$(INTERFACES_HASH)
# Shared libraries MuJoCo's headless (EGL) rendering loads, and the Debian packages providing them.
EGL_LIBS := libEGL.so.1 libOpenGL.so.0
APT_PACKAGES := libegl1 libopengl0 libegl-mesa0 libgl1-mesa-dri
# Tools the interface build needs, and their Debian packages.
BUILD_TOOLS := cmake g++
BUILD_PACKAGES := cmake g++

# Environment of every test and demo run: ROS discovery stays on this machine, each run gets its
# own DDS domain (1..100, from the shell's PID), rendering is headless, no model hub is contacted.
RUN_ENV = ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST ROS_DOMAIN_ID=$${ROS_DOMAIN_ID:-$$(( $$$$ % 100 + 1 ))} \
	MUJOCO_GL=$${MUJOCO_GL:-egl} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
PYTEST_ARGS ?=
# pip warns once per package about index locations of this machine's pip config that do not
# exist; hidden so real errors stand out (pip's exit status is kept by pipefail).
PIP_NOISE := is ignored: it is neither a file nor a directory

.PHONY: help setup system-deps test demo bench clean

help:
	@echo "make demo   - the language loop on embedded defaults: \"walk forward with straight knees\", quick preset,"
	@echo "              offline backends -> out/train/policy.onnx, report.html and videos (see README)"
	@echo "make test   - run the test suite"
	@echo "make bench  - benchmarks: sim, train and render throughput, then a 60 min time-to-walk run"
	@echo "make setup  - create .venv and install (done by the targets above when needed)"

setup: $(STAMP) $(INTERFACES_STAMP)

$(STAMP): $(REQUIREMENTS) setup.py
	@$(MAKE) --no-print-directory system-deps
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q $(addprefix -r ,$(REQUIREMENTS)) 2>&1 | { grep -v "$(PIP_NOISE)" || true; }
	$(BIN)/python -m pip install -q -e . --no-deps 2>&1 | { grep -v "$(PIP_NOISE)" || true; }
	@rm -f $(VENV)/.motionvl-setup-*
	@touch $@
	@echo "setup done: $(VENV) ($(SETUP_HASH))"

$(INTERFACES_STAMP): $(STAMP) $(INTERFACE_FILES)
	$(BIN)/python tools/build_interfaces.py --build-dir build/interfaces
	@rm -f $(VENV)/.motionvl-interfaces-*
	@touch $@

# libEGL for MuJoCo's headless renderer and the interface build's compilers: installed when missing and
# running as root, else reported (tests that render skip with a reason when EGL is unusable).
system-deps:
	@tools=""; for tool in $(BUILD_TOOLS); do command -v $$tool >/dev/null || tools="$$tools $$tool"; done; \
	libs=""; for lib in $(EGL_LIBS); do ldconfig -p | grep -q "$$lib" || libs="$$libs $$lib"; done; \
	if [ -z "$$tools$$libs" ]; then exit 0; fi; \
	packages="$${tools:+$(BUILD_PACKAGES)} $${libs:+$(APT_PACKAGES)}"; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing $$packages (missing:$$tools$$libs)"; \
		DEBIAN_FRONTEND=noninteractive apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$packages; \
	elif [ -n "$$tools" ]; then \
		echo "error: missing$$tools to build the ROS interfaces; install: apt-get install $(BUILD_PACKAGES)" >&2; exit 1; \
	else \
		echo "warning: missing$$libs for headless rendering (MUJOCO_GL=egl); install: apt-get install $(APT_PACKAGES)"; \
	fi

# The linter first (ruff.toml: unused or undefined names, late-bound loop variables, ...), then pytest.
# A test past pytest-timeout's 600 s that its signal cannot stop (a C call that holds the GIL) is ended at 660 s
# by faulthandler, which prints every thread's stack first: a hang fails the run with its cause, not in silence.
PYTEST_GUARDS := --timeout=600 -o faulthandler_timeout=660 -o faulthandler_exit_on_timeout=true
test: setup
	$(BIN)/ruff check --quiet .
	@set +e; $(RUN_ENV) $(BIN)/python -m pytest tests -q $(PYTEST_GUARDS) -p no:cacheprovider $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests" >&2; exit 1; fi; exit $$rc

# The quick preset is an iteration budget (~810 PPO iterations): a slower machine takes longer rather than training
# less. Running it again continues the same search (--resume) instead of starting over.
DEMO_TASK := walk forward with straight knees
DEMO_OUT := out/train
demo: setup
	$(RUN_ENV) $(BIN)/motionvl train --task "$(DEMO_TASK)" --preset quick --out $(DEMO_OUT) \
		$$(test -f $(DEMO_OUT)/ledger.jsonl && echo --resume)

# Throughput first (minutes), then the time-to-walk run (60 min of training plus evaluations).
bench: setup
	$(RUN_ENV) $(BIN)/motionvl bench sim --envs 64
	$(RUN_ENV) $(BIN)/motionvl bench sim --envs 256
	$(RUN_ENV) $(BIN)/motionvl bench train --seconds 30
	$(RUN_ENV) $(BIN)/motionvl bench render
	$(RUN_ENV) $(BIN)/python bench/time_to_walk.py --minutes 60 --eval-every 5 --out runs/time_to_walk

clean:
	rm -rf build *.egg-info src/*.egg-info out/demo out/train $(VENV)/.motionvl-interfaces-*
