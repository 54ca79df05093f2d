"""`workload.payload = "sizes"` on ns-3: a layer profile's ring all-reduce with no values behind the
packets. Known answers on a quiet 4-worker leaf-spine: every transport message has the bytes,
packets, priorities and layers it has when the same profile's synthetic model carries values; the
bytes sent per iteration are the profile's bytes times the ring's 2 (N - 1); records say nothing
about losses and the report says "sizes only". Skipped without the sim extra."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from agent_runs import read_csv
from cli_runs import run_experiment
from ns3_scripts import leaf_spine4

from simulation.ns3.hosts import core_missing

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(core_missing() is not None, reason=str(core_missing()))

SIZES = [3000, 20000, 500, 9000]  # a 4-tensor "model": 32,500 values, 130,000 bytes
WORKERS = 4

RING = (
    leaf_spine4("sizes-ring", 100)
    + """
model = "synthetic"
compute = "profile"
profile = "{profile}"
iterations = 2
eval_every = 0
[dlcp]
load_balancing = "spray_rr"
"""
)


def _run(tmp_path: Path, name: str, *sets: str) -> Path:
    profile = tmp_path / "tiny.json"
    profile.write_text(
        json.dumps(
            {"model": "tiny", "sizes": SIZES, "forward_s": [0.0005] * len(SIZES), "backward_s": [0.001] * len(SIZES)}
        )
    )
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text(RING.format(profile=profile))
    return run_experiment(cfg, tmp_path / name, *sets)


MESSAGE_SHAPE = (
    "side",
    "peer",
    "iter",
    "msg_id",
    "phase",
    "step",
    "layer_first",
    "layer_last",
    "prio",
    "bytes",
    "pkts",
    "lost_pkts",
)


def test_sizes_only_ring_sends_what_the_values_ring_sends(tmp_path):
    values, sizes = _run(tmp_path, "values"), _run(tmp_path, "sizes", 'workload.payload="sizes"')
    assert json.loads((sizes / "meta.json").read_text())["payload"] == "sizes"
    for h in range(1, WORKERS + 1):
        shape = {
            run: sorted(tuple(r[k] for k in MESSAGE_SHAPE) for r in read_csv(run / "records" / f"h{h}-messages.csv"))
            for run in (values, sizes)
        }
        assert shape[sizes] == shape[values] and len(shape[sizes]) == 2 * 4 * 2 * (WORKERS - 1) * 2  # both sides
    senders = [
        r
        for h in range(1, WORKERS + 1)
        for r in read_csv(sizes / "records" / f"h{h}-messages.csv")
        if r["side"] == "sender"
    ]
    for it in ("0", "1"):  # every chunk of every tensor crosses 2 (N - 1) links per iteration
        assert sum(int(r["bytes"]) for r in senders if r["iter"] == it) == 2 * (WORKERS - 1) * sum(SIZES) * 4
    assert all(r["lost_pkts"] == "0" for r in senders)
    rows = read_csv(sizes / "records" / "h1-iterations.csv")
    assert [r["iter"] for r in rows] == ["0", "1"] and all(r["lost_values"] == "0" for r in rows)
    assert all(r["train_loss"] == r["test_loss"] == r["test_accuracy"] == "" for r in rows)
    assert all(r["train_loss"] != "" for r in read_csv(values / "records" / "h1-iterations.csv"))
    summary = json.loads((sizes / "summary.json").read_text())
    assert summary["training"]["payload"] == "sizes" and summary["headline"]["final_accuracy"] is None
    assert "Final test accuracy: sizes only" in (sizes / "report.md").read_text()


def test_sizes_only_dssync_averages_parameters_it_does_not_carry(tmp_path):
    """DS-Sync's parameter averaging (the default `average`) with sizes only: the group rings go
    as with values, and the iteration ends without parameters to average (it used to stop the run
    with an AttributeError on the missing aggregates)."""
    dssync = ("comm.collective=dssync", 'comm.dssync.average="parameters"')
    values, sizes = _run(tmp_path, "values", *dssync), _run(tmp_path, "sizes", 'workload.payload="sizes"', *dssync)
    for run in (values, sizes):
        assert json.loads((run / "meta.json").read_text())["status"] == "ok"
        assert [r["iter"] for r in read_csv(run / "records" / "h1-iterations.csv")] == ["0", "1"]
    for h in range(1, WORKERS + 1):
        shape = {
            run: sorted(tuple(r[k] for k in MESSAGE_SHAPE) for r in read_csv(run / "records" / f"h{h}-messages.csv"))
            for run in (values, sizes)
        }
        assert shape[sizes] == shape[values] and shape[sizes]


def test_sizes_only_with_a_torch_model_is_refused_in_one_line(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(RING.format(profile="resnet50-usbyte").replace('model = "synthetic"', 'model = "cnn"'))
    p = subprocess.run(
        [sys.executable, "-m", "dlcp_cli", "run", str(cfg), "--set", 'workload.payload="sizes"'],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2
    (line,) = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert line.startswith("dlcp run: ") and "workload.payload: 'sizes' needs model = 'synthetic'" in line
