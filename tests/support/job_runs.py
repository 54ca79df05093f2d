"""Runs of two jobs ([[jobs]]) in the tests of each backend: the jobs' part of the experiment file,
and what a run's files say per job."""

from __future__ import annotations

import json
from pathlib import Path

from agent_runs import read_csv


def two_jobs(workers: int, iterations: int, compute_ms: float) -> str:
    """`[workload]` and two all-reduce jobs of `workers` each, `a` (priority 1) and `b`: the tail of
    an experiment file whose head names the backend, topology and links."""
    return f"""[workload]
mode = "allreduce"
model = "synthetic"
iterations = {iterations}
warmup_iterations = 1
compute_ms = {compute_ms}
[[jobs]]
name = "a"
priority = 1
[jobs.workload]
workers = {workers}
[[jobs]]
name = "b"
[jobs.workload]
workers = {workers}
"""


def jobs_of(run: Path) -> dict:
    """summary.json's jobs, by name."""
    return {j["name"]: j for j in json.loads((run / "summary.json").read_text())["jobs"]["jobs"]}


def worker_hosts(run: Path) -> dict[int, set[str]]:
    """Each job's worker hosts, by job id (topology.json)."""
    out: dict[int, set[str]] = {}
    for h in json.loads((run / "topology.json").read_text())["hosts"]:
        if h["role"] == "worker":
            out.setdefault(h["job"], set()).add(h["name"])
    return out


def sent_prios(run: Path, hosts: set[str]) -> set[int]:
    """The priorities `hosts` tagged their messages with (senders' message records)."""
    return {
        int(r["prio"]) for h in hosts for r in read_csv(run / "records" / f"{h}-messages.csv") if r["side"] == "sender"
    }
