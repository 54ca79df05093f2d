# Make targets wrap the `dlcp` CLI; every target sets the machine up first (idempotent, quick when done).
VENV ?= .venv
DLCP := $(VENV)/bin/dlcp
PYTEST_ARGS ?=

.PHONY: setup demo test p4 clean bench

setup:
	@scripts/setup.sh

# fifo vs dlcp, 5 interleaved pairs (a new seed per pair), compared with 95 % confidence intervals
demo: setup
	$(DLCP) run experiments/ps-incast.toml --policies fifo,dlcp --repeat 5

test: setup
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

p4: setup
	$(DLCP) build

bench: setup
	$(DLCP) bench tagging
	$(DLCP) bench transport

clean: setup
	$(DLCP) clean
