"""A run's timeline as a Chrome / Perfetto trace (`trace.json`, the Trace Event Format): open it at
ui.perfetto.dev (Open trace file) or in chrome://tracing.

Drawn from a finished run directory's records (docs/runs.md), nothing else:

- per worker rank (a process `rank N (hN)`), a `compute` thread with one slice per layer per
  iteration for the forward (`fwd <layer>`) and the backward (`bwd <layer>`): with profile compute
  the profile's times (`compute_scale` included) laid from the iteration's start, as the workers'
  compute model lays its deadlines (forward from layer 0 up, backward from the last layer down
  after it; lateness against them is in the agents' totals, not here); with real compute one
  `compute` slice per iteration (the CPU's own per-layer times are not recorded);
- per worker rank, one async slice per message it sent (sender rows of its message records),
  from its first packet to its STOP, named `<phase> it<iter> msg<id>` (ring steps add `step<k>`),
  with its bytes, packets, lost and retransmitted packets and PROBE `rounds` (1 = no
  retransmission) as arguments; a message that needed retransmission rounds is named with them;
- per switch port (a process per switch, `sN`), counters from the queue samples
  (counters/sN-samples.jsonl, the built-in dataplane): the occupancy of each priority queue and
  the cumulative early and tail drops.

Times are the system's: microseconds since the run's first record, divided by the time dilation,
as the reports show them.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from dlcp.experiment import config as configmod
from dlcp.experiment.workload_shape import workload_shape
from dlcp.reporting.facts import run_facts

TRACE_NAME = "trace.json"
OPEN_HINT = "open it at https://ui.perfetto.dev (Open trace file) or in chrome://tracing"
SWITCH_PID_BASE = 10_000


def _rows(path: Path) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def write_trace(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write the run's trace (default `<run_dir>/trace.json`); its path. ValueError with one line
    when the directory has no records."""
    run_dir = Path(run_dir)
    out = Path(out) if out is not None else run_dir / TRACE_NAME
    events = trace_events(run_dir)
    out.write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}, separators=(",", ":")))
    return out


def _meta(run_dir: Path) -> dict | None:
    try:
        meta = json.loads((run_dir / "meta.json").read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def trace_events(run_dir: Path) -> list[dict]:
    if not (run_dir / "config.toml").is_file():
        raise ValueError(f"{run_dir}: not a run directory (no config.toml)")
    config = configmod.load(run_dir / "config.toml", [])
    records = run_dir / "records"
    iterations = sorted(records.glob("*-iterations.csv"))
    if not iterations:
        raise ValueError(f"{run_dir}: no iteration records (records/*-iterations.csv)")
    iters = [r for f in iterations for r in _rows(f)]
    senders = [r for f in sorted(records.glob("*-messages.csv")) for r in _rows(f) if r["side"] == "sender"]
    samples = sorted((run_dir / "counters").glob("*-samples.jsonl"))
    dilation = run_facts(_meta(run_dir), config).dilation  # meta.json first, as every report
    t0 = min(int(r["start_us"]) for r in iters + senders)
    to_us = lambda t: (int(t) - t0) / dilation
    events: list[dict] = []
    ranks = sorted({(int(r["rank"]), r["host"]) for r in iters})
    for rank, host in ranks:
        events.append({"ph": "M", "name": "process_name", "pid": rank, "args": {"name": f"rank {rank} ({host})"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": rank, "args": {"sort_index": rank}})
        events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": 1, "args": {"name": "compute"}})
    events += _compute_events(config, iters, to_us, dilation)
    events += _message_events(senders, to_us)
    for i, path in enumerate(samples):
        events += _switch_events(path, SWITCH_PID_BASE + i, t0, dilation)
    return events


def _compute_events(config: dict, iters: list[dict], to_us, dilation: float) -> list[dict]:
    try:
        shape = workload_shape(config)
    except ValueError:
        shape = None  # real compute: one slice per iteration
    events = []
    for r in iters:
        rank, it, start = int(r["rank"]), int(r["iter"]), to_us(r["start_us"])
        base = {"pid": rank, "tid": 1, "ph": "X", "args": {"iteration": it}}
        if shape is None:
            events.append(
                {**base, "cat": "compute", "name": "compute", "ts": start, "dur": int(r["compute_us"]) / dilation}
            )
            continue
        t = start
        for lay in shape.layers:
            dur = lay.forward_s * 1e6
            events.append({**base, "cat": "forward", "name": f"fwd {lay.name}", "ts": t, "dur": dur})
            t += dur
        for lay in reversed(shape.layers):
            dur = lay.backward_s * 1e6
            events.append({**base, "cat": "backward", "name": f"bwd {lay.name}", "ts": t, "dur": dur})
            t += dur
    return events


def _message_events(senders: list[dict], to_us) -> list[dict]:
    events = []
    for n, r in enumerate(senders):
        if not r.get("complete_us"):
            continue  # never finished (a failed run): no end to draw
        rounds = int(r.get("rounds") or 1)
        step = f" step{r['step']}" if r.get("step") not in (None, "", "0") else ""
        name = f"{r['phase']} it{r['iter']} msg{r['msg_id']}{step}" + (f" ({rounds} rounds)" if rounds > 1 else "")
        args = {
            k: r[k]
            for k in ("peer", "bytes", "pkts", "lost_pkts", "retx_pkts", "rounds", "forced", "prio", "mct_us")
            if k in r
        }
        common = {"cat": "message", "id": n, "pid": int(r["rank"]), "name": name}
        events.append({**common, "ph": "b", "ts": to_us(r["start_us"]), "args": args})
        events.append({**common, "ph": "e", "ts": to_us(r["complete_us"])})
    return events


def _switch_events(path: Path, pid: int, t0: int, dilation: float) -> list[dict]:
    switch = path.name.split("-")[0]
    events: list[dict] = [{"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"switch {switch}"}}]
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        sample = json.loads(line)
        ts = (sample["t"] * 1e6 - t0) / dilation
        if ts < 0:
            continue
        for port, q in sample.get("ports", {}).items():
            occ = {f"q{i}": v for i, v in enumerate(q.get("occ", []))}
            events.append({"ph": "C", "pid": pid, "name": f"port {port} queue depth (pkts)", "ts": ts, "args": occ})
            drops = {"early": q.get("early", 0), "tail": q.get("tail", 0)}
            events.append({"ph": "C", "pid": pid, "name": f"port {port} drops (cumulative)", "ts": ts, "args": drops})
    return events
