"""Two training jobs on the built-in dataplane ([[jobs]] on an emulated backend): each job runs on
its own hosts with its own ranks and its job id on the wire, `priority` puts the favoured job's
packets in the upper band of the data queues, and a job's first iteration starts its shift after
the release that every job's workers wait for, measured on the wall clock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runs import run_experiment
from emulated_runs import assert_clean, clean_machine  # noqa: F401 (clean_machine: autouse)
from job_runs import jobs_of, sent_prios, two_jobs, worker_hosts

from dlcp.wire.header import DATA_PORT, unpack_from

TWO_JOBS = """
name = "two-jobs-emulated"
backend = "builtin"
seed = 1
timeout_s = 120
[topology]
kind = "star"
hosts = 4
[links]
host_mbps = 50
""" + two_jobs(workers=2, iterations=6, compute_ms=5)


@pytest.fixture(scope="module")
def cfg(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("jobs") / "two.toml"
    path.write_text(TWO_JOBS)
    return path


def _job_ids_on_the_wire(pcap: Path, data_port: int) -> set[int]:
    from scapy.layers.inet import UDP
    from scapy.utils import rdpcap

    return {
        unpack_from(bytes(p[UDP].payload)).job_id for p in rdpcap(str(pcap)) if UDP in p and p[UDP].dport == data_port
    }


def test_priority_runs_each_job_on_its_own_hosts_in_its_own_band(cfg, tmp_path):
    run = run_experiment(
        cfg, tmp_path / "run", "cluster.job_policy=priority", 'output.pcap_ports=["s1-eth1", "s1-eth3"]'
    )
    hosts = worker_hosts(run)
    assert hosts == {1: {"h1", "h2"}, 2: {"h3", "h4"}}
    for names in hosts.values():
        assert sorted(json.loads((run / "records" / f"{h}-agent.json").read_text())["rank"] for h in names) == [0, 1]
    assert sent_prios(run, hosts[1]) <= {4, 5, 6} and sent_prios(run, hosts[2]) <= {1, 2, 3}
    jobs = jobs_of(run)
    assert all(j["complete"] and j["iterations_done"] == 6 for j in jobs.values())
    pcaps = sorted((run / "pcap").glob("*"))
    assert len(pcaps) == 2, pcaps
    seen = {p.name: _job_ids_on_the_wire(p, DATA_PORT) for p in pcaps}
    assert [ids for _, ids in sorted(seen.items())] == [{1}, {2}], seen  # h1's port carries job 1, h3's job 2
    md = (run / "report.md").read_text()
    assert "## Jobs" in md
    assert_clean()


def test_a_shifted_job_starts_its_first_iteration_its_shift_after_the_other(cfg, tmp_path):
    run = run_experiment(
        cfg,
        tmp_path / "run",
        "cluster.job_policy=timeshift",
        "cluster.timeshift.shifts_s=[0, 0.3]",
        "workload.iterations=3",
    )
    jobs = jobs_of(run)
    assert jobs["a"]["shift_s"] == 0 and jobs["b"]["shift_s"] == 0.3
    # wall clock: the release is one instant for both jobs; what is left is the workers' wake-ups
    first_a, first_b = jobs["a"]["first_iteration_s"], jobs["b"]["first_iteration_s"]
    assert 0 <= first_a < 0.02 and 0.3 <= first_b < 0.35, jobs
    assert first_b - first_a == pytest.approx(0.3, abs=0.03)
    assert all(j["complete"] for j in jobs.values())
    assert_clean()
