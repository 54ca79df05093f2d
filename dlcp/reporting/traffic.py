"""Switch counters by kind of traffic, and the queue timeline of the built-in switch's samples.

The queue counters of a switch count packets per (port, priority queue, drop precedence). Queue 0
with drop precedence 0 holds background traffic under every policy, and under `fifo` every packet,
so those counters alone read as if protected gradient packets were dropped. What tells them apart:

- `non_dlcp` rows of the counter dump that every engine of the switch's pipeline core writes
  (the built-in switch's and ns-3's; docs/pipeline.md): the part of each queue counter that came
  from frames without a DLCP header, by the frame's DSCP class (dscp >> 3). Everything else in the
  queue counters carried a DLCP header: **gradient** traffic (data, retransmissions, probes). A
  frame without one is the transport's **control** traffic when its DSCP class is 7
  (BITMAP/STOP/FORCE_STOP over TCP at `PRIO_CONTROL`), **background** when its class is that of a
  `[[background]]` flow (`dscp`, default 0), and otherwise gradient traffic of the TCP baseline
  (`dlcp.transport = "tcp"`, which sends the message's priority as DSCP).
- Counter dumps without `non_dlcp` (bmv2's P4 program has no such counter): the split is unknown
  ("mixed"); the reports say so rather than guess it from the queues.

The timeline comes from `counters/sN-samples.jsonl` (built-in switch, every 0.1 s): the highest
occupancy of each priority queue of a port since the previous sample, and the drops in between,
split into gradient (DLCP header) and the rest (background and control: the samples do not tell
those two apart).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dlcp.reporting.load import RunData
from dlcp.wire.header import PRIO_CONTROL

TRAFFIC_KINDS = ("gradient", "control", "background", "mixed")
KINDS = ("admitted_pkts", "early_drop_pkts", "tail_drop_pkts")
SOURCE_TEXT = {
    "switch": "the switch's non-DLCP counters (frames without a DLCP header, by DSCP class)",
    "none": "not separable: the counter dump has no non-DLCP split (bmv2)",
}


def background_classes(config: dict | None) -> set[int]:
    """DSCP classes (dscp >> 3) of the run's background flows (default DSCP 0)."""
    flows = (config or {}).get("background") or []
    classes = {int(bg.get("dscp", 0) or 0) >> 3 for bg in flows if isinstance(bg, dict)}
    return classes or {0}


def non_dlcp_kind(dscp_class: int, bg_classes: set[int]) -> str:
    """What a frame without a DLCP header is, from its DSCP class."""
    if dscp_class == PRIO_CONTROL:
        return "control"
    if dscp_class in bg_classes:
        return "background"
    return "gradient"  # the TCP baseline's data carry the message priority as DSCP class


def _counts(row: dict) -> dict[str, int]:
    return {k: int(row.get(k) or 0) for k in KINDS}


def split_queues(dump: dict, bg_classes: set[int]) -> tuple[list[dict], str]:
    """The dump's queue rows split by traffic kind: (rows with port, qid, color, traffic and the
    three counts; how they were split: "switch", or "none" without the dump's non-DLCP rows)."""
    totals = {
        (int(q.get("port", 0)), int(q.get("qid", 0)), int(q.get("color", 0))): _counts(q)
        for q in dump.get("queues", [])
        if isinstance(q, dict)
    }
    out: dict[tuple, dict[str, int]] = {}

    def add(key, kind, counts):
        row = out.setdefault(key + (kind,), dict.fromkeys(KINDS, 0))
        for k in KINDS:
            row[k] += counts[k]

    if isinstance(dump.get("non_dlcp"), list):
        source = "switch"
        rest = {k: dict(v) for k, v in totals.items()}
        for r in dump["non_dlcp"]:
            key = (int(r["port"]), int(r["qid"]), int(r["color"]))
            counts = _counts(r)
            add(key, non_dlcp_kind(int(r["dscp_class"]), bg_classes), counts)
            if key in rest:
                for k in KINDS:
                    rest[key][k] -= counts[k]
        for key, counts in rest.items():
            if any(counts.values()):
                add(key, "gradient", counts)
    else:
        source = "none"
        for key, counts in totals.items():
            add(key, "mixed", counts)
    rows = [{"port": p, "qid": q, "color": c, "traffic": t, **v} for (p, q, c, t), v in sorted(out.items())]
    return rows, source


def with_rate(row: dict) -> dict:
    offered = sum(row[k] for k in KINDS)
    drops = row["early_drop_pkts"] + row["tail_drop_pkts"]
    return {**row, "drop_pkts": drops, "drop_fraction": drops / offered if offered else None}


def traffic_section(counters: list[dict], config: dict | None) -> dict:
    """summary.json's switch.traffic: counts by traffic kind overall, per drop precedence, per
    priority queue and per port, and per queue row."""
    bg = background_classes(config)
    by_kind: dict[str, dict] = {}
    # these three nest one level deeper (key -> kind -> counts): typed like by_kind for the loop below
    by_kind_prec: dict[str, dict] = {}
    by_prio: dict[str, dict] = {}
    by_port: dict[str, dict] = {}
    rows, sources = [], set()
    for dump in counters:
        split, dump_source = split_queues(dump, bg)
        sources.add(dump_source)
        for r in split:
            counts = {k: r[k] for k in KINDS}
            rows.append({"switch": dump.get("switch"), **r})
            for table, key in (
                (by_kind, None),
                (by_kind_prec, str(r["color"])),
                (by_prio, str(r["qid"])),
                (by_port, f"{dump.get('switch')}:{r['port']}"),
            ):
                if key is None:
                    cell = table.setdefault(r["traffic"], dict.fromkeys(KINDS, 0))
                elif table is by_kind_prec:
                    cell = table.setdefault(r["traffic"], {}).setdefault(key, dict.fromkeys(KINDS, 0))
                else:
                    cell = table.setdefault(key, {}).setdefault(r["traffic"], dict.fromkeys(KINDS, 0))
                for k in KINDS:
                    cell[k] += counts[k]
    order = {k: i for i, k in enumerate(TRAFFIC_KINDS)}
    source = "switch" if sources == {"switch"} else "none" if sources else None
    return {
        "source": source,
        "source_text": SOURCE_TEXT[source] if source is not None else "no counter dumps",
        "background_dscp_classes": sorted(bg),
        "by_traffic": {k: with_rate(v) for k, v in sorted(by_kind.items(), key=lambda kv: order[kv[0]])},
        "by_traffic_drop_prec": {
            k: {c: with_rate(v) for c, v in sorted(d.items())}
            for k, d in sorted(by_kind_prec.items(), key=lambda kv: order[kv[0]])
        },
        "by_prio": {
            q: {k: with_rate(v) for k, v in sorted(d.items(), key=lambda kv: order[kv[0]])}
            for q, d in sorted(by_prio.items(), key=lambda kv: -int(kv[0]))
        },
        "by_port": {
            p: {k: with_rate(v) for k, v in sorted(d.items(), key=lambda kv: order[kv[0]])}
            for p, d in sorted(by_port.items())
        },
        "by_queue": [with_rate(r) for r in rows],
    }


def drops(row: dict | None) -> int:
    return 0 if not row else int(row["early_drop_pkts"] + row["tail_drop_pkts"])


# --- timeline ------------------------------------------------------------------------------------------


@dataclass
class QueueTimeline:
    """One switch port over time (seconds since the first iteration started), per sample interval."""

    switch: str
    port: int
    t: np.ndarray  # end of each sample interval
    peak: np.ndarray  # (n, 8): highest occupancy of each priority queue in the interval
    gradient_drops: np.ndarray  # drops in the interval of packets with a DLCP header
    other_drops: np.ndarray  # drops in the interval of packets without one (background, control)
    iteration_ends: np.ndarray  # end of each iteration (slowest worker), same clock
    iterations: np.ndarray  # their iteration numbers


def _port_series(samples: list[dict], port: str) -> dict[str, np.ndarray]:
    rows = [(s["t"], s["ports"][port]) for s in samples if isinstance(s.get("ports"), dict) and port in s["ports"]]
    t = np.array([r[0] for r in rows], dtype=float)
    get = lambda k: np.array([float(r[1].get(k, 0)) for r in rows])
    peak = np.array([(list(r[1].get("peak") or []) + [0] * 8)[:8] for r in rows], dtype=float).reshape(len(rows), 8)
    dropped = get("early") + get("tail")
    other = get("non_dlcp_early") + get("non_dlcp_tail")
    return {"t": t, "peak": peak, "dropped": dropped, "other": other}


def busiest_port(samples: list[dict]) -> str | None:
    """The port with the most drops over the run (ties, or no drops: the highest queue peak)."""
    if not samples:
        return None
    last, best = samples[-1].get("ports", {}), None
    for port in last:
        s = _port_series(samples, port)
        if not s["t"].size:
            continue
        score = (s["dropped"][-1] if s["dropped"].size else 0, float(s["peak"].max()) if s["peak"].size else 0)
        if best is None or score > best[0]:
            best = (score, port)
    return None if best is None else best[1]


def queue_timeline(
    samples: dict[str, list[dict]], iteration_ends_unix: dict[int, float], start_unix: float | None = None
) -> QueueTimeline | None:
    """The timeline of the busiest port of any switch (the bottleneck, where the policy acts), from
    a second before `start_unix` (the first iteration's start; default: the first sample) on, in
    seconds since `start_unix`."""
    best = None
    for switch, rows in sorted(samples.items()):
        port = busiest_port(rows)
        if port is None:
            continue
        s = _port_series(rows, port)
        score = (s["dropped"][-1] if s["dropped"].size else 0, float(s["peak"].max()) if s["peak"].size else 0)
        if best is None or score > best[0]:
            best = (score, switch, port, s)
    if best is None or best[3]["t"].size < 2:
        return None
    _, switch, port, s = best
    iters = np.array(sorted(iteration_ends_unix), dtype=float)
    ends = np.array([iteration_ends_unix[int(i)] for i in iters], dtype=float)
    t0 = float(s["t"][0]) if start_unix is None else float(start_unix)
    # from a second before the first iteration to a second after the last (background traffic
    # goes on while the agents stop; that is not the experiment)
    keep = (s["t"] >= t0 - 1.0) & ((s["t"] <= ends.max() + 1.0) if ends.size else True)
    if keep.sum() < 2:
        return None
    t, peak, dropped, other_cum = s["t"][keep], s["peak"][keep], s["dropped"][keep], s["other"][keep]
    # per interval: differences of the cumulative counts (a restart of the counters would be negative)
    grad = np.maximum(np.diff(dropped - other_cum), 0)
    other = np.maximum(np.diff(other_cum), 0)
    return QueueTimeline(switch, int(port), t[1:] - t0, peak[1:], grad, other, ends - t0, iters)


def run_timeline(run: RunData) -> QueueTimeline | None:
    """The queue timeline of a run, with its iterations (slowest worker's end) on the same clock."""
    if not run.samples:
        return None
    t = run.iterations
    it, end, start = t.col("iter"), t.col("end_us"), t.col("start_us")
    ends = {}
    for i in np.unique(it[np.isfinite(it)]):
        e = end[(it == i) & np.isfinite(end)]
        if e.size:
            ends[int(i)] = float(e.max()) / 1e6
    start_unix = float(np.nanmin(start)) / 1e6 if np.isfinite(start).any() else None
    return queue_timeline(run.samples, ends, start_unix)
