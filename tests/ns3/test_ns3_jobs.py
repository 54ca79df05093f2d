"""Two training jobs on one simulated fabric ([[jobs]]): a series fifo vs priority (two repeats) on
a leaf-spine whose one spine both jobs' rings cross, and a run with a time-shift given by hand.
What is checked: every job finishes on its own hosts with its own job id; under `priority` the
favoured job's packets take the upper band of the data queues and the other's the lower, and the
favoured job finishes sooner than under fifo; a shifted job's first iteration
starts after its shift; the per-job sections of the run report and of the comparison."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runs import run_experiment
from job_runs import jobs_of, sent_prios, two_jobs, worker_hosts

from simulation.ns3.hosts import core_missing

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(core_missing() is not None, reason=str(core_missing()))

TWO_JOBS = """
name = "two-jobs"
backend = "ns3"
seed = 1
timeout_s = 60
[topology]
kind = "leaf_spine"
spines = 1
leaves = 2
hosts_per_leaf = 4
[links]
host_mbps = 1000
fabric_mbps = 1000
""" + two_jobs(workers=4, iterations=4, compute_ms=2)


@pytest.fixture(scope="module")
def series(tmp_path_factory) -> Path:
    """fifo vs priority, two repeats: the results directory."""
    tmp = tmp_path_factory.mktemp("jobs")
    cfg = tmp / "two.toml"
    cfg.write_text(TWO_JOBS)
    out = tmp / "out"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "dlcp_cli",
            "run",
            str(cfg),
            "--vary",
            "cluster.job_policy=fifo,priority",
            "--repeat",
            "2",
        ]
        + ["--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    (results,) = out.iterdir()
    return results


def test_every_job_runs_on_its_own_hosts(series: Path):
    run = series / "priority" / "rep1"
    hosts = worker_hosts(run)
    assert sorted(hosts) == [1, 2] and len(hosts[1]) == len(hosts[2]) == 4 and not hosts[1] & hosts[2]
    for names in hosts.values():
        ranks = sorted(json.loads((run / "records" / f"{h}-agent.json").read_text())["rank"] for h in names)
        assert ranks == [0, 1, 2, 3]  # each job's ranks are its own
    for h in hosts[1] | hosts[2]:  # no datagram reached a host of the other job (its receiver drops those)
        assert json.loads((run / "records" / f"{h}-agent.json").read_text())["drops"] == {}
    jobs = jobs_of(run)
    assert all(j["complete"] and j["iterations_done"] == 4 for j in jobs.values())
    assert jobs["a"]["loss"]["forced"] == jobs["b"]["loss"]["forced"] == 0


def test_priority_puts_the_favoured_job_in_the_upper_band_of_the_queues(series: Path):
    prio, fifo = series / "priority" / "rep1", series / "fifo" / "rep1"
    hosts = worker_hosts(prio)
    assert sent_prios(prio, hosts[1]) <= {4, 5, 6} and sent_prios(prio, hosts[2]) <= {1, 2, 3}
    assert len(sent_prios(fifo, hosts[1])) > 3  # without it, the same job spreads over the six data queues
    assert [jobs_of(prio)[n]["queues"] for n in ("a", "b")] == [[4, 6], [1, 3]]


def test_the_favoured_job_finishes_sooner(series: Path):
    # over the two repeats, as the comparison pools them: three timed iterations per run are too few
    # for every single pair to show it (the second pair's iteration means are within 0.5 %)
    def mean(policy: str, value) -> float:
        return sum(value(jobs_of(series / policy / rep)["a"]) for rep in ("rep1", "rep2")) / 2

    jct, iteration = (lambda j: j["jct_s"]), (lambda j: j["iteration"]["iteration_ms"]["mean"])
    assert mean("priority", jct) < 0.8 * mean("fifo", jct)
    assert mean("priority", iteration) < 0.9 * mean("fifo", iteration)


def test_the_reports_have_a_section_per_job(series: Path):
    run = series / "priority" / "rep1"
    md = (run / "report.md").read_text()
    assert "## Jobs" in md and "| a | 1 | 4-6 | 4 |" in md and "| b | 0 | 1-3 | 4 |" in md
    assert (series / "compare.html").stat().st_size > 0
    compare = json.loads((series / "compare.json").read_text())
    assert sorted(compare["jobs"]) == ["a", "b"]
    jct = compare["jobs"]["a"]["variants"][1]["ratios"]["jct_s"]
    assert jct["point"] < 0.8
    assert {m["key"] for m in compare["cluster"]["metrics"]} == {"mean_jct_s", "tail_jct_s", "makespan_s"}
    md = (series / "compare.md").read_text()
    assert "## Job a" in md
    # a job's iteration pooled over its ranks: 3 timed iterations x 4 ranks x 2 runs, where its
    # slowest-worker iterations (6) are too few for a p50
    pooled = compare["jobs"]["a"]["variants"][1]["ratios"]["rank_iteration_p50"]
    assert compare["jobs"]["a"]["variants"][1]["ratios"]["iteration_p50"]["point"] is None
    assert pooled["point"] < 0.95
    job_a = md.split("## Job a")[1].split("## Job b")[0]
    assert "priority vs fifo, iteration p50, pooled over ranks (ms)" in job_a
    assert "| iteration p50, pooled over ranks (ms) |" in job_a


def test_a_shifted_job_starts_its_first_iteration_after_its_shift(tmp_path: Path):
    cfg = tmp_path / "two.toml"
    cfg.write_text(TWO_JOBS)
    run = run_experiment(
        cfg,
        tmp_path / "run",
        "cluster.job_policy=timeshift",
        "cluster.timeshift.shifts_s=[0, 0.02]",
        "workload.iterations=2",
    )
    jobs = jobs_of(run)
    assert jobs["a"]["shift_s"] == 0 and jobs["b"]["shift_s"] == 0.02
    assert jobs["a"]["first_iteration_s"] == pytest.approx(0, abs=1e-6)
    assert 0.02 <= jobs["b"]["first_iteration_s"] < 0.021
    assert all(j["complete"] for j in jobs.values())
    assert (run / "plots" / "job_phases.png").stat().st_size > 0  # a single run's report draws its figures
