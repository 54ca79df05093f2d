"""`dlcp bench schedulers`: the table, and its JSON on the last line."""

from __future__ import annotations

import json
import subprocess
import sys

from dlcp.comm.costmodel import CostModel
from dlcp.comm.prediction import predict
from dlcp.comm.schedulers import SCHEDULERS
from dlcp.workloads.profile import load_profile


def test_bench_schedulers_json_last_line():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "dlcp_cli",
            "bench",
            "schedulers",
            "--profiles",
            "resnet50-usbyte",
            "--workers",
            "4,16",
            "--topologies",
            "torus:4x4,leaf_spine:2x2x4",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    lines = out.strip().splitlines()
    result = json.loads(lines[-1])
    assert "predicted iteration time" in out and "steps_per_phase" in out  # the tables came first
    rows = result["timeline"]["rows"]
    assert [(r["profile"], r["workers"]) for r in rows] == [("resnet50-usbyte", 4), ("resnet50-usbyte", 16)]
    _, tl = predict("dear", load_profile("resnet50-usbyte"), 16, CostModel.from_link(10e9, 30e-6, 16))
    assert rows[1]["dear"] == round(tl.iteration_s * 1e3, 2)
    assert all(set(SCHEDULERS) <= set(r) and min(r[s] for s in SCHEDULERS) >= r["compute_ms"] for r in rows)
    coll = {(r["topology"], r["collective"]): r for r in result["collectives"]["rows"]}
    ring, tree = coll[("torus:4x4", "ring")], coll[("torus:4x4", "multitree kary=5")]
    assert ring["steps_per_phase"] == 15 and tree["steps_per_phase"] < 8
    assert tree["allreduce_ms"] < ring["allreduce_ms"] / 2
    assert coll[("leaf_spine:2x2x4", "dssync group=4")]["rounds"] == 2


def test_emulated_statistics_on_hand_made_runs(tmp_path):
    from emulation.benches.schedulers import paired_ratio, slowest_iterations_ms

    rec = tmp_path / "records"
    rec.mkdir()
    for host, times in (("h1", [900, 800, 100, 300, 200]), ("h2", [50, 60, 150, 250, 400])):
        with open(rec / f"{host}-iterations.csv", "w") as f:
            f.write("host,iter,iteration_us\n" + "".join(f"{host},{i},{t * 1000}\n" for i, t in enumerate(times)))
    assert slowest_iterations_ms(tmp_path) == [150.0, 300.0, 400.0]  # from iteration 2, the slower worker
    point, lo, hi = paired_ratio([2.0, 2.0, 2.0], [1.0, 1.0, 1.0])
    assert (point, lo, hi) == (2.0, 2.0, 2.0)  # no spread: the interval is the point
    point, lo, hi = paired_ratio([1.0, 3.0, 2.0, 2.0], [1.0, 1.0, 1.0, 1.0])
    assert point == 2.0 and lo < 2.0 < hi and hi - 2.0 == 2.0 - lo


def test_emulated_vary_must_name_a_key_and_values():
    out = subprocess.run(
        [sys.executable, "-m", "dlcp_cli", "bench", "schedulers", "--emulated-vary", "comm.collective"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode != 0
    assert out.stderr.strip().splitlines()[-1] == (
        "dlcp bench schedulers: --emulated-vary 'comm.collective': expected KEY=V1,V2,..."
    )


def test_bench_schedulers_takes_a_measured_profile_and_the_compute_scale():
    from dlcp.comm.schedulers_bench import timeline_result

    options = {"kary": 5, "group": 2}  # what the CLI's option flags give (flag_values)
    args = (["bert-base-fp32-b32-h200"], (8,), 10.0, 30e-6, "bert-base-fp32-b32-h200", ["torus:2x2"], 10.0, options)
    one, four = timeline_result(*args), timeline_result(*args, compute_scale=4.0)
    assert one["compute_scale"] == 1 and four["compute_scale"] == 4
    compute = load_profile("bert-base-fp32-b32-h200").compute_s * 1e3
    assert one["timeline"]["rows"][0]["compute_ms"] == round(compute, 2)
    assert four["timeline"]["rows"][0]["compute_ms"] == round(4 * compute, 2)
    assert all(four["timeline"]["rows"][0][s] >= 4 * compute - 0.01 for s in SCHEDULERS)
    out = subprocess.run(
        [sys.executable, "-m", "dlcp_cli", "bench", "schedulers", "--profiles", "resnet50-fp32-b64-h100"]
        + ["--workers", "4", "--topologies", "torus:2x2", "--compute-scale", "2.5", "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    assert "every compute time x 2.5 (--compute-scale)" in out
    assert json.loads(out.strip().splitlines()[-1])["compute_scale"] == 2.5


def test_dssync_rows_are_priced_as_dssync_runs_parameter_averaging_after_the_backward():
    # docs/comm.md and the DS-Sync collective: parameters are averaged after the local step, so
    # nothing overlaps the backward and the gradient schedulers cannot run over it at all
    from dlcp.comm.schedulers_bench import collective_rows

    profile = load_profile("resnet50-usbyte")
    rows = {r["collective"]: r for r in collective_rows(profile, ["torus:4x4"], 10.0, 30e-6)}
    ds = rows["dssync group=4"]
    assert ds["wfbp"] == round(profile.compute_s * 1e3 + ds["allreduce_ms"], 2)
    assert ds["mgwfbp"] is None and ds["dear"] is None
    ring = rows["ring"]  # a gradient all-reduce still overlaps the backward
    assert ring["wfbp"] < profile.compute_s * 1e3 + ring["allreduce_ms"]
