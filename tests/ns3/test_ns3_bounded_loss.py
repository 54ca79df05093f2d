"""experiments/bounded-loss.toml on ns-3, small: DBLP's run of the digits MLP in a forked simulation.
The series' process loads the model's dataset with torch before it forks the run (the pre-run
check), so this also holds the forked run to finishing its torch work (simulation/ns3/backend.py
`single_threaded_torch`). Skipped without the sim extra."""

from __future__ import annotations

import json

import pytest
from agent_runs import read_csv
from cli_runs import run_experiment

from simulation.ns3.hosts import core_missing

pytestmark = pytest.mark.skipif(core_missing() is not None, reason=str(core_missing()))


def test_bounded_loss_runs_on_ns3_with_a_torch_model_and_a_budget_schedule(tmp_path):
    out = run_experiment(
        "experiments/bounded-loss.toml",
        tmp_path / "dblp",
        "backend=ns3",
        "system=dblp",
        "workload.iterations=3",
        "workload.warmup_iterations=1",
        timeout_s=400,
    )
    summary = json.loads((out / "summary.json").read_text())
    assert 0 < summary["training"]["final_accuracy"] <= 1
    assert summary["loss"]["protected_lost"] == 0
    budget = read_csv(out / "records" / "h5-budget.csv")
    assert budget[0]["iter"] == "-1" and float(budget[0]["budget"]) == 0.008
