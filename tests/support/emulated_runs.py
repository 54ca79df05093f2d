"""A short emulated experiment for the root and bmv2 tiers: its config, where its runs land, a long
run started in the background and waited on, and a fixture that fails a test which leaves
processes, node shells or links behind."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agent_runs import read_csv

from emulation import clean, procs

__all__ = [
    "DLCP",
    "ROOT",
    "SHORT",
    "assert_clean",
    "clean_machine",
    "finish",
    "read_csv",
    "run_dirs",
    "start_long_run",
    "wait_for_progress",
    "write_config",
]

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


def write_config(
    tmp_path: Path, iterations=4, model="cnn", timeout=120, backend="builtin", dumbbell: bool = False
) -> Path:
    """SHORT as tmp_path/short.toml; `dumbbell`: two switches, two hosts on each (workers on s1,
    the PS and the background sender on s2)."""
    p = tmp_path / "short.toml"
    text = SHORT.format(iterations=iterations, model=model, timeout=timeout, backend=backend)
    if dumbbell:
        text = text.replace('kind = "star"\nhosts = 4', 'kind = "dumbbell"\nhosts_left = 2\nhosts_right = 2')
    p.write_text(text)
    return p


def start_long_run(
    tmp_path: Path, stdout=subprocess.DEVNULL, report: bool = False, args: tuple[str, ...] = (), **config
) -> subprocess.Popen:
    """`dlcp run` of a long experiment (write_config's `config` keywords) into tmp_path/r, in the
    background (stderr piped)."""
    cfg = write_config(tmp_path, **{"iterations": 500, "timeout": 600, **config})
    return subprocess.Popen(
        DLCP + ["run", str(cfg), "--out", str(tmp_path / "r"), *args] + ([] if report else ["--no-report"]),
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def finish(proc: subprocess.Popen, timeout: float) -> str:
    """`proc`'s stderr once it ends; a run still going after `timeout` s is stopped (SIGTERM: it
    cleans up) and fails the test, so a hung run never outlives its test."""
    try:
        return proc.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=120)[1]
        raise AssertionError(f"still running after {timeout:g} s (stopped now):\n{err[-3000:]}") from None


def wait_for_progress(run_parent: Path, proc: subprocess.Popen, timeout=120, min_iter: int = 1) -> Path:
    """The run directory under `run_parent` once its h1 finished `min_iter` iterations."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        for prog in run_parent.glob("*/*/progress/h1"):
            try:
                if json.loads(prog.read_text()).get("iter", 0) >= min_iter:
                    return prog.parents[1]
            except ValueError:
                pass
        time.sleep(0.2)
    raise AssertionError("the run made no progress")


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
