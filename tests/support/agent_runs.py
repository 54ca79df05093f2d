"""Helpers for agent tests: write agent configs (docs/runs.md) into a run directory and start the
agents as real processes, either on 127.0.0.x addresses (no root) or inside network namespaces."""

from __future__ import annotations

import csv
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from dlcp.experiment import agent_config as AC
from dlcp.experiment import config
from dlcp.network import topology

REPO = Path(__file__).resolve().parents[2]


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


def agent_configs(
    run_dir: Path,
    mode: str,
    world: int,
    worker_ips: list[str],
    ps_ip: str | None,
    ports: tuple[int, int],
    workload: dict | None = None,
    dlcp: dict | None = None,
    timeout_s: float = 60,
    per_packet: bool = False,
    comm: dict | None = None,
) -> list[tuple[str, str, dict]]:
    """(host, role, config as written) per agent, written into run_dir/agents by the runner's own
    code (dlcp.experiment.agent_config) from an experiment on a star: workers h1..hN, the PS
    h{N+1}, at the given addresses instead of the topology's."""
    raw = {
        "name": "agents-test",
        "timeout_s": timeout_s,
        "topology": {"kind": "star", "hosts": max(2, world + (1 if ps_ip else 0))},
        "workload": {
            "mode": mode,
            "workers": world,
            "model": "synthetic",
            "dataset": "synthetic",
            "iterations": 6,
            "batch_size": 32,
            "lr": 0.1,
            "eval_every": 3,
            **(workload or {}),
        },
        "dlcp": {"data_port": ports[0], "control_port": ports[1], **(dlcp or {})},
        "comm": comm or {},
        "output": {"per_packet": per_packet},
    }
    cfg = config.validate(raw)
    spec = topology.from_config(cfg)
    addresses = {f"h{r + 1}": ip for r, ip in enumerate(worker_ips)} | ({f"h{world + 1}": ps_ip} if ps_ip else {})
    for h in spec.hosts.values():
        h.ip = addresses.get(h.name, h.ip)
    for sub in ("agents", "progress", "records", "logs"):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
    out = []
    for host, role, acfg in AC.agent_configs(cfg, spec, run_dir):
        AC.write_agent_config(run_dir, host, role, acfg)
        out.append((host, role, acfg.model_dump(mode="json")))
    return out


def start_agent(run_dir: Path, host: str, role: str, prefix: list[str] | None = None) -> subprocess.Popen:
    log = open(run_dir / "logs" / f"{host}-{role}.log", "wb")  # noqa: SIM115
    cmd = (prefix or []) + [
        sys.executable,
        "-m",
        f"agents.{role}",
        "--config",
        str(AC.agent_config_path(run_dir, host, role)),
    ]
    return subprocess.Popen(
        cmd,
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )


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
