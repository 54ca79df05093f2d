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

.PHONY: setup demo test p4 gen clean bench

setup:
	@scripts/setup.sh

# fifo vs dlcp, 8 interleaved pairs (a new seed per pair), compared with 95 % confidence intervals
demo: setup
	$(AS_ROOT) $(DLCP) run experiments/ps-incast.toml --policies fifo,dlcp --repeat 8 $(DEMO_ARGS)

# As root: one pytest run. Otherwise the tests that need root run as root (sudo), the rest as you
# (either half may select no test: PYTEST_ARGS can name a few files).
test: setup
ifeq ($(IS_ROOT),yes)
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)
else
	$(VENV)/bin/python -m pytest -m "not root and not bmv2" $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(AS_ROOT) $(VENV)/bin/python -m pytest -p no:cacheprovider -m "root or bmv2" $(PYTEST_ARGS) || [ $$? -eq 5 ]
endif

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
