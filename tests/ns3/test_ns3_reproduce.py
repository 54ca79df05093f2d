"""`dlcp reproduce --full` end to end on ns-3: a tiny claim (WFBP against DeAR, 4 workers on a
leaf-spine) runs its series through the series runner with named variants and paired repeats, and reproduce.md carries the packet-level figure with the
series' directory. The claims of experiments/papers run the same path at their scale (docs/reproduce.md)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from ns3_scripts import leaf_spine4

from simulation.ns3.hosts import core_missing

CLAIM = """
id = "tiny"
title = "DeAR over WFBP, 4 workers"
paper = "test"
claim = "DeAR is faster"

[figure]
kind = "up to"
speedup = 1.5
quote = "q"
source = "[D] test"

[[setup]]
aspect = "workers"
theirs = "4"
source = "-"
ours = "4"

[fast]
model = "timeline"
workers = 4
rate_gbps = 0.05
profiles = ["resnet-digits-b32"]

[[fast.versus]]
label = "DeAR vs WFBP"
ours = "dear"
baselines = ["wfbp"]

[full]
repeat = 2
metric = "rank_iteration_p50"
also = ["rank_comm_p50"]

[[full.series]]
name = "tiny"
experiment = "tiny.toml"
variants = { wfbp = ["comm.scheduler=wfbp"], dear = ["comm.scheduler=dear"] }
versus = { dear = "DeAR vs WFBP" }
"""


def tiny_claim(tmp_path: Path) -> None:
    claim = tmp_path / "papers" / "tiny"
    claim.mkdir(parents=True)
    (claim / "claim.toml").write_text(CLAIM)
    (claim / "tiny.toml").write_text(
        leaf_spine4("tiny", 50)
        + 'model = "synthetic"\niterations = 4\nwarmup_iterations = 1\ncompute_ms = 4\n'
        + "layers = [20000, 20000, 20000]\n[dlcp]\nreliable = true\nresync_every = 0\n"
    )


@pytest.mark.skipif(core_missing() is not None, reason=str(core_missing()))
def test_full_runs_the_claims_series_on_ns3(tmp_path):
    from simulation.ns3 import loader

    if reason := loader.available():
        pytest.skip(reason)
    tiny_claim(tmp_path)
    out = tmp_path / "out"
    p = subprocess.run(
        [sys.executable, "-m", "dlcp_cli", "reproduce", "tiny", "--full", "--claims-dir", str(tmp_path / "papers")]
        + ["--out", str(out), "--jobs", "2"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert "4 runs on a local cluster of 2 worker processes" in p.stderr  # --jobs reached the series
    data = json.loads((out / "reproduce.json").read_text())
    full = [r for r in data["results"] if r["mode"] == "full"]
    assert len(full) == 1 and full[0]["comparison"] == "DeAR vs WFBP [tiny]"
    assert full[0]["ours"] is not None and full[0]["wall_s"] > 0
    # two pairs give no 95 % interval: the packet-level figure judges no direction
    assert full[0]["interval"] is None and full[0]["direction"] == "no interval"
    series = Path(full[0]["results"])
    assert (series / "compare.json").is_file() and sorted(p.name for p in (series / "dear").iterdir()) == [
        "rep1",
        "rep2",
    ]
    assert "rank_comm_p50" in full[0]["also"]
    md = (out / "reproduce.md").read_text()
    assert "DeAR vs WFBP [tiny]" in md and str(series) in md


@pytest.mark.skipif(core_missing() is not None, reason=str(core_missing()))
def test_sigterm_during_full_stops_with_143_and_no_traceback(tmp_path):
    """SIGTERM while a series runs: the series runner says where it stopped, `dlcp reproduce`
    exits 143 without a traceback."""
    from simulation.ns3 import loader

    if reason := loader.available():
        pytest.skip(reason)
    tiny_claim(tmp_path)
    p = subprocess.Popen(
        [sys.executable, "-m", "dlcp_cli", "reproduce", "tiny", "--full", "--claims-dir", str(tmp_path / "papers")]
        + ["--out", str(tmp_path / "out")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert p.stderr is not None
    lines = []
    for line in p.stderr:  # the first run has started
        lines.append(line)
        if "on ns3 ->" in line:
            break
    p.send_signal(signal.SIGTERM)
    rest = p.stderr.read()
    assert p.wait(timeout=300) == 143, "".join(lines) + rest
    assert "terminated (SIGTERM)" in rest and "Traceback" not in rest, rest[-2000:]
