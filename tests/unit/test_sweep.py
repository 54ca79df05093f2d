"""`dlcp sweep`: grid points, their names and shards, the one-at-a-time rule for Mininet backends,
one-line errors, and the summary of a merged sweep directory (dlcp_cli/sweep.py)."""

import json
import subprocess
import sys

import pytest

from dlcp.experiment import config as configmod
from dlcp_cli import sweep
from dlcp_cli.sweep import Point, SweepError

EXPERIMENT = "experiments/ps-incast.toml"


def test_grid_points_in_order_with_aliases():
    pts = sweep.points(sweep.parse_grid(["policy=fifo,dlcp", "seed=1,2,3"]))
    assert [p.name for p in pts] == [
        "policy=fifo,seed=1",
        "policy=fifo,seed=2",
        "policy=fifo,seed=3",
        "policy=dlcp,seed=1",
        "policy=dlcp,seed=2",
        "policy=dlcp,seed=3",
    ]
    assert [p.index for p in pts] == list(range(6))
    assert pts[4].overrides() == ["dlcp.policy=dlcp", "seed=2"]


@pytest.mark.parametrize("short,key", sorted(sweep.short_keys().items()))
def test_every_short_key_resolves_to_a_key_the_config_checks(short, key):
    """A table where a value belongs: the error must name the key the short one stands for, and
    not as an unknown key."""
    assert sweep.full_key(short) == key
    raw = {"name": "t"}
    configmod.apply_override(raw, f"{key}={{x = 1}}")
    with pytest.raises(configmod.ConfigError) as e:
        configmod.validate(raw)
    assert str(e.value).startswith(f"{key}: ") and "unknown key" not in str(e.value), str(e.value)


def test_the_documented_short_keys_exist_and_scheduler_is_comm_scheduler():
    assert {k: sweep.full_key(k) for k in ("workers", "policy", "scheduler", "mode")} == {
        "workers": "workload.workers",
        "policy": "dlcp.policy",
        "scheduler": "comm.scheduler",
        "mode": "workload.mode",
    }
    assert sweep.full_key("seed") == "seed" and sweep.full_key("comm.usbyte.credit_bytes") == "comm.usbyte.credit_bytes"
    with pytest.raises(
        SweepError, match="--grid credit_bytes: short for comm.bytescheduler.credit_bytes and comm.usbyte"
    ):
        sweep.full_key("credit_bytes")
    with pytest.raises(SweepError, match="--grid nosuch: not a config key"):
        sweep.full_key("nosuch")


def test_point_names_are_directory_safe():
    assert Point(0, (("dlcp.loss_budget", "0.05"), ("x", "a/b c"))).name == "dlcp.loss_budget=0.05,x=a_b_c"


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7])
def test_shards_partition_the_grid(n):
    pts = sweep.points(sweep.parse_grid(["workers=2,3,4", "seed=1,2"]))
    shards = [sweep.shard_of(pts, (i, n)) for i in range(1, n + 1)]
    names = [p.name for s in shards for p in s]
    assert sorted(names) == sorted(p.name for p in pts) and len(names) == len(set(names))
    assert [p.index for p in shards[0]] == list(range(0, len(pts), n))


@pytest.mark.parametrize(
    "items,message",
    [
        (["seed"], "--grid seed: expected KEY=V1,V2,..."),
        (["seed=1,,2"], "--grid seed=1,,2: empty key or value"),
        (["policy=fifo", "dlcp.policy=dlcp"], "--grid dlcp.policy: given twice"),
    ],
)
def test_bad_grid(items, message):
    with pytest.raises(SweepError, match=message.replace("+", r"\+")):
        sweep.parse_grid(items)


@pytest.mark.parametrize("text", ["0/2", "3/2", "1of2", "a/b", "1/0"])
def test_bad_shard(text):
    with pytest.raises(SweepError, match=f"--shard {text}: expected I/N"):
        sweep.parse_shard(text)


def test_mininet_backends_run_one_point_at_a_time():
    assert sweep.effective_jobs({"ns3"}, 2) == (2, None)
    jobs, note = sweep.effective_jobs({"builtin"}, 2)
    assert jobs == 1 and "backend builtin runs points one at a time" in note and "use backend 'ns3'" in note
    assert sweep.effective_jobs({"bmv2"}, 1) == (1, None)


def test_every_point_is_checked_before_anything_runs():
    pts = sweep.points(sweep.parse_grid(["dlcp.loss_budget=0.05,2"]))
    with pytest.raises(SweepError, match=r"point dlcp.loss_budget=2: dlcp.loss_budget: 2 is not a fraction"):
        sweep.check_points(EXPERIMENT, [], pts)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "dlcp_cli", "sweep", *args], capture_output=True, text=True)


def test_dry_run_lists_the_shard(tmp_path):
    p = _cli(
        EXPERIMENT,
        "--grid",
        "policy=fifo,dlcp",
        "--grid",
        "seed=1,2",
        "--shard",
        "2/2",
        "--out",
        str(tmp_path),
        "--dry-run",
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [
        f"1\tpolicy=fifo,seed=2\t{tmp_path}/policy=fifo,seed=2",
        f"3\tpolicy=dlcp,seed=2\t{tmp_path}/policy=dlcp,seed=2",
    ]


def test_scheduler_grid_checks_every_point(tmp_path):
    p = _cli(
        "experiments/schedulers-allreduce.toml", "--grid", "scheduler=wfbp,dear", "--out", str(tmp_path), "--dry-run"
    )
    assert p.returncode == 0, p.stderr
    assert [line.split("\t")[1] for line in p.stdout.splitlines()] == ["scheduler=wfbp", "scheduler=dear"]


def test_cli_errors_are_one_line():
    p = _cli(EXPERIMENT, "--grid", "workers=4,99")
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    assert p.stderr.startswith("dlcp sweep: point workers=99: workload.workers: 99 workers")


def test_summary_of_a_merged_directory(tmp_path):
    """Shards run elsewhere are merged by copying their point directories side by side."""
    for name, status, p99 in (("seed=1", "ok", 1500.0), ("seed=2", "error", None)):
        d = tmp_path / name
        d.mkdir()
        (d / "meta.json").write_text(json.dumps({"status": status, "backend": "ns3", "wall_s": 2.5}))
        if p99:
            (d / "summary.json").write_text(json.dumps({"headline": {"mct_p99_us": p99, "iteration_p99_ms": 9.0}}))
    rows = sweep.summary_rows(tmp_path)
    assert rows == [
        {
            "point": "seed=1",
            "status": "ok",
            "backend": "ns3",
            "wall_s": 2.5,
            "mct_p99_us": 1500.0,
            "iteration_p99_ms": 9.0,
        },
        {"point": "seed=2", "status": "error", "backend": "ns3", "wall_s": 2.5},
    ]
    p = _cli("--summary", str(tmp_path))
    assert p.returncode == 0 and "seed=1" in p.stdout and "1500.000" in p.stdout


def test_a_sweep_into_points_that_hold_other_runs_is_refused_before_any_starts(tmp_path):
    """Run directories are never reused: a sweep into an --out whose point directory holds another
    run (not this point's: a meta.json without its run id) says so once, before any point starts,
    and leaves the points' runs as they were. (The same sweep started again runs only its points
    not finished there: tests/ns3/test_ns3_runs.py.)"""
    (tmp_path / "policy=dlcp").mkdir()
    (tmp_path / "policy=dlcp" / "meta.json").write_text("{}")
    p = _cli(EXPERIMENT, "--set", "backend=ns3", "--grid", "policy=fifo,dlcp", "--out", str(tmp_path))
    assert p.returncode == 2 and p.stderr == (
        f"dlcp sweep: {tmp_path}/policy=dlcp: holds another run (its config.toml missing or unreadable); run "
        "directories are never reused: a series or sweep started again there reruns only its own unfinished "
        "runs (give another --out)\n"
    ), p.stderr
    assert sorted(q.name for q in tmp_path.iterdir()) == ["policy=dlcp"]
    assert (tmp_path / "policy=dlcp" / "meta.json").read_text() == "{}"
