"""Worker and PS agents as real processes on 127.0.0.x (no root): PS mode and ring all-reduce with
the synthetic workload, records and progress per docs/runs.md, and the error protocol."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from agent_runs import REPO, agent_configs, free_port_pair, log_text, read_csv, start_agent, wait_all

from dlcp import records as R


def run(tmp_path, mode, world, **kw):
    ips = [f"127.0.0.{11 + r}" for r in range(world)]
    ps_ip = "127.0.0.10" if mode == "ps" else None
    ports = free_port_pair()
    cfgs = agent_configs(tmp_path, mode, world, ips, ps_ip, ports, **kw)
    procs = {host: start_agent(tmp_path, host, role) for host, role, _ in sorted(cfgs, key=lambda c: c[1] != "ps")}
    codes = wait_all(procs, 90)
    return cfgs, codes


def check_run(tmp_path, cfgs, codes, iterations):
    assert all(c == 0 for c in codes.values()), (codes, log_text(tmp_path))
    for host, role, _ in cfgs:
        prog = json.loads((tmp_path / "progress" / host).read_text())
        assert prog == {"iter": iterations, "iters": iterations, "state": "done"}
        msgs = read_csv(tmp_path / "records" / f"{host}-messages.csv")
        assert list(msgs[0]) == list(R.MESSAGE_COLUMNS)
        assert all(int(m["mct_us"]) == int(m["complete_us"]) - int(m["start_us"]) for m in msgs)
        totals = json.loads((tmp_path / "records" / f"{host}-agent.json").read_text())
        assert totals["status"] == "done" and totals["iterations_done"] == iterations
        if role == "worker":
            its = read_csv(tmp_path / "records" / f"{host}-iterations.csv")
            assert list(its[0]) == list(R.ITERATION_COLUMNS) and len(its) == iterations
            losses = [float(r["test_loss"]) for r in its if r["test_loss"]]
            assert len(losses) == 2 and losses[-1] < losses[0]  # training makes progress


def test_ps_mode_agents(tmp_path):
    cfgs, codes = run(tmp_path, "ps", 3)
    check_run(tmp_path, cfgs, codes, 6)
    ps_rows = read_csv(tmp_path / "records" / "h4-messages.csv")
    # 5 messages per iteration: the PS receives 3 pushes and sends 3 pulls of each
    assert len([r for r in ps_rows if r["side"] == "receiver"]) == 6 * 5 * 3
    assert {r["phase"] for r in ps_rows} == {"push", "pull"} and {r["rank"] for r in ps_rows} == {"-1"}


def test_allreduce_agents_with_loss_and_resync(tmp_path):
    cfgs, codes = run(tmp_path, "allreduce", 3, dlcp={"inject_loss": 0.05, "resync_every": 3}, per_packet=True)
    check_run(tmp_path, cfgs, codes, 6)
    rows = [r for h in ("h1", "h2", "h3") for r in read_csv(tmp_path / "records" / f"{h}-messages.csv")]
    assert {r["phase"] for r in rows} == {"reduce_scatter", "all_gather", "p2p"}
    assert all(r["lost_pkts"] == "0" for r in rows if r["phase"] == "reduce_scatter")
    assert all(r["protected_lost"] == "0" for r in rows)
    assert any(int(r["retx_pkts"]) > 0 for r in rows)
    resync = read_csv(tmp_path / "records" / "h2-resync.csv")
    assert [r["iter"] for r in resync] == ["2", "5"] and list(resync[0]) == list(R.RESYNC_COLUMNS)
    pk = read_csv(tmp_path / "records" / "h1-packets.csv")
    assert list(pk[0]) == list(R.PACKET_COLUMNS) and {p["side"] for p in pk} == {"sender", "receiver"}


@pytest.mark.parametrize(
    "comm",
    [
        {"scheduler": "dear", "dear": {"threshold_bytes": 50000}},
        {"scheduler": "bytescheduler", "bytescheduler": {"partition_bytes": 20000, "credit_bytes": 40000}},
        {"scheduler": "mgwfbp", "collective": "multitree"},
    ],
    ids=["dear", "bytescheduler", "mgwfbp-multitree"],
)
def test_scheduler_and_collective_agents(tmp_path, comm):
    """`[comm]` reaches the agents: the worker runs the scheduler over the collective, and trains."""
    cfgs, codes = run(tmp_path, "allreduce", 3, comm=comm, dlcp={"policy": "dlcp"})
    check_run(tmp_path, cfgs, codes, 6)
    assert "comm: scheduler " + comm["scheduler"] in (tmp_path / "logs" / "h1-worker.log").read_text()
    rows = read_csv(tmp_path / "records" / "h1-messages.csv")
    assert {r["phase"] for r in rows} >= {"reduce_scatter", "all_gather"}


def test_dssync_agents_average_parameters_in_shuffled_groups(tmp_path):
    cfgs, codes = run(tmp_path, "allreduce", 4, comm={"collective": "dssync", "dssync": {"group": 2}})
    check_run(tmp_path, cfgs, codes, 6)
    peers = {
        (r["iter"], r["peer"]) for r in read_csv(tmp_path / "records" / "h1-messages.csv") if r["side"] == "sender"
    }
    # rank 0 pairs with rank 1 in even iterations and with rank 2 in odd ones (groups of 2 of 4)
    assert {p for it, p in peers if int(it) % 2 == 0} == {"1"} and {p for it, p in peers if int(it) % 2} == {"2"}
    assert not (tmp_path / "records" / "h1-resync.csv").exists()


def test_tcp_baseline_agents(tmp_path):
    cfgs, codes = run(tmp_path, "ps", 2, dlcp={"transport": "tcp"})
    check_run(tmp_path, cfgs, codes, 6)


def agent(role, cfg_path):
    return subprocess.run(
        [sys.executable, "-m", f"agents.{role}", "--config", str(cfg_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda c: c.pop("ports"), "ports: required"),
        (lambda c: c.update(rank=7), "rank: 7 outside 0..1"),
        (lambda c: c["ports"].update(data=70000), "ports.data: 70000 is not a port number"),
        (lambda c: c["dlcp"].update(loss_budget=2), "dlcp.loss_budget: 2 is not a fraction"),
        (lambda c: c["dlcp"].update(ring_budget="never"), "dlcp.ring_budget: 'never'"),
        (
            lambda c: c["workload"].update(model="gpt5"),
            "workload.model: 'gpt5' is not one of mlp, cnn, resnet, synthetic",
        ),
        (lambda c: c["dlcp"].update(qmax=64), "dlcp.qmax: unknown key"),  # the switches' keys stay with the runner
        (lambda c: c["workers"][1].update(rank=0), "workers[1].rank: 0 is outside 0..1 or repeated"),
        (lambda c: c.update(ip="10.0.0.300"), "ip: '10.0.0.300' is not an IPv4 address"),
    ],
)
def test_bad_config_is_one_line_error(tmp_path, change, message):
    (_, _, cfg), _ = agent_configs(tmp_path, "allreduce", 2, ["127.0.0.11", "127.0.0.12"], None, (40000, 40001))
    change(cfg)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(cfg))
    p = agent("worker", path)
    assert p.returncode == 2  # EXIT_CONFIG (docs/runs.md)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("worker ") and message in lines[0], p.stderr


def test_missing_peer_is_one_line_error_with_records(tmp_path):
    agent_configs(tmp_path, "ps", 1, ["127.0.0.11"], "127.0.0.10", free_port_pair(), timeout_s=2)
    p = agent("worker", tmp_path / "agents" / "h1-worker.json")  # no PS running
    assert p.returncode == 1
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("worker h1: no control connection to rank 255"), p.stderr
    prog = json.loads((tmp_path / "progress" / "h1").read_text())
    assert prog["state"] == "error" and "no control connection" in prog["error"]
    assert json.loads((tmp_path / "records" / "h1-agent.json").read_text())["status"] == "error"
