"""Fault injection on ns-3, where it applies (the emulated backends' cases are in
tests/root/test_faults_emulated.py): the process of a forked run killed mid-simulation is named and
ends the series with meta.json's end written for it; a --run-dir that holds a run is refused and
kept; two ns-3 series at once (the same --out and --name, started together) are not refused (runs
share nothing there) and each gets a results directory of its own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_runs import run_experiment
from ns3_scripts import leaf_spine4

from simulation.ns3.hosts import core_missing

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(core_missing() is not None, reason=str(core_missing()))

PS = """
name = "tiny-ps"
backend = "ns3"
timeout_s = 20
[topology]
hosts = 4
[links]
host_mbps = 50
[workload]
mode = "ps"
workers = 2
model = "synthetic"
iterations = 3
compute_ms = 5
"""

LONG_RING = (
    leaf_spine4("long-ring", 50).replace("timeout_s = 20", "timeout_s = 10000")
    + """
model = "synthetic"
iterations = 100000
"""
)


def dlcp_run(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "dlcp_cli", "run", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_killed_simulation_is_named_and_ends_the_series(tmp_path):
    """SIGKILL to the forked process of the first run of `--policies fifo,dlcp`: the series names
    it in one line and stops there, and meta.json says how the run ended (the run could not)."""
    cfg = tmp_path / "long.toml"
    cfg.write_text(LONG_RING)
    out = tmp_path / "out"
    p = dlcp_run(str(cfg), "--policies", "fifo,dlcp", "--out", str(out), "--no-report")
    try:
        deadline = time.monotonic() + 120
        while not list(out.glob("*/fifo/meta.json")) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert p.poll() is None, p.communicate()[1][-3000:]
        (child,) = [int(c) for c in Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()]
        time.sleep(2)  # into the simulation
        os.kill(child, signal.SIGKILL)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 1, err[-3000:]
    why = f"the process of run fifo (pid {child}) was killed by SIGKILL"
    assert f"dlcp run: failed: {why}\n" in err, err[-3000:]
    (results,) = out.iterdir()
    meta = json.loads((results / "fifo" / "meta.json").read_text())
    assert meta["status"] == "error" and meta["error"] == why and meta["wall_s"] >= 2, meta
    assert f"partial run: {results / 'fifo'} (no iteration finished; no switch counters)" in err, err[-3000:]
    assert not (results / "dlcp").exists()  # the series stopped there


def test_a_run_dir_that_holds_a_run_is_refused_and_kept(tmp_path):
    cfg = tmp_path / "ps.toml"
    cfg.write_text(PS)
    run = run_experiment(cfg, tmp_path / "run", "workload.iterations=2")
    files = {f: f.read_bytes() for f in run.rglob("*") if f.is_file()}
    p = dlcp_run(str(cfg), "--run-dir", str(run))
    _, err = p.communicate(timeout=300)
    assert p.returncode == 2 and err == (
        f"dlcp run: --run-dir '{run}': holds a run already; run directories are never reused (give a new or "
        "empty one)\n"
    ), err
    assert {f: f.read_bytes() for f in run.rglob("*") if f.is_file()} == files


def test_two_series_at_once_run_side_by_side(tmp_path):
    """ns-3 runs share nothing (dlcp/backends.py, parallel_runs): two series started together with
    the same --out and --name both run, each into a directory of its own (they used to share one
    when started in the same second)."""
    cfg = tmp_path / "ps.toml"
    cfg.write_text(PS)
    out = tmp_path / "out"
    procs = [dlcp_run(str(cfg), "--out", str(out), "--name", "same", "--no-report") for _ in range(2)]
    errs = [p.communicate(timeout=600)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    dirs = sorted(out.iterdir())
    assert len(dirs) == 2 and all(d.name.endswith("-tiny-ps") for d in dirs)
    for d in dirs:
        assert [q.name for q in d.iterdir()] == ["same"]
        assert json.loads((d / "same" / "meta.json").read_text())["status"] == "ok"
        assert len((d / "same" / "records" / "h1-iterations.csv").read_text().splitlines()) == 1 + 3
