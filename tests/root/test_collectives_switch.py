"""4-worker PS and 4-worker ring all-reduce through the built-in switch in Mininet (root), via
the experiment runner: with 2 % of data packets dropped by the senders and p_msg = 1 %, every
message ends within budget or with its retransmissions logged, and no protected packet is missing.
Senders are paced below the PS port's rate: the loss under test is the injected one, not incast.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from agent_runs import check_bounded_loss, read_csv

ROOT = Path(__file__).resolve().parents[2]
CONFIG = """
name = "collectives-{mode}"
timeout_s = 120
[topology]
kind = "star"
hosts = 5
[links]
host_mbps = 200
[workload]
mode = "{mode}"
workers = 4
model = "synthetic"
dataset = "synthetic"
layers = [20000, 200000, 50000, 1000]
iterations = 5
[dlcp]
policy = "dlcp"
inject_loss = 0.02
loss_budget = 0.01
iter_budget = 0.02
r_max = 3
pacing_mbps = {pacing}
"""


@pytest.mark.parametrize("mode,phases", [("ps", {"push", "pull"}), ("allreduce", {"reduce_scatter", "all_gather"})])
def test_four_workers_through_builtin_switch_with_loss(tmp_path, mode, phases):
    cfg = tmp_path / f"{mode}.toml"
    cfg.write_text(CONFIG.format(mode=mode, pacing=40))
    p = subprocess.run(
        [sys.executable, "-m", "dlcp_cli", "run", str(cfg), "--out", str(tmp_path / "r"), "--no-report"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    [run] = [d for d in (tmp_path / "r").glob("*/*") if (d / "meta.json").exists()]  # named after the policy
    hosts = [
        h["name"] for h in json.loads((run / "topology.json").read_text())["hosts"] if h["role"] in ("worker", "ps")
    ]
    rows = [r for h in hosts for r in read_csv(run / "records" / f"{h}-messages.csv")]
    totals = [json.loads((run / "records" / f"{h}-agent.json").read_text()) for h in hosts]
    assert {r["phase"] for r in rows} == phases
    check_bounded_loss(rows, totals, 0.01)
    counters = json.loads((run / "counters" / "s1.json").read_text())
    assert sum(q["admitted_pkts"] for q in counters["queues"]) > 0  # it really went through the switch
