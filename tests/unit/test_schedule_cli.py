"""`dlcp schedule`: plans on the last line as JSON, for schedulers and collectives; one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dlcp.comm.costmodel import CostModel
from dlcp.comm.prediction import predict
from dlcp.workloads.profile import load_profile


def schedule(*args):
    p = subprocess.run(
        [sys.executable, "-m", "dlcp_cli", "schedule", *args], capture_output=True, text=True, timeout=120
    )
    return p


def last_json(p):
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_mgwfbp_plan_of_resnet50():
    plan = last_json(
        schedule(
            "--profile",
            "resnet50-usbyte",
            "--workers",
            "16",
            "--alpha",
            "9.08e-4",
            "--beta",
            "7.4e-10",
            "--scheduler",
            "mgwfbp",
            "--json",
        )
    )
    groups = plan["groups"]
    assert [t for g in groups for t in g] == list(range(161))  # forward order, every tensor once
    assert all(g == list(range(g[0], g[-1] + 1)) for g in groups)  # consecutive
    _, tl = predict("mgwfbp", load_profile("resnet50-usbyte"), 16, CostModel(9.08e-4, 7.4e-10, workers=16))
    assert plan["predicted_iteration_s"] == pytest.approx(tl.iteration_s)
    assert len(plan["send_order"]) == len(groups)


def test_bytescheduler_plan_has_partitions_and_options():
    plan = last_json(
        schedule(
            "--profile",
            "vgg16-usbyte",
            "--workers",
            "8",
            "--rate-gbps",
            "10",
            "--scheduler",
            "bytescheduler",
            "--option",
            "partition_bytes=4000000",
            "--option",
            "credit_bytes=8000000",
            "--json",
        )
    )
    assert plan["credit_bytes"] == 8000000 and plan["options"] == {"partition_bytes": 4000000, "credit_bytes": 8000000}
    sizes = load_profile("vgg16-usbyte").sizes
    covered = {}
    for t, a, b in plan["partitions"]:
        covered[t] = covered.get(t, 0) + b - a
        assert (b - a) * 4 <= 4000000
    assert [covered[t] for t in range(len(sizes))] == list(sizes)


def test_scheduler_over_multitree_on_a_torus_plans_with_its_steps():
    ring = last_json(
        schedule(
            "--profile",
            "resnet50-usbyte",
            "--workers",
            "16",
            "--scheduler",
            "wfbp",
            "--collective",
            "ring",
            "--topology",
            "torus:4x4",
            "--json",
        )
    )
    tree = last_json(
        schedule(
            "--profile",
            "resnet50-usbyte",
            "--workers",
            "16",
            "--scheduler",
            "wfbp",
            "--collective",
            "multitree",
            "--topology",
            "torus:4x4",
            "--json",
        )
    )
    assert tree["collective"] == "multitree" and tree["alpha_s"] < ring["alpha_s"]
    assert tree["predicted_iteration_s"] < ring["predicted_iteration_s"]


def test_collective_plans():
    mt = last_json(schedule("--collective", "multitree", "--topology", "torus:4x4", "--json"))
    ring = last_json(schedule("--collective", "ring", "--topology", "torus:4x4", "--json"))
    assert ring["steps_per_phase"] == 15 and mt["steps_per_phase"] < 8
    assert len(mt["trees"]) == 16 and all(len(edges) == 15 for edges in mt["trees"].values())
    ds = last_json(schedule("--collective", "dssync", "--workers", "16", "--group", "4", "--json"))
    assert ds["iterations"][0][0] == [0, 1, 2, 3] and ds["rounds_to_average"] == 2
    p = schedule("--collective", "multitree", "--topology", "torus:4x4")
    assert p.returncode == 0 and "steps per phase" in p.stdout and not p.stdout.strip().endswith("}")


@pytest.mark.parametrize(
    "args,msg",
    [
        ((), "give --scheduler"),
        (("--scheduler", "dear"), "--scheduler needs --profile and --workers"),
        (("--scheduler", "dear", "--profile", "resnet50-usbyte", "--workers", "4"), "give --alpha and --beta"),
        (("--scheduler", "dear", "--profile", "nosuch", "--workers", "4", "--rate-gbps", "1"), "profile 'nosuch'"),
        (
            (
                "--scheduler",
                "dear",
                "--profile",
                "resnet50-usbyte",
                "--workers",
                "4",
                "--rate-gbps",
                "1",
                "--option",
                "x=1",
            ),
            "scheduler 'dear'",
        ),
        (("--collective", "multitree", "--topology", "torus:4"), "--topology: torus needs 2 number(s)"),
        (("--collective", "dssync", "--workers", "16", "--group", "5"), "dssync.group"),
    ],
)
def test_bad_input_is_one_line(args, msg):
    p = schedule(*args)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dlcp schedule: ") and msg in lines[0], p.stderr


def test_compute_scale_multiplies_the_profiles_compute():
    base = ["--profile", "bert-base-fp32-b32-h200", "--workers", "8", "--rate-gbps", "10", "--scheduler", "wfbp"]
    one = last_json(schedule(*base, "--json"))
    four = last_json(schedule(*base, "--compute-scale", "4", "--json"))
    assert one["compute_scale"] == 1 and four["compute_scale"] == 4
    assert four["compute_s"] == pytest.approx(4 * one["compute_s"])
    assert four["compute_s"] == pytest.approx(4 * load_profile("bert-base-fp32-b32-h200").compute_s)
    assert four["predicted_iteration_s"] >= four["compute_s"]
