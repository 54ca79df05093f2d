"""Benchmarks that need root: switch forwarding rate and transport goodput."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from dlcp.runs import machine_lock


@contextlib.contextmanager
def machine_to_itself(bench: str) -> Iterator[None]:
    """The machine's run lock for `bench` (`dlcp bench switch`): a bench measures the machine, and
    its namespaces and switch processes must not meet a run's (dlcp/runs/machine_lock.py); one
    line and exit 2 when a run or another bench has it."""
    try:
        with machine_lock.held(bench):
            yield
    except machine_lock.MachineBusy as e:
        raise SystemExit(f"{bench}: {e}") from None
