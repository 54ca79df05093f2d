"""A synthetic run directory that follows docs/runs.md: for tests and for trying the reports
without root, Mininet or a switch. Deterministic for a given seed.

The run is PS mode on a star: workers h1..hW (ranks 0..W-1), the PS h(W+1) (rank -1), one switch s1
whose port k faces host hk, every link at `host_mbps`. Each iteration every worker pushes one
message per layer to the PS and pulls it back. Times are integers (microseconds) so scaling them by
an integer `time_scale` scales every time statistic exactly (linear-interpolation percentiles are
scale-equivariant): two runs differing only in `time_scale` have MCT and iteration-time ratios of
exactly that factor.

    python tests/support/synthetic_runs.py OUT_DIR [--policy fifo] [--time-scale 2] [--tail 0.05]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import pathlib

import numpy as np

from dlcp.reporting.bounds import FRAME_OVERHEAD_BYTES
from dlcp.reporting.load import BUDGET_COLUMNS, ITERATION_COLUMNS, MESSAGE_COLUMNS
from dlcp.wire.tagging import N_DATA_CLASSES

T0_US = 1_700_000_000_000_000  # 2023-11-14T22:13:20Z
BACKGROUND = (5000, 400)  # background packets admitted / tail-dropped at the PS's port
CONTROL_PKTS_PER_MESSAGE = 2
SAMPLE_PERIOD_S = 0.1


def layer_prio(layer: int, n_layers: int, policy: str) -> int:
    if policy in ("fifo", "magnitude"):
        return 1
    return N_DATA_CLASSES - (layer * N_DATA_CLASSES) // n_layers  # input_first, docs/design.md §4


def write_synthetic_run(
    path: str | pathlib.Path,
    *,
    policy: str = "dlcp",
    workers: int = 4,
    iterations: int = 20,
    layers: int = 8,
    seed: int = 0,
    time_scale: int = 1,
    tail: float = 0.05,
    loss_rate: float = 0.005,
    forced: int = 1,
    protected_lost: int = 0,
    final_accuracy: float = 0.9,
    eval_every: int = 5,
    host_mbps: float = 50.0,
    name: str | None = None,
    background: tuple[int, int] | None = BACKGROUND,
    target_accuracy: float | None = None,
    budget_rows: list[dict] | None = None,
) -> pathlib.Path:
    """Write a complete synthetic run directory at `path` and return it.

    tail: fraction of messages that wait a retransmission round (MCT x 3..10).
    loss_rate: fraction of each message's packets lost (rounded per message).
    forced: messages finished by FORCE_STOP; protected_lost: protected packets missing in the first
    forced message (a transport that works keeps this 0).
    background: (admitted, tail-dropped) background packets in queue 0 of the PS's port, with the
    transport's control traffic (CONTROL_PKTS_PER_MESSAGE per message, never dropped) in queue 7
    (queue 0 under fifo); the counter dump's `non_dlcp` rows and the queue samples
    (counters/s1-samples.jsonl) say which packets they were, as the built-in switch does.
    None: gradient traffic only, no `non_dlcp` rows and no samples.
    target_accuracy: config.toml's workload.target_accuracy (None: a run older than the key).
    budget_rows: a budget schedule's records of the first worker (records/h1-budget.csv).
    """
    path = pathlib.Path(path)
    rng = np.random.default_rng(seed)
    name = name or path.name
    ps_host, ps_rank = f"h{workers + 1}", -1
    hosts = [f"h{r + 1}" for r in range(workers)]
    values = [int(v) for v in rng.integers(2_000, 40_000, size=layers)]  # fp32 values per layer
    msg_bytes = [4 * v for v in values]
    msg_pkts = [math.ceil(b / 1400) for b in msg_bytes]
    ideal_us = [(b + p * FRAME_OVERHEAD_BYTES) * 8 / host_mbps for b, p in zip(msg_bytes, msg_pkts)]

    msgs: dict[str, list[dict]] = {h: [] for h in hosts + [ps_host]}
    iters: dict[str, list[dict]] = {h: [] for h in hosts}
    queues: dict[tuple[int, int, int], dict] = {}
    forced_left, prot_left = forced, protected_lost
    t = T0_US
    for it in range(iterations):
        compute = int(rng.integers(20_000, 30_000)) * time_scale
        comm_end = dict.fromkeys(hosts, 0)
        for phase in ("push", "pull"):
            phase_start = t + (compute if phase == "push" else max(comm_end.values()) - t)
            for r, h in enumerate(hosts):
                sender, receiver = (h, ps_host) if phase == "push" else (ps_host, h)
                srank, rrank = (r, ps_rank) if phase == "push" else (ps_rank, r)
                clock = phase_start
                for layer in range(layers):
                    base = ideal_us[layer] * (1.0 + rng.lognormal(0.0, 0.5) * workers)
                    slow = rng.random() < tail
                    if slow:
                        base *= rng.uniform(3, 10)
                    mct = int(base) * time_scale
                    half = int(base) // 2 * time_scale  # exact under scaling
                    pkts = msg_pkts[layer]
                    lost = round(pkts * loss_rate * (1 + rng.random()))
                    is_forced = forced_left > 0 and slow and phase == "push"
                    forced_left -= is_forced
                    prot = prot_left if is_forced else 0
                    prot_left -= prot
                    retx = int(rng.integers(1, pkts + 1)) if slow else 0
                    common = {
                        "iter": it,
                        "msg_id": layer,
                        "phase": phase,
                        "step": 0,
                        "layer_first": layer,
                        "layer_last": layer,
                        "prio": layer_prio(layer, layers, policy),
                        "bytes": msg_bytes[layer],
                        "pkts": pkts,
                        "lost_pkts": lost,
                        "retx_pkts": retx,
                        "rounds": 2 if slow else 1,
                        "forced": int(is_forced),
                        "protected_lost": prot,
                    }
                    start, complete = clock, clock + mct
                    msgs[sender].append(
                        {
                            "host": sender,
                            "rank": srank,
                            "side": "sender",
                            "peer": rrank,
                            **common,
                            "start_us": start,
                            "first_byte_us": "",
                            "complete_us": complete,
                            "mct_us": mct,
                        }
                    )
                    first = start + 50 * time_scale
                    msgs[receiver].append(
                        {
                            "host": receiver,
                            "rank": rrank,
                            "side": "receiver",
                            "peer": srank,
                            **common,
                            "start_us": first,
                            "first_byte_us": first,
                            "complete_us": complete - 20 * time_scale,
                            "mct_us": complete - 20 * time_scale - first,
                        }
                    )
                    clock += half  # messages overlap: the next starts half-way through
                    _count_queue(
                        queues,
                        port=hosts.index(receiver) + 1 if receiver in hosts else workers + 1,
                        prio=common["prio"],
                        pkts=pkts,
                        lost=lost,
                        retx=retx,
                        policy=policy,
                        msg_bytes=msg_bytes[layer],
                    )
                    comm_end[h] = max(comm_end[h], complete)
        end = max(comm_end.values())
        for r, h in enumerate(hosts):
            frac = min(1.0, (it + 1) / iterations)
            row = {
                "host": h,
                "rank": r,
                "iter": it,
                "start_us": t,
                "end_us": comm_end[h],
                "iteration_us": comm_end[h] - t,
                "compute_us": compute,
                "comm_us": comm_end[h] - t - compute,
                "lost_values": 0,
                "train_loss": round(2.3 * (1 - 0.8 * frac) + 0.01 * r, 6),
                "test_loss": "",
                "test_accuracy": "",
            }
            if (it + 1) % eval_every == 0 or it == iterations - 1:
                acc = final_accuracy * (1 - math.exp(-4 * frac)) / (1 - math.exp(-4))
                row.update(test_loss=round(2.3 * (1 - 0.85 * frac), 6), test_accuracy=round(acc, 6))
            iters[h].append(row)
        t = end + 1000 * time_scale

    non_dlcp = None
    if background is not None:
        n_messages = sum(1 for rows in msgs.values() for r in rows if r["side"] == "sender")
        non_dlcp = _add_background(
            queues,
            ps_port=workers + 1,
            policy=policy,
            background=background,
            control=CONTROL_PKTS_PER_MESSAGE * n_messages,
        )
    _write_dir(
        path,
        name=name,
        policy=policy,
        hosts=hosts,
        ps_host=ps_host,
        msgs=msgs,
        iters=iters,
        queues=queues,
        host_mbps=host_mbps,
        iterations=iterations,
        start=T0_US,
        end=t,
        workers=workers,
        non_dlcp=non_dlcp,
        target_accuracy=target_accuracy,
    )
    if budget_rows:
        _write_csv(path / "records" / f"{hosts[0]}-budget.csv", BUDGET_COLUMNS, budget_rows)
    if background is not None:
        _write_samples(path / "counters" / "s1-samples.jsonl", queues, non_dlcp, T0_US / 1e6, t / 1e6)
    return path


def _add_background(
    queues: dict, *, ps_port: int, policy: str, background: tuple[int, int], control: int
) -> list[dict]:
    """Background (DSCP 0) and control (DSCP class 7) packets into the queue counters; returns the
    dump's `non_dlcp` rows for them."""
    admitted, tail = background
    control_q = 0 if policy == "fifo" else 7
    rows = []
    for qid, dscp_class, adm, dropped in ((0, 0, admitted, tail), (control_q, 7, control, 0)):
        q = queues.setdefault(
            (ps_port, qid, 0), {"admitted_pkts": 0, "early_drop_pkts": 0, "tail_drop_pkts": 0, "frame": 1442}
        )
        q["admitted_pkts"] += adm
        q["tail_drop_pkts"] += dropped
        rows.append(
            {
                "port": ps_port,
                "qid": qid,
                "color": 0,
                "dscp_class": dscp_class,
                "admitted_pkts": adm,
                "early_drop_pkts": 0,
                "tail_drop_pkts": dropped,
            }
        )
    return rows


def _write_samples(path: pathlib.Path, queues: dict, non_dlcp: list[dict], start_s: float, end_s: float) -> None:
    """Samples every 0.1 s from the first iteration's start to the end: cumulative counts grow
    linearly to the dump's totals (so per-interval drops add up to them); queue peaks follow a
    fixed pattern (queue 0: 10..16 packets, the others 3)."""
    n = max(2, int((end_s - start_s) / SAMPLE_PERIOD_S) + 1)
    ports = sorted({p for p, _, _ in queues})
    total = {
        p: {
            k: sum(q[k] for (pp, _, _), q in queues.items() if pp == p)
            for k in ("admitted_pkts", "early_drop_pkts", "tail_drop_pkts")
        }
        for p in ports
    }
    other = {
        p: {
            k: sum(r[k] for r in non_dlcp if r["port"] == p)
            for k in ("admitted_pkts", "early_drop_pkts", "tail_drop_pkts")
        }
        for p in ports
    }
    with path.open("w") as f:
        for i in range(n):
            share = i / (n - 1)
            row = {}
            for p in ports:
                peak = [
                    10 + i % 7 if qid == 0 else (3 if any(pp == p and qq == qid for pp, qq, _ in queues) else 0)
                    for qid in range(8)
                ]
                row[str(p)] = {
                    "occ": [0] * 8,
                    "peak": peak,
                    **{
                        k: int(total[p][f"{k}_pkts" if k == "admitted" else f"{k}_drop_pkts"] * share)
                        for k in ("admitted", "early", "tail")
                    },
                    **{
                        f"non_dlcp_{k}": int(other[p][f"{k}_pkts" if k == "admitted" else f"{k}_drop_pkts"] * share)
                        for k in ("admitted", "early", "tail")
                    },
                }
            f.write(json.dumps({"t": round(start_s + i * SAMPLE_PERIOD_S, 4), "ports": row}) + "\n")


def _count_queue(
    queues: dict, *, port: int, prio: int, pkts: int, lost: int, retx: int, policy: str, msg_bytes: int
) -> None:
    """Switch counters consistent with the message: dlcp-style policies drop early at the most
    droppable precedence; fifo drops at the tail of its single queue."""
    frame = msg_bytes / pkts + FRAME_OVERHEAD_BYTES
    drops = lost + retx
    shares = [0.5, 0.25, 0.125, 0.125] if policy in ("dlcp", "magnitude") else [1.0, 0, 0, 0]
    for color, share in enumerate(shares):
        n = int(pkts * share) if color else pkts - sum(int(pkts * s) for s in shares[1:])
        if n == 0:
            continue
        q = queues.setdefault(
            (port, 0 if policy == "fifo" else prio, color),
            {"admitted_pkts": 0, "early_drop_pkts": 0, "tail_drop_pkts": 0},
        )
        q["admitted_pkts"] += n + (retx if color == 0 else 0)
    if drops:
        if policy in ("dlcp", "magnitude"):
            queues[(port, prio, 3)]["early_drop_pkts"] += drops
            queues[(port, prio, 3)]["admitted_pkts"] -= min(lost, queues[(port, prio, 3)]["admitted_pkts"])
        else:
            key = (port, 0 if policy == "fifo" else prio, 0)
            queues[key]["tail_drop_pkts"] += drops
    for q in queues.values():
        q.setdefault("frame", frame)


def _write_csv(p: pathlib.Path, columns, rows: list[dict]) -> None:
    with p.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns))
        w.writeheader()
        w.writerows(rows)


def _write_dir(
    path: pathlib.Path,
    *,
    name,
    policy,
    hosts,
    ps_host,
    msgs,
    iters,
    queues,
    host_mbps,
    iterations,
    start,
    end,
    workers,
    non_dlcp,
    target_accuracy=None,
) -> None:
    for d in ("records", "counters", "agents", "progress", "logs", "runtime"):
        (path / d).mkdir(parents=True, exist_ok=True)
    for h, rows in msgs.items():
        _write_csv(path / "records" / f"{h}-messages.csv", MESSAGE_COLUMNS, rows)
        sent = [r for r in rows if r["side"] == "sender"]
        got = [r for r in rows if r["side"] == "receiver"]
        (path / "records" / f"{h}-agent.json").write_text(
            json.dumps(
                {
                    "host": h,
                    "pkts_sent": sum(r["pkts"] + r["retx_pkts"] for r in sent),
                    "bytes_sent": sum(r["bytes"] for r in sent),
                    "pkts_received": sum(r["pkts"] - r["lost_pkts"] for r in got),
                    "malformed": {"version": 0, "length": 0},
                    "stale_pkts": 0,
                    "unexpected_pkts": 0,
                    "wall_time_s": (end - start) / 1e6,
                },
                indent=1,
            )
        )
        (path / "progress" / h).write_text(
            json.dumps({"iter": iterations, "iters": iterations, "state": "done"}) + "\n"
        )
    for h, rows in iters.items():
        _write_csv(path / "records" / f"{h}-iterations.csv", ITERATION_COLUMNS, rows)
    qrows = []
    for (port, qid, color), q in sorted(queues.items()):
        frame = int(q["frame"])
        qrows.append(
            {
                "port": port,
                "qid": qid,
                "color": color,
                "admitted_pkts": q["admitted_pkts"],
                "admitted_bytes": q["admitted_pkts"] * frame,
                "early_drop_pkts": q["early_drop_pkts"],
                "early_drop_bytes": q["early_drop_pkts"] * frame,
                "tail_drop_pkts": q["tail_drop_pkts"],
                "tail_drop_bytes": q["tail_drop_pkts"] * frame,
            }
        )
    all_hosts = hosts + [ps_host]
    (path / "counters" / "s1.json").write_text(
        json.dumps(
            {
                "switch": "s1",
                "backend": "builtin",
                "time_unix": end / 1e6,
                "queues": qrows,
                "drops": {"parser_error": 0, "not_ipv4": 0, "no_route": 0, "ttl_expired": 0},
                "ports": [
                    {"port": k + 1, "rx_pkts": 0, "tx_pkts": 0, "rx_bytes": 0, "tx_bytes": 0}
                    for k in range(len(all_hosts))
                ],
                "telemetry": {
                    "max_enq_qdepth": 60 if policy == "fifo" else 40,
                    "deq_timedelta_us": {"p50": 800, "p99": 9000, "max": 15000},
                },
                **({} if non_dlcp is None else {"non_dlcp": non_dlcp}),
            },
            indent=1,
        )
    )
    (path / "config.toml").write_text(
        f'[experiment]\nname = "synthetic"\nmode = "ps"\n\n[topology]\nkind = "star"\nworkers = {workers}\n\n'
        f'[links]\nhost_mbps = {host_mbps}\n\n[workload]\nmodel = "cnn"\niterations = {iterations}\n'
        + ("" if target_accuracy is None else f"target_accuracy = {target_accuracy}\n")
        + "\n"
        f'[dlcp]\npolicy = "{policy}"\nloss_budget = 0.01\n'
        + ('\n[[background]]\nkind = "udp_onoff"\ndst = "ps"\nrate_mbps = 40\n' if non_dlcp is not None else "")
    )
    (path / "meta.json").write_text(
        json.dumps(
            {
                "variant": name,
                "policy": policy,
                "backend": "builtin",
                "synthetic": True,
                "versions": {"dlcp": "synthetic"},
                "start_utc": "2023-11-14T22:13:20Z",
                "wall_time_s": (end - start) / 1e6,
                "exit_status": 0,
                "status": "ok",
            },
            indent=1,
        )
    )
    ips = {h: f"10.0.0.{i + 1}" for i, h in enumerate(all_hosts)}
    (path / "topology.json").write_text(
        json.dumps(
            {
                "hosts": [
                    {
                        "name": h,
                        "ip": ips[h],
                        "role": "ps" if h == ps_host else "worker",
                        "rank": -1 if h == ps_host else i,
                    }
                    for i, h in enumerate(all_hosts)
                ],
                "switches": [{"name": "s1", "device_id": 1, "ports": list(range(1, len(all_hosts) + 1))}],
                "links": [{"a": h, "b": "s1", "port": i + 1, "rate_mbps": host_mbps} for i, h in enumerate(all_hosts)],
            },
            indent=1,
        )
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tests/support/synthetic_runs.py", description=__doc__.splitlines()[0])
    ap.add_argument("out", type=pathlib.Path, help="run directory to create")
    ap.add_argument("--policy", default="dlcp")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--time-scale", type=int, default=1)
    ap.add_argument("--tail", type=float, default=0.05)
    ap.add_argument("--loss-rate", type=float, default=0.005)
    ap.add_argument("--final-accuracy", type=float, default=0.9)
    a = ap.parse_args(argv)
    print(
        write_synthetic_run(
            a.out,
            policy=a.policy,
            seed=a.seed,
            iterations=a.iterations,
            time_scale=a.time_scale,
            tail=a.tail,
            loss_rate=a.loss_rate,
            final_accuracy=a.final_accuracy,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
