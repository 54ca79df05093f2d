"""4-worker PS and 4-worker ring all-reduce between network namespaces joined by a Linux bridge
(root). Every sender drops 2 % of its data packets (dlcp.inject_loss); with p_msg = 1 % every message
must end within budget, with its retransmissions logged, and with no protected packet missing.
"""

from __future__ import annotations

import json

from agent_runs import agent_configs, check_bounded_loss, log_text, read_csv, start_agent, wait_all

from emulation import procs
from emulation.netns import BridgeLan

WORKLOAD = {"layers": [20_000, 200_000, 50_000, 1_000], "iterations": 5, "eval_every": 5}
DLCP = {"inject_loss": 0.02, "loss_budget": 0.01, "iter_budget": 0.02, "r_max": 3}


def run_on_lan(tmp_path, mode: str):
    world = 4
    with BridgeLan("tp", world + 1) as lan:
        hosts = {h.name: h for h in lan.hosts}
        ips = [lan.hosts[r].ip for r in range(world)]
        ps_ip = lan.hosts[world].ip if mode == "ps" else None
        cfgs = agent_configs(
            tmp_path, mode, world, ips, ps_ip, (9910, 9911), workload=WORKLOAD, dlcp=DLCP, timeout_s=90
        )
        running = {}
        try:
            for host, role, _ in sorted(cfgs, key=lambda c: c[1] != "ps"):
                p = start_agent(tmp_path, host, role, prefix=hosts[host].prefix())
                procs.record(p.pid, f"test-{role}", host, p.args)
                running[host] = p
            codes = wait_all(running, 120)
        finally:
            for p in running.values():
                if p.poll() is None:
                    p.kill()
                    p.wait()
                procs.forget(p.pid)
    assert all(c == 0 for c in codes.values()), (codes, log_text(tmp_path))
    rows = [r for host, _, _ in cfgs for r in read_csv(tmp_path / "records" / f"{host}-messages.csv")]
    totals = [json.loads((tmp_path / "records" / f"{host}-agent.json").read_text()) for host, _, _ in cfgs]
    return rows, totals


def test_ps_four_workers_through_bridge_with_loss(tmp_path):
    rows, totals = run_on_lan(tmp_path, "ps")
    assert {r["phase"] for r in rows} == {"push", "pull"}
    check_bounded_loss(rows, totals, DLCP["loss_budget"])


def test_ring_four_workers_through_bridge_with_loss(tmp_path):
    rows, totals = run_on_lan(tmp_path, "allreduce")
    assert {r["phase"] for r in rows} == {"reduce_scatter", "all_gather"}
    check_bounded_loss(rows, totals, DLCP["loss_budget"])
