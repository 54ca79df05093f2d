"""Helpers for agent tests: write agent configs (docs/runs.md) into a run directory and start the
agents as real processes, either on 127.0.0.x addresses (no root) or inside network namespaces."""

from __future__ import annotations

import csv
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def free_port_pair(ip: str = "127.0.0.1") -> tuple[int, int]:
    """A UDP+TCP data port and a TCP control port free right now."""
    for _ in range(50):
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind((ip, 0))
        port = u.getsockname()[1]
        try:
            t1 = socket.socket()
            t1.bind((ip, port))
            t2 = socket.socket()
            t2.bind((ip, port + 1))
        except OSError:
            continue
        finally:
            u.close()
        t1.close()
        t2.close()
        return port, port + 1
    raise RuntimeError("no free port pair")


def agent_configs(run_dir: Path, mode: str, world: int, worker_ips: list[str], ps_ip: str | None,
                  ports: tuple[int, int], workload: dict | None = None, dlcp: dict | None = None,
                  timeout_s: float = 60, per_packet: bool = False) -> list[tuple[str, str, dict]]:
    """(host, role, config) per agent: workers h1..hN, the PS h{N+1}."""
    workers = [{"rank": r, "host": f"h{r + 1}", "ip": worker_ips[r]} for r in range(world)]
    common = {
        "run_dir": str(run_dir), "job_id": 1, "world": world, "mode": mode,
        "ps": {"host": f"h{world + 1}", "ip": ps_ip} if ps_ip else None,
        "workers": workers, "ports": {"data": ports[0], "control": ports[1]},
        "workload": {"mode": mode, "workers": world, "model": "synthetic", "dataset": "synthetic",
                     "iterations": 6, "batch_size": 32,
                     "lr": 0.1, "seed": 1, "eval_every": 3, "bucket_values": 0, **(workload or {})},
        "dlcp": {"policy": "dlcp", "layer_order": "input_first", "drop_layer_bias": "none",
                 "loss_budget": 0.01, "iter_budget": 0.02, "layer_budgets": {}, "r_max": 3,
                 "deadline_ms": 2000, "fill": "rescale", "reliable": False, "ring_budget": "protect_rs",
                 "resync_every": 50, "pacing_mbps": None, "telemetry": False,
                 # keys the runner passes through for the switch: agents must ignore them
                 "load_balancing": "spray_random", "data_port": ports[0], "control_port": ports[1],
                 "qmax": 64, "k1": 48, "k2": 32, "k3": 16, **(dlcp or {})},
        "records": {"per_packet": per_packet},
        "timeout_s": timeout_s,
    }
    out = [(w["host"], "worker", dict(common, host=w["host"], role="worker", ip=w["ip"], rank=w["rank"]))
           for w in workers]
    if ps_ip:
        out.append((f"h{world + 1}", "ps", dict(common, host=f"h{world + 1}", role="ps", ip=ps_ip, rank=-1)))
    for sub in ("agents", "progress", "records", "logs"):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
    for host, role, cfg in out:
        (run_dir / "agents" / f"{host}.json").write_text(json.dumps(cfg, indent=1))
    return out


def start_agent(run_dir: Path, host: str, role: str, prefix: list[str] | None = None) -> subprocess.Popen:
    log = open(run_dir / "logs" / f"{host}-{role}.log", "wb")
    cmd = (prefix or []) + [sys.executable, "-m", f"agents.{role}", "--config", str(run_dir / "agents" / f"{host}.json")]
    return subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))


def wait_all(procs: dict, timeout: float) -> dict:
    """Exit codes by host; kills whatever is still running at the deadline."""
    deadline = time.monotonic() + timeout
    codes = {}
    try:
        for host, p in procs.items():
            codes[host] = p.wait(timeout=max(0.1, deadline - time.monotonic()))
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    return codes


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def log_text(run_dir: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')}" for p in sorted((run_dir / "logs").glob("*.log")))


def check_bounded_loss(rows: list[dict], totals: list[dict], loss_budget: float) -> None:
    """Every message ended within budget (none forced, no protected packet missing) and every
    injected drop was retransmitted or accepted as lost."""
    assert sum(t["injected_drops"] for t in totals) > 0  # loss really happened
    receivers = [r for r in rows if r["side"] == "receiver"]
    assert receivers
    for r in receivers:
        pkts, lost, retx = int(r["pkts"]), int(r["lost_pkts"]), int(r["retx_pkts"])
        assert r["forced"] == "0", r
        assert r["protected_lost"] == "0", r
        allowed = int(loss_budget * pkts) if r["phase"] != "reduce_scatter" else 0
        assert lost <= allowed, r
    # every packet the senders dropped was either retransmitted (and logged) or accepted as lost
    retx = sum(int(r["retx_pkts"]) for r in rows if r["side"] == "sender")
    lost = sum(int(r["lost_pkts"]) for r in rows if r["side"] == "sender")
    assert retx > 0 and retx + lost >= sum(t["injected_drops"] for t in totals)
