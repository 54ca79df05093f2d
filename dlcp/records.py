"""Agent records (docs/runs.md "Records"): column lists and CSV / JSON writers.

Rows are collected in memory by the transport and the agents and written at the end of a run (and
on error, so a failed run keeps what it had). Files are replaced atomically: a reader never sees half
a file. Times are wall-clock microseconds since the Unix epoch (`now_us`).
"""

from __future__ import annotations

import csv
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

MESSAGE_COLUMNS = (
    "host",
    "rank",
    "side",
    "peer",
    "iter",
    "msg_id",
    "phase",
    "step",
    "layer_first",
    "layer_last",
    "prio",
    "bytes",
    "pkts",
    "lost_pkts",
    "retx_pkts",
    "rounds",
    "forced",
    "protected_lost",
    "start_us",
    "first_byte_us",
    "complete_us",
    "mct_us",
)
ITERATION_COLUMNS = (
    "host",
    "rank",
    "iter",
    "start_us",
    "end_us",
    "iteration_us",
    "compute_us",
    "comm_us",
    "lost_values",
    "train_loss",
    "test_loss",
    "test_accuracy",
)
PACKET_COLUMNS = (
    "side",
    "src_rank",
    "dst_rank",
    "phase",
    "iter",
    "msg_id",
    "seq",
    "prio",
    "drop_prec",
    "send_us",
    "recv_us",
    "retx",
)
RESYNC_COLUMNS = ("host", "rank", "iter", "drift_l2", "drift_max", "param_l2")
# a budget schedule's changes (dlcp/iteration/budget_schedule.py: DBLP's phases); iter -1: the start
BUDGET_COLUMNS = ("host", "rank", "iter", "grad_norm", "change", "critical", "budget")


def now_us() -> int:
    return time.time_ns() // 1000


def _replace(path: Path, write) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("." + path.name + ".tmp")
    with open(tmp, "w", newline="") as f:
        write(f)
    os.replace(tmp, path)


def _cell(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return "" if v != v else repr(v)  # NaN -> empty
    return v


def write_rows(path: Path, columns, rows: list[dict]) -> None:
    """CSV with a header row; missing keys and None become empty cells."""

    def write(f):
        w = csv.writer(f)
        w.writerow(columns)
        for r in rows:
            w.writerow([_cell(r.get(c)) for c in columns])

    _replace(Path(path), write)


def write_packet_arrays(path: Path, chunks: list[dict]) -> None:
    """Per-packet records: `chunks` are dicts of equal-length numpy arrays (one per message and
    side); `send_us` / `recv_us` entries < 0 become empty cells."""

    def write(f):
        w = csv.writer(f)
        w.writerow(PACKET_COLUMNS)
        for ch in chunks:
            n = len(ch["seq"])
            cols = []
            for c in PACKET_COLUMNS:
                v = ch[c]
                if isinstance(v, np.ndarray):
                    vals = v.tolist()
                    if c in ("send_us", "recv_us"):
                        vals = ["" if x < 0 else x for x in vals]
                    cols.append(vals)
                else:
                    cols.append([v] * n)
            w.writerows(zip(*cols))

    _replace(Path(path), write)


def write_json(path: Path, obj) -> None:
    _replace(Path(path), lambda f: f.write(json.dumps(obj, indent=1, sort_keys=True)))


def agent_totals(host: str, role: str, rank: int, status: str, error: str | None, iterations_done: int) -> dict:
    """The keys every records/hN-agent.json starts with; each backend adds what it knows (the
    transport's statistics, wall-clock times, threads, compute keep-up)."""
    return {
        "host": host,
        "role": role,
        "rank": rank,
        "status": status,
        "error": error,
        "iterations_done": iterations_done,
    }


def workload_totals(workload) -> dict:
    """What a worker's hN-agent.json says of its workload on every backend: how its compute profile
    fits its tensors ("exact", or another model's laid over them by "parameter fraction")."""
    fit = getattr(workload, "profile_fit", None)
    return {"profile_fit": fit} if fit else {}


def write_agent_records(
    rec: Path,
    host: str,
    totals: dict,
    message_rows: list[dict] | None,
    iteration_rows: list[dict] | None = None,
    resync_rows: Sequence[dict] = (),
    packet_chunks: list[dict] | None = None,
    budget_rows: Sequence[dict] = (),
) -> None:
    """An agent's records in `rec` (docs/runs.md, "Records"), the one writer of both backends:
    hN-messages.csv (None: the agent had no transport), hN-packets.csv (None: not recorded),
    hN-iterations.csv (a worker's; None: not a worker), hN-resync.csv and hN-budget.csv (when there
    are rows) and hN-agent.json."""
    rec = Path(rec)
    if message_rows is not None:
        write_rows(rec / f"{host}-messages.csv", MESSAGE_COLUMNS, message_rows)
    if packet_chunks is not None:
        write_packet_arrays(rec / f"{host}-packets.csv", packet_chunks)
    if iteration_rows is not None:
        write_rows(rec / f"{host}-iterations.csv", ITERATION_COLUMNS, iteration_rows)
    if resync_rows:
        write_rows(rec / f"{host}-resync.csv", RESYNC_COLUMNS, list(resync_rows))
    if budget_rows:
        write_rows(rec / f"{host}-budget.csv", BUDGET_COLUMNS, list(budget_rows))
    write_json(rec / f"{host}-agent.json", totals)
