"""Whole experiments on ns-3 (`dlcp run` with backend ns3): hosts running the transport core, the
workers and the PS or ring all-reduce, records and reports in the emulated runs' format. Small
hand-made cases whose answers are known: nothing lost for good on a quiet network, every message accounted for
on both sides, iteration times no shorter than the bytes over the bottleneck, a bit-identical
repeat with the same seed. Skipped without the sim extra or without the transport core (issue 12)."""

from __future__ import annotations

import json
import re
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

from dlcp import records as R
from dlcp.runs.tasks import WORKER_LOG
from simulation.ns3.hosts import core_missing

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(core_missing() is not None, reason=str(core_missing()))

PS = tiny_ps(iterations=4)

RING = (
    leaf_spine4("tiny-ring", 50)
    + """
model = "synthetic"
iterations = 3
[dlcp]
load_balancing = "spray_rr"
"""
)


def _run(tmp_path: Path, text: str, name: str, *sets: str) -> Path:
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text(text)
    return run_experiment(cfg, tmp_path / name, *sets)


def _series(tmp_path: Path, text: str, *args: str) -> tuple[Path, str]:
    """`dlcp run CFG ARGS --out OUT` (several runs, each forked from one process); the results
    directory and the command's stderr."""
    cfg = tmp_path / "series.toml"
    cfg.write_text(text)
    out = tmp_path / "out"
    p = subprocess.run(
        [sys.executable, "-m", "dlcp_cli", "run", str(cfg), *args, "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    (results,) = out.iterdir()
    return results, p.stderr


# Simulated runs that several tests read (each run pays a process and ns-3's load)
@pytest.fixture(scope="module")
def ps_run(tmp_path_factory) -> Path:
    """PS, policy dlcp, seed 1, in a process of its own."""
    return _run(tmp_path_factory.mktemp("ps"), PS, "ps")


@pytest.fixture(scope="module")
def ps_pairs(tmp_path_factory) -> tuple[Path, str]:
    """PS as `--policies fifo,dlcp --repeat 2`: four runs forked from one process."""
    return _series(tmp_path_factory.mktemp("pairs"), PS, "--policies", "fifo,dlcp", "--repeat", "2")


def test_ps_run_records_like_an_emulated_run(ps_run):
    run = ps_run
    meta = json.loads((run / "meta.json").read_text())
    assert meta["backend"] == "ns3" and meta["clock"] == "simulated" and meta["status"] == "ok"
    assert meta["simulation"]["iterations_done"] == 4 and meta["simulation"]["events"] > 0
    for h in ("h1", "h2"):
        its = read_csv(run / "records" / f"{h}-iterations.csv")
        assert list(its[0]) == list(R.ITERATION_COLUMNS) and [int(r["iter"]) for r in its] == [0, 1, 2, 3]
        assert all(int(r["compute_us"]) == 5000 and int(r["lost_values"]) == 0 for r in its)
    msgs = {h: read_csv(run / "records" / f"{h}-messages.csv") for h in ("h1", "h2", "h3")}
    assert list(msgs["h3"][0]) == list(R.MESSAGE_COLUMNS)
    n_msgs = 5  # LeNet-5's layers, one message each
    pushes = [r for r in msgs["h3"] if r["phase"] == "push"]
    pulls = [r for r in msgs["h3"] if r["phase"] == "pull"]
    assert len(pushes) == len(pulls) == 2 * 4 * n_msgs
    assert all(r["lost_pkts"] == "0" and r["forced"] == "0" for rows in msgs.values() for r in rows)
    # an iteration brings both workers' gradients into the PS over its 50 Mbit/s link (the PS
    # waits for all of them), then this worker's parameters back: at least 3 x 177,704 bytes of
    # values (frames are larger) at 50 Mbit/s
    values_bytes = 44426 * 4
    floor_us = 3 * values_bytes * 8 / 50e6 * 1e6
    assert all(int(r["iteration_us"]) >= floor_us for r in read_csv(run / "records" / "h1-iterations.csv"))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["headline"]["lost_fraction"] == 0
    s1 = json.loads((run / "counters" / "s1.json").read_text())
    assert s1["backend"] == "ns3"
    seen = sum(q["admitted_pkts"] + q["early_drop_pkts"] + q["tail_drop_pkts"] for q in s1["queues"])
    assert sum(p["rx_pkts"] for p in s1["ports"]) == seen + sum(s1["drops"].values())


def test_ring_all_reduce_on_a_leaf_spine_sprays_and_converges(tmp_path):
    run = _run(tmp_path, RING, "ring")
    losses = []
    for h in ("h1", "h2", "h3", "h4"):
        its = read_csv(run / "records" / f"{h}-iterations.csv")
        assert [int(r["iter"]) for r in its] == [0, 1, 2]
        losses.append([float(r["train_loss"]) for r in its])
    assert all(seq[-1] < seq[0] for seq in losses)  # SGD on the synthetic problem makes progress
    steps = [r for r in read_csv(run / "records" / "h1-messages.csv") if r["side"] == "sender"]
    assert {r["phase"] for r in steps} == {"reduce_scatter", "all_gather"}
    assert len(steps) == 3 * 5 * 2 * 3  # iterations x messages x phases x (workers - 1) steps
    for h in ("h1", "h2", "h3", "h4"):  # comm.lockstep (the default), as the emulated ring runs it
        sends = [r for r in read_csv(run / "records" / f"{h}-messages.csv") if r["side"] == "sender"]
        assert_steps_in_lockstep(sends)
    spines = [json.loads((run / "counters" / f"s{i}.json").read_text()) for i in (1, 2)]
    carried = [sum(q["admitted_pkts"] for q in s["queues"]) for s in spines]
    assert min(carried) > 0.3 * sum(carried)  # sprayed over both spines


def assert_steps_in_lockstep(sends: list[dict]) -> None:
    """Each ring step's send starts once this rank's send of the previous step completed."""
    by_msg: dict = {}
    for r in sends:
        by_msg.setdefault((r["iter"], r["msg_id"]), {})[int(r["step"])] = r
    for key, steps in by_msg.items():
        for s in sorted(steps)[1:]:
            assert int(steps[s]["start_us"]) >= int(steps[s - 1]["complete_us"]), (key, s)


def test_same_seed_same_run(ps_run, ps_pairs):
    """A run of its own and the same run forked from a series' process (dlcp, seed 1) are the same
    run: a fork starts from the state a fresh process reaches."""
    results, _ = ps_pairs
    for f in ("h1-iterations.csv", "h3-messages.csv"):
        assert (ps_run / "records" / f).read_text() == (results / "dlcp" / "rep1" / "records" / f).read_text()


def test_sweep_runs_points_in_parallel_into_fixed_directories(tmp_path):
    """The points run at once on the local cluster, each into OUT/POINT; the same sweep again runs
    nothing (every point is found finished there)."""
    cfg = tmp_path / "ps.toml"
    cfg.write_text(PS.replace("iterations = 4", "iterations = 2"))
    out = tmp_path / "sweep"
    sweep = [sys.executable, "-m", "dlcp_cli", "sweep", str(cfg), "--grid", "policy=fifo,dlcp", "--jobs", "2"]
    p = subprocess.run([*sweep, "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    index = json.loads((out / "shard-1-of-1.json").read_text())
    assert index["jobs"] == 2 and set(index["points"]) == {"policy=fifo", "policy=dlcp"}
    assert "2 runs on a local cluster of 2 worker processes" in p.stderr
    metas = {}
    for point in ("policy=fifo", "policy=dlcp"):
        meta = json.loads((out / point / "meta.json").read_text())
        assert meta["status"] == "ok" and meta["policy"] == point.split("=")[1]
        assert (out / point / "report.md").exists()
        metas[point] = meta["start_utc"]
    again = subprocess.run([*sweep, "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "2 of 2 runs are done in" in again.stderr and "dlcp sweep: 0 points ran" in again.stderr
    index = json.loads((out / "shard-1-of-1.json").read_text())
    assert all(point["done_before"] and point["status"] == "ok" for point in index["points"].values())
    assert {p: json.loads((out / p / "meta.json").read_text())["start_utc"] for p in metas} == metas


def test_jumbo_links_carry_the_same_ring_in_fewer_packets(tmp_path):
    """links.mtu = 9000: data packets carry 2225 values instead of 350, so the same ring all-reduce
    crosses the switches in far fewer packets and trains exactly the same way."""
    big = RING.replace("iterations = 3", "iterations = 3\nlayers = [400000]")  # 100,000-value ring chunks
    results, _ = _series(tmp_path, big, "--vary", "links.mtu=1500,9000")
    std, jumbo = results / "1500", results / "9000"
    for run, pkts in ((std, 286), (jumbo, 45)):  # ceil(100000 / 350), ceil(100000 / 2225)
        sends = [r for r in read_csv(run / "records" / "h1-messages.csv") if r["side"] == "sender"]
        assert {int(r["pkts"]) for r in sends} == {pkts} and all(r["lost_pkts"] == "0" for r in sends)

    def switch_pkts(run):
        return sum(
            q["admitted_pkts"]
            for i in range(1, 5)
            for q in json.loads((run / "counters" / f"s{i}.json").read_text())["queues"]
        )

    assert switch_pkts(jumbo) < switch_pkts(std) / 3  # PROBEs and control segments do not shrink
    for h in ("h1", "h4"):  # nothing lost: the same sums, the same training
        assert [r["train_loss"] for r in read_csv(std / "records" / f"{h}-iterations.csv")] == [
            r["train_loss"] for r in read_csv(jumbo / "records" / f"{h}-iterations.csv")
        ]


def test_bench_sim_prints_its_figures_per_worker_count():
    p = subprocess.run(
        [sys.executable, "-m", "dlcp_cli", "bench", "sim", "--workers", "4", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    (row,) = json.loads(p.stdout.strip().splitlines()[-1])["runs"]
    assert row["workers"] == 4 and row["sim_s_per_iteration"] > 0 and row["events"] > 0
    # 44,426 values over a 50 Mbit/s host link: a ring iteration moves 2 x 3/4 of them per worker
    assert row["sim_s_per_iteration"] >= 1.5 * 44426 * 4 * 8 / 50e6
    assert row["switch_pkts"] > 0 and row["peak_rss_mb"] > 0 and row["wall_s"] > 0


def test_repeat_runs_interleaved_pairs_with_a_new_seed_per_pair(ps_pairs):
    """`--policies fifo,dlcp --repeat 2` on ns-3: fifo/rep1, dlcp/rep1 (seed 1), fifo/rep2, dlcp/rep2
    (seed 2), then a comparison over the pairs, as on the emulated backends."""
    results, stderr = ps_pairs
    order = [ln.split("[")[1].split("]")[0] for ln in stderr.splitlines() if ln.startswith("dlcp run: tiny-ps [")]
    assert order == ["fifo rep 1, seed 1", "dlcp rep 1, seed 1", "fifo rep 2, seed 2", "dlcp rep 2, seed 2"]
    for policy in ("fifo", "dlcp"):
        for rep in (1, 2):
            meta = json.loads((results / policy / f"rep{rep}" / "meta.json").read_text())
            assert meta["status"] == "ok" and meta["policy"] == policy
            assert f"seed = {rep}\n" in (results / policy / f"rep{rep}" / "config.toml").read_text()
    compare = json.loads((results / "compare.json").read_text())
    assert compare["pairs"] == [1, 2] and compare["seeds"] == [1, 2]
    # each simulation says how far it is, in its worker's log (its first iteration at least: lines
    # come every 5 s)
    for run in results.glob("*/rep*"):
        log = (run / WORKER_LOG).read_text()
        assert re.search(r"^\[[#.]{30}\] \d+/8 iterations  h1:\d+ h2:\d+ ", log, re.M), log[-2000:]


def test_a_killed_series_stops_its_running_runs_and_records_them(tmp_path):
    """SIGTERM to `dlcp run --policies fifo,dlcp --repeat 2` (its runs on the local cluster's two
    worker processes, each run in a process of its own): the running runs are stopped as an
    emulated run is (meta.json status "terminated", exit 143) and come home; no process is left;
    the series stops there (the second pair never starts)."""
    cfg = tmp_path / "long.toml"
    cfg.write_text(RING.replace("iterations = 3", "iterations = 100000").replace("timeout_s = 20", "timeout_s = 10000"))
    out = tmp_path / "out"
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dlcp_cli",
            "run",
            str(cfg),
            "--policies",
            "fifo,dlcp",
            "--repeat",
            "2",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while len(list(out.glob("*/.staging/*/config.toml"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert p.poll() is None, p.communicate()[1][-3000:]
        procs = [psutil.Process(p.pid), *psutil.Process(p.pid).children(recursive=True)]
        time.sleep(2)  # into the simulations
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 143, err[-3000:]
    _, alive = psutil.wait_procs(procs, timeout=30)
    assert not [q for q in alive if q.status() != psutil.STATUS_ZOMBIE]
    (results,) = out.iterdir()
    for policy in ("fifo", "dlcp"):
        assert json.loads((results / policy / "rep1" / "meta.json").read_text())["status"] == "terminated"
        assert not (results / policy / "rep2").exists()
    assert err.count("dlcp run: terminated (SIGTERM); everything it started was stopped and cleaned up") == 2
