"""Comparing collectives and schedulers: on iteration and communication time pooled over ranks,
with an interval and a verdict, and MCT only where the runs' messages are alike."""

import json

import pytest
from synthetic_runs import write_synthetic_run

from dlcp.reporting import compare_runs

RUN = {"iterations": 12, "layers": 6, "workers": 6}


def with_collective(path, collective: str):
    cfg = path / "config.toml"
    cfg.write_text(cfg.read_text() + f'\n[comm]\nscheduler = "wfbp"\ncollective = "{collective}"\n')
    return path


def test_single_runs_of_two_collectives_compare_iteration_pooled_over_ranks(tmp_path, capsys):
    # the torus example's shape: one run per collective (--vary), a few iterations after warm-up,
    # which the slowest-worker series cannot take a p50 of; every rank's are enough
    ring = with_collective(write_synthetic_run(tmp_path / "ring", seed=3, time_scale=2, **RUN), "ring")
    tree = with_collective(write_synthetic_run(tmp_path / "multitree", seed=3, **RUN), "multitree")
    compare_runs([ring, tree], tmp_path / "cmp", echo=True)
    data = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert data["messages_differ"] == ["comm.collective"]
    pooled = data["pooled_over_ranks"]["runs"]
    assert pooled[0]["values"]["rank_iteration_p50"]["ranks"] == 6
    r = pooled[1]["ratios"]["rank_iteration_p50"]
    assert r["point"] == pytest.approx(0.5) and r["verdict"] == "faster" and r["ci95"][1] < 1
    assert data["runs"][1]["ratios"]["mct_p99_us"] is None  # a MultiTree transfer is no ring step
    out = capsys.readouterr().out
    assert "multitree vs ring, iteration p50, pooled over ranks (ms): faster, 0.5x" in out
    assert "MCT is not compared: the runs' messages differ (comm.collective)" in out
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "Iteration and communication time, pooled over ranks" in md and "messages differ" in md


def test_policies_over_the_same_collective_keep_the_per_message_view(tmp_path):
    fifo = write_synthetic_run(tmp_path / "fifo", policy="fifo", seed=4, **RUN)
    dlcp = write_synthetic_run(tmp_path / "dlcp", policy="dlcp", seed=4, time_scale=2, **RUN)
    compare_runs([fifo, dlcp], tmp_path / "cmp")
    data = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert data["messages_differ"] == [] and data["runs"][1]["ratios"]["mct_p50_us"] == pytest.approx(2.0)
    assert data["pooled_over_ranks"]["runs"][1]["ratios"]["rank_iteration_p50"]["verdict"] == "slower"


def test_repeats_of_two_collectives_lead_with_iteration_pooled_over_ranks(tmp_path, capsys):
    for rep in range(1, 4):
        with_collective(write_synthetic_run(tmp_path / "ring" / f"rep{rep}", seed=rep, time_scale=2, **RUN), "ring")
        with_collective(write_synthetic_run(tmp_path / "multitree" / f"rep{rep}", seed=rep, **RUN), "multitree")
    compare_runs([tmp_path / "ring", tmp_path / "multitree"], tmp_path / "cmp", echo=True)
    data = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert data["messages_differ"] == ["comm.collective"]
    assert data["ratios"]["mct_p99"]["verdict"] == "not compared (the variants' messages differ)"
    rank = data["ratios"]["rank_iteration_p50"]
    assert rank["point"] == pytest.approx(0.5) and data["variants"][0]["values"]["rank_iteration_p50"]["n"] >= 20
    out = capsys.readouterr().out
    assert "MCT is not compared" in out and "iteration p50, pooled over ranks" in out
