# Make targets wrap the `dlcp` CLI; every target but gen sets the machine up first (idempotent, quick when done).
VENV ?= .venv
DLCP := $(VENV)/bin/dlcp
PYTEST_ARGS ?=

.PHONY: setup demo test p4 gen clean bench

setup:
	@scripts/setup.sh

demo: setup
	$(DLCP) run experiments/ps-incast.toml --policies fifo,dlcp

test: setup
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

p4: setup
	$(DLCP) build

# P4, C and doc views of dlcp/wire/layout.py and dlcp/network/pipeline_names.py (no root needed)
gen:
	$(VENV)/bin/python -m dlcp.codegen

bench: setup
	$(DLCP) bench tagging
	$(DLCP) bench transport

clean: setup
	$(DLCP) clean
