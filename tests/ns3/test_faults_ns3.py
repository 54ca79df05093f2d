"""Fault injection on ns-3, where it applies (the emulated backends' cases are in
tests/root/test_faults_emulated.py): the process of a run killed mid-simulation on its worker is
named, with meta.json's end written for it; one stopped by Ctrl-C or SIGTERM writes what it
simulated; a --run-dir that holds a run is refused and
kept; two ns-3 series at once (the same --out and --name, started together) are not refused (runs
share nothing there) and each gets a results directory of its own."""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from agent_runs import read_csv
from cli_runs import run_experiment
from ns3_scripts import leaf_spine4, tiny_ps

from simulation.ns3.hosts import core_missing

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(core_missing() is not None, reason=str(core_missing()))

PS = tiny_ps(iterations=3)

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


def forked_run(series: subprocess.Popen) -> psutil.Process | None:
    """The process of a run on the series' local cluster: forked from a worker process (the same
    command line as its parent, which the series' process spawned)."""
    for proc in psutil.Process(series.pid).children(recursive=True):
        try:
            parent = proc.parent()
            if parent is not None and parent.pid != series.pid and proc.cmdline() == parent.cmdline():
                return proc
        except psutil.NoSuchProcess:
            continue
    return None


def test_a_killed_simulation_is_named_and_its_series_says_so(tmp_path):
    """SIGKILL to the forked process of the first run of a series (on the local cluster, one worker:
    one run at a time): the run is named in one line with its pid, meta.json says how it ended
    (the run could not), the partial run is kept; the other run runs (a run that fails costs only
    itself on a cluster: docs/runs.md) and the series exits 1."""
    cfg = tmp_path / "long.toml"
    cfg.write_text(LONG_RING)
    out = tmp_path / "out"
    p = dlcp_run(str(cfg), "--vary", "workload.iterations=100000,2", "--jobs", "1", "--out", str(out), "--no-report")
    try:
        deadline = time.monotonic() + 120
        child = forked_run(p)
        while child is None and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
            child = forked_run(p)
        assert child is not None, p.communicate()[1][-3000:]
        # the run writes its output (logs/worker.log) and meta.json in its staging directory
        staging = Path(os.readlink(f"/proc/{child.pid}/fd/1")).parent.parent
        while not (staging / "meta.json").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2)  # into the simulation
        os.kill(child.pid, signal.SIGKILL)
        _, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 1, err[-3000:]
    why = f"the process of run 100000 (pid {child.pid}) was killed by SIGKILL"
    assert f"dlcp run: [100000] error on worker 0 ({platform.node()})\n  {why}\n" in err, err[-3000:]
    (results,) = out.iterdir()
    meta = json.loads((results / "100000" / "meta.json").read_text())
    assert meta["status"] == "error" and meta["error"] == why and meta["wall_s"] >= 2, meta
    assert f"partial run: {results / '100000'} (no iteration finished; no switch counters)" in err, err[-3000:]
    assert json.loads((results / "2" / "meta.json").read_text())["status"] == "ok"  # the rest of the series ran
    assert f"1 of 2 runs did not finish (see above); rerun them with --resume {results}" in err, err[-3000:]


@pytest.mark.parametrize(
    "sig, code, status", [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")]
)
def test_a_stopped_simulation_writes_what_it_simulated(tmp_path, sig, code, status):
    """Ctrl-C or SIGTERM mid-simulation ends the simulation after the event it is in: every host's
    records up to there are written, meta.json says how far it got, and the partial report is
    written, as for an emulated run whose agents were stopped."""
    cfg = tmp_path / "long.toml"
    cfg.write_text(LONG_RING)
    run = tmp_path / "run"
    p = dlcp_run(str(cfg), "--run-dir", str(run))
    lines: list[str] = []
    try:
        assert p.stderr is not None
        for line in p.stderr:  # the simulation's progress: past its first iteration
            lines.append(line)
            if line.startswith("[") and " iterations " in line:
                break
        time.sleep(1)
        p.send_signal(sig)
        _, rest = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    err = "".join(lines) + rest
    assert p.returncode == code, err[-3000:]
    meta = json.loads((run / "meta.json").read_text())
    done = meta["simulation"]["iterations_done"]
    assert meta["status"] == status and done >= 1 and "error" not in meta["simulation"], meta
    for h in ("h1", "h2", "h3", "h4"):
        assert len(read_csv(run / "records" / f"{h}-iterations.csv")) >= done
        assert json.loads((run / "records" / f"{h}-agent.json").read_text())["iterations_done"] >= done
    assert f"partial run: {run} ({done} of 100000 iterations)" in err, err[-3000:]
    assert (run / "report.html").exists() and "PARTIAL" in (run / "report.md").read_text().splitlines()[0]


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
