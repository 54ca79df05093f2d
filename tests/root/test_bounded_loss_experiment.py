"""experiments/bounded-loss.toml end to end on the built-in switch, small: the reliable baseline, LTP
and DBLP as variants of one series, compared on tails and accuracy together (docs/bounded-loss.md).
The full-size comparison and its figures are in docs/notes/2026-11-27-bounded-loss-emulated.md."""

from __future__ import annotations

import json
import subprocess

from emulated_runs import DLCP, ROOT, clean_machine, read_csv  # noqa: F401 (clean_machine: autouse)

EXPERIMENT = "experiments/bounded-loss.toml"


def test_bounded_loss_comparison_runs_small_and_reports_accuracy(tmp_path):
    out = tmp_path / "out"
    p = subprocess.run(
        DLCP
        + ["run", EXPERIMENT, "--policies", "reliable,ltp,dblp", "--out", str(out)]
        + ["--set", "workload.iterations=5", "--set", "workload.warmup_iterations=1", "--set", "timeout_s=240"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    (series,) = out.glob("*-bounded-loss")
    compare = json.loads((series / "compare.json").read_text())
    runs = {r["name"]: r for r in compare["runs"]}
    assert list(runs) == ["reliable", "ltp", "dblp"] and compare["baseline"] == "reliable"
    for name, r in runs.items():
        assert r["protected_lost"] == 0, name  # no system loses protected packets
        assert 0 < r["final_accuracy"] <= 1, name  # the trainer learned and was evaluated
        assert "time_to_accuracy_s" in r, name
    assert runs["reliable"]["lost_fraction"] == 0  # budget 0: every packet recovered
    labels = {m["label"] for m in compare["metrics"]}
    assert {"final test accuracy", "time to target accuracy (s)"} <= labels
    # DBLP's schedule is in the run's records: the PS (h5) aggregates, so it decides the budget;
    # its first row (iter -1) is the critical start at phase_low
    budget = read_csv(series / "dblp" / "records" / "h5-budget.csv")
    assert budget and budget[0]["iter"] == "-1" and float(budget[0]["budget"]) == 0.008
    assert not (series / "ltp" / "records" / "h5-budget.csv").exists()  # a fixed budget has no schedule
