# Make targets wrap the `dlcp` CLI; every target but gen sets the machine up first (idempotent, quick when done).
# Run them as yourself: what needs root (Debian packages, Mininet's network namespaces) goes through
# scripts/as-root (sudo when you are not root); the venv, results and reports stay yours. As root,
# e.g. in a container without sudo, everything runs directly.
VENV ?= .venv
DLCP := $(VENV)/bin/dlcp
PYTEST_ARGS ?=
DEMO_ARGS ?=
AS_ROOT := scripts/as-root
IS_ROOT := $(shell [ "$$(id -u)" -eq 0 ] && echo yes)

.PHONY: setup setup-test demo test test-unit lint p4 gen clean bench

# what the demo needs (the built-in switch); setup-test adds the test tools, the ns-3 simulator
# (the sim extra: about 4 minutes the first time), the bmv2 control plane, the model libraries of
# `dlcp profile` (models) and Chakra (chakra), whose tests run on real models and real ET files
setup:
	@scripts/setup.sh

setup-test:
	@DLCP_EXTRAS=dev,bmv2,sim,models,chakra scripts/setup.sh

# fifo vs dlcp, 8 interleaved pairs (a new seed per pair), compared with 95 % confidence intervals
demo: setup
	$(AS_ROOT) $(DLCP) run experiments/ps-incast.toml --policies fifo,dlcp --repeat 8 $(DEMO_ARGS)

# Every tier this machine can run: tests/unit, tests/ns3, tests/root and tests/bmv2 (skipped with the
# reason where p4c/bmv2 are absent). As root: one pytest run. Otherwise the tests that need root run
# as root (sudo), the rest as you (either half may select no test: PYTEST_ARGS can name a few files).
test: setup-test
ifeq ($(IS_ROOT),yes)
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)
else
	$(VENV)/bin/python -m pytest -m "not root" $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(AS_ROOT) $(VENV)/bin/python -m pytest -p no:cacheprovider -m root $(PYTEST_ARGS) || [ $$? -eq 5 ]
endif

# the fast tier: no root, no simulator, no switch process (a few minutes)
test-unit: setup-test
	$(VENV)/bin/python -m pytest tests/unit $(PYTEST_ARGS)

# what CI fails on besides the tests: ruff's rules and format (pyproject.toml), mypy on dlcp/, the C
# and C++ style (.clang-format; `scripts/c-format` rewrites the files)
lint: setup-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	scripts/c-format --check

p4: setup
	$(DLCP) build

# P4, C and doc views of dlcp/wire/layout.py and dlcp/network/pipeline_names.py (no root needed)
gen:
	$(VENV)/bin/python -m dlcp.codegen

bench: setup
	$(DLCP) bench tagging
	$(AS_ROOT) $(DLCP) bench transport

clean: setup
	$(AS_ROOT) $(DLCP) clean
