"""A short emulated experiment for the root and bmv2 tiers: its config, where its runs land, and a
fixture that fails a test which leaves processes, node shells or links behind."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from agent_runs import read_csv

from emulation import clean, procs

__all__ = ["DLCP", "ROOT", "SHORT", "assert_clean", "clean_machine", "read_csv", "run_dirs", "write_config"]

ROOT = Path(__file__).resolve().parents[2]
DLCP = [sys.executable, "-m", "dlcp_cli"]

SHORT = """
name = "short"
backend = "{backend}"
timeout_s = {timeout}
[topology]
kind = "star"
hosts = 4
[links]
host_mbps = 100
[workload]
mode = "ps"
workers = 2
model = "{model}"
iterations = {iterations}
batch_size = 16
eval_every = 2
[dlcp]
policy = "dlcp"
[[background]]
kind = "udp_onoff"
dst = "ps"
rate_mbps = 30
on_ms = 20
off_ms = 30
"""


def write_config(tmp_path: Path, iterations=4, model="cnn", timeout=120, backend="builtin") -> Path:
    p = tmp_path / "short.toml"
    p.write_text(SHORT.format(iterations=iterations, model=model, timeout=timeout, backend=backend))
    return p


def leftovers() -> dict:
    return {
        "links": clean._our_links(),
        "node_shells": clean._mininet_shells(),
        "recorded": [p for p in procs.recorded() if procs.is_ours_and_alive(p)],
    }


def assert_clean():
    assert leftovers() == {"links": [], "node_shells": [], "recorded": []}


@pytest.fixture(autouse=True)
def clean_machine():
    assert_clean()  # another test's mess must not be blamed on this one
    yield
    left = leftovers()
    clean.clean(verbose=False)
    assert left == {"links": [], "node_shells": [], "recorded": []}, "the test left things behind"


def run_dirs(out: Path) -> list[Path]:
    return sorted(p for p in out.glob("*/*") if (p / "meta.json").exists())
