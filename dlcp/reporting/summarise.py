"""RunData -> the summary (the content of summary.json): MCT distributions, iteration time, loss,
switch counters, training curves, the lower bound, whether the emulation kept up, and a headline.

MCT statistics use sender rows only (`side == "sender"`): the sender sees the whole message, from
its first packet to STOP / FORCE_STOP. The time of iteration i is the slowest worker's
`iteration_us` (a synchronous step ends when its last worker does); its communication time is the
slowest worker's `comm_us`. Times are the system's (measured / time dilation) and MCT and
iteration statistics leave out the warm-up iterations (dlcp/reporting/steady.py); percentiles
with too few samples are refused (dlcp/reporting/stats.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dlcp.reporting.bounds import lower_bound
from dlcp.reporting.keepup_check import keepup_section
from dlcp.reporting.load import RunData, Table, run_status
from dlcp.reporting.stats import MIN_SAMPLES_RULE, PERCENTILE_METHOD_TEXT, distribution
from dlcp.reporting.steady import after_warmup, scale_info, undilated
from dlcp.reporting.traffic import traffic_section

SCHEMA_VERSION = 1
PHASE_ORDER = ("push", "pull", "reduce_scatter", "all_gather", "p2p")
COUNTER_KINDS = ("admitted_pkts", "early_drop_pkts", "tail_drop_pkts")


def sender_rows(run: RunData) -> Table:
    m = run.messages
    return m.where(m.col("side") == "sender") if len(m) else m


def steady_sender_rows(run: RunData) -> Table:
    """Sender rows of the iterations after the warm-up, in the system's time: what MCT statistics use."""
    return after_warmup(sender_rows(undilated(run)), run.facts.warmup_iterations)


def layer_key(first: float, last: float) -> str:
    """Group label of a message's layer range: "3" or "3-5" (a message counts once, under its range)."""
    if not np.isfinite(first):
        return "?"
    if not np.isfinite(last) or last == first:
        return str(int(first))
    return f"{int(first)}-{int(last)}"


def _layer_sort(key: str) -> tuple:
    head = key.split("-")[0]
    return (0, int(head), key) if head.isdigit() else (1, 0, key)


def grouped_mct(senders: Table, by: str) -> dict[str, np.ndarray]:
    """MCT values (us) of the sender rows grouped by "prio", "layer" or "phase", in display order."""
    mct = senders.col("mct_us")
    if by == "layer":
        keys = np.array(
            [layer_key(a, b) for a, b in zip(senders.col("layer_first"), senders.col("layer_last"))], dtype=object
        )
        order = sorted(set(keys), key=_layer_sort)
    elif by == "prio":
        # highest priority (served first) first; a missing prio groups under "?"
        keys = np.array([str(int(p)) if np.isfinite(p) else "?" for p in senders.col("prio")], dtype=object)
        order = sorted(set(keys), key=lambda k: (k == "?", -int(k) if k != "?" else 0))
    elif by == "phase":
        keys = np.array([p or "?" for p in senders.col("phase")], dtype=object)
        order = sorted(set(keys), key=lambda k: (PHASE_ORDER.index(k) if k in PHASE_ORDER else 99, k))
    else:
        raise ValueError(f"unknown grouping {by!r}")
    return {k: mct[keys == k] for k in order}


def mct_section(senders: Table) -> dict:
    return {
        "rows": "sender",
        "overall": distribution(senders.col("mct_us")),
        **{
            f"by_{g}": {k: distribution(v) for k, v in grouped_mct(senders, g).items()}
            for g in ("prio", "layer", "phase")
        },
    }


@dataclass
class IterationSeries:
    """Per iteration (sorted), over workers: the slowest worker's times, and every worker's."""

    iters: np.ndarray
    iteration_us: np.ndarray  # max over workers
    comm_us: np.ndarray  # max over workers (NaN where no worker recorded it)
    compute_us: np.ndarray
    per_host: dict[str, tuple[np.ndarray, np.ndarray]]  # host -> (iters, iteration_us)


def per_iteration(vals: np.ndarray, it: np.ndarray, iters: np.ndarray, reduce) -> np.ndarray:
    """reduce(finite values of rows with iteration i) for each i of `iters` (NaN where none)."""
    out = np.full(iters.size, np.nan)
    for j, i in enumerate(iters):
        v = vals[(it == i) & np.isfinite(vals)]
        if v.size:
            out[j] = reduce(v)
    return out


def iteration_series(run: RunData, warmup: int = 0) -> IterationSeries:
    """Per iteration from `warmup` on (0: every iteration)."""
    t = after_warmup(run.iterations, warmup)
    it = t.col("iter")
    ok = np.isfinite(it) & np.isfinite(t.col("iteration_us"))
    iters = np.unique(it[ok])

    def slowest(col: str) -> np.ndarray:
        return per_iteration(t.col(col), it, iters, np.max)

    per_host = {}
    for host in sorted(set(t.col("host")[ok])):
        m = ok & (t.col("host") == host)
        order = np.argsort(it[m])
        per_host[host] = (it[m][order], t.col("iteration_us")[m][order])
    return IterationSeries(iters, slowest("iteration_us"), slowest("comm_us"), slowest("compute_us"), per_host)


def message_comm_us(senders: Table) -> dict[int, float]:
    """Fallback communication time per iteration when there are no iteration records: from the first
    message started to the last completed (sender rows)."""
    out = {}
    it = senders.col("iter")
    for i in np.unique(it[np.isfinite(it)]):
        m = it == i
        s, c = senders.col("start_us")[m], senders.col("complete_us")[m]
        if np.isfinite(s).any() and np.isfinite(c).any():
            out[int(i)] = float(np.nanmax(c) - np.nanmin(s))
    return out


def steady_iteration_series(run: RunData) -> IterationSeries:
    """Iterations after the warm-up, in the system's time: what iteration statistics use."""
    return iteration_series(undilated(run), run.facts.warmup_iterations)


def iteration_section(series: IterationSeries, warmup: int = 0) -> dict:
    comm_ok = np.isfinite(series.comm_us) & np.isfinite(series.iteration_us)
    total_it = series.iteration_us[comm_ok].sum()
    return {
        "definition": "per iteration, the slowest worker's iteration_us / comm_us",
        "warmup_iterations": warmup,
        "count": int(series.iters.size),
        "iteration_ms": distribution(series.iteration_us, 1e-3),
        "comm_ms": distribution(series.comm_us, 1e-3),
        "compute_ms": distribution(series.compute_us, 1e-3),
        # Sum of communication time over sum of iteration time. Communication overlaps computation
        # (wait-free backprop), so this share and the compute share can add up to more than 1.
        "comm_share": float(series.comm_us[comm_ok].sum() / total_it) if total_it > 0 else None,
    }


def _sum(a: np.ndarray) -> int:
    return int(np.nansum(a)) if a.size else 0


def loss_section(rows: Table, run: RunData, which: str) -> dict:
    pkts, lost, retx = _sum(rows.col("pkts")), _sum(rows.col("lost_pkts")), _sum(rows.col("retx_pkts"))
    forced = np.nan_to_num(rows.col("forced")) > 0
    prot = np.nan_to_num(rows.col("protected_lost"))
    rounds = rows.col("rounds")
    lost_values = run.iterations.col("lost_values")
    by_prio = {}
    for p in sorted({int(x) for x in rows.col("prio") if np.isfinite(x)}, reverse=True):
        m = rows.col("prio") == p
        n = _sum(rows.col("pkts")[m])
        by_prio[str(p)] = {
            "pkts": n,
            "lost_pkts": _sum(rows.col("lost_pkts")[m]),
            "lost_fraction": _sum(rows.col("lost_pkts")[m]) / n if n else None,
            "forced": int(forced[m].sum()),
        }
    return {
        "rows": which,
        "messages": len(rows),
        "pkts": pkts,
        "lost_pkts": lost,
        "lost_fraction": lost / pkts if pkts else None,
        "retx_pkts": retx,
        "retx_fraction": retx / pkts if pkts else None,
        "rounds": {
            "mean": float(np.nanmean(rounds)) if np.isfinite(rounds).any() else None,
            "max": int(np.nanmax(rounds)) if np.isfinite(rounds).any() else None,
            "messages_retransmitted": int((np.nan_to_num(rounds) > 1).sum()),
        },
        "forced": int(forced.sum()),
        "forced_fraction": float(forced.mean()) if len(rows) else None,
        "protected_lost": int(prot.sum()),
        "protected_lost_messages": int((prot > 0).sum()),
        # The transport never accepts a message with a protected packet missing; only FORCE_STOP may.
        "protected_lost_unforced": int(prot[~forced].sum()),
        "lost_values": _sum(lost_values),
        "by_prio": by_prio,
    }


def _num(v) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0


def _ce_marked(counters: list[dict]) -> dict:
    """Packets the switches marked CE (the `ecn_marks` rows of the dumps): in total and by priority."""
    by_prio: dict[str, int] = {}
    for dump in counters:
        for r in dump.get("ecn_marks", []) or []:
            if isinstance(r, dict):
                by_prio[str(int(_num(r.get("qid"))))] = by_prio.get(str(int(_num(r.get("qid")))), 0) + int(
                    _num(r.get("ce_marked_pkts"))
                )
    return {"pkts": sum(by_prio.values()), "by_prio": dict(sorted(by_prio.items(), reverse=True))}


def switch_section(counters: list[dict]) -> dict:
    # keys: (switch, port, qid, color), (switch, port), qid, color; Any so that one loop fills all four
    by_queue: dict[Any, dict] = {}
    by_port: dict[Any, dict] = {}
    by_prio: dict[Any, dict] = {}
    by_color: dict[Any, dict] = {}
    totals = dict.fromkeys(COUNTER_KINDS, 0)
    for dump in counters:
        for q in dump.get("queues", []):
            if not isinstance(q, dict):
                continue
            port, qid, color = (int(_num(q.get(k))) for k in ("port", "qid", "color"))
            for key, table in (
                ((dump["switch"], port, qid, color), by_queue),
                ((dump["switch"], port), by_port),
                (qid, by_prio),
                (color, by_color),
            ):
                row = table.setdefault(key, dict.fromkeys(COUNTER_KINDS, 0))
                for k in COUNTER_KINDS:
                    row[k] += int(_num(q.get(k)))
            for k in COUNTER_KINDS:
                totals[k] += int(_num(q.get(k)))

    def with_rate(row: dict) -> dict:
        offered = sum(row.values())
        drops = row["early_drop_pkts"] + row["tail_drop_pkts"]
        return {**row, "drop_fraction": drops / offered if offered else None}

    return {
        "switches": [d["switch"] for d in counters],
        "totals": with_rate(totals),
        "by_port": [{"switch": s, "port": p, **with_rate(r)} for (s, p), r in sorted(by_port.items())],
        "by_queue": [
            {"switch": s, "port": p, "prio": q, "drop_prec": c, **with_rate(r)}
            for (s, p, q, c), r in sorted(by_queue.items(), key=lambda kv: (kv[0][0], kv[0][1], -kv[0][2], kv[0][3]))
        ],
        "by_prio": {str(k): with_rate(r) for k, r in sorted(by_prio.items(), reverse=True)},
        "by_drop_prec": {str(k): with_rate(r) for k, r in sorted(by_color.items())},
        "ce_marked": _ce_marked(counters),
        "drops": {d["switch"]: d.get("drops") for d in counters if isinstance(d.get("drops"), dict)},
        "telemetry": {d["switch"]: d["telemetry"] for d in counters if isinstance(d.get("telemetry"), dict)},
        "ports": {d["switch"]: d["ports"] for d in counters if isinstance(d.get("ports"), list)},
    }


@dataclass
class TrainingCurves:
    """Worker means per iteration: train loss at every iteration, test metrics at evaluations.
    Wall time is seconds since the first iteration started (end of the iteration)."""

    iters: np.ndarray
    wall_s: np.ndarray
    train_loss: np.ndarray
    eval_iters: np.ndarray
    eval_wall_s: np.ndarray
    test_loss: np.ndarray
    test_accuracy: np.ndarray


def training_curves(run: RunData) -> TrainingCurves:
    t = run.iterations
    it, end = t.col("iter"), t.col("end_us")
    t0 = np.nanmin(t.col("start_us")) if np.isfinite(t.col("start_us")).any() else np.nan

    def mean_at(vals: np.ndarray, iters: np.ndarray) -> np.ndarray:
        return per_iteration(vals, it, iters, np.mean)

    iters = np.unique(it[np.isfinite(it)])
    acc, tl = t.col("test_accuracy"), t.col("test_loss")
    ev = np.unique(it[np.isfinite(it) & (np.isfinite(acc) | np.isfinite(tl))])
    return TrainingCurves(
        iters,
        (mean_at(end, iters) - t0) / 1e6,
        mean_at(t.col("train_loss"), iters),
        ev,
        (mean_at(end, ev) - t0) / 1e6,
        mean_at(tl, ev),
        mean_at(acc, ev),
    )


def _last_finite(x: np.ndarray):
    f = x[np.isfinite(x)]
    return float(f[-1]) if f.size else None


def time_to_accuracy(c: TrainingCurves, target: float | None) -> tuple[float | None, int | None]:
    """(seconds since the first iteration started, iterations done) at the first evaluation whose
    worker-mean test accuracy reaches `target`; (None, None) when none does (or no target)."""
    if target is None:
        return None, None
    hit = np.flatnonzero(np.isfinite(c.test_accuracy) & (c.test_accuracy >= target))
    if not hit.size:
        return None, None
    i = int(hit[0])
    t = float(c.eval_wall_s[i])
    return (t if np.isfinite(t) else None), int(c.eval_iters[i]) + 1


def target_accuracy(run: RunData) -> float | None:
    """The run's time-to-accuracy target (config.toml `workload.target_accuracy`; None before the key)."""
    value = ((run.config or {}).get("workload") or {}).get("target_accuracy")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def training_section(c: TrainingCurves, target: float | None = None, clock: str | None = None) -> dict:
    """Final and best accuracy, losses, and the time to `target` accuracy (in the system's time: wall
    clock / dilation on the emulated backends, simulated on ns-3: `clock`)."""
    acc = c.test_accuracy[np.isfinite(c.test_accuracy)]
    wall = c.wall_s[np.isfinite(c.wall_s)]
    tta, tta_iters = time_to_accuracy(c, target)
    return {
        "iterations": int(c.iters.size),
        "evaluations": int(c.eval_iters.size),
        "final_accuracy": _last_finite(c.test_accuracy),
        "best_accuracy": float(acc.max()) if acc.size else None,
        "final_test_loss": _last_finite(c.test_loss),
        "final_train_loss": _last_finite(c.train_loss),
        "wall_time_s": float(wall.max()) if wall.size else None,
        "target_accuracy": target,
        "time_to_accuracy_s": tta,
        "iterations_to_accuracy": tta_iters,
        "clock": clock,
        "curve": {
            "iter": c.eval_iters.tolist(),
            "wall_s": c.eval_wall_s.tolist(),
            "test_accuracy": c.test_accuracy.tolist(),
            "test_loss": c.test_loss.tolist(),
        },
    }


def budget_schedule_section(run: RunData) -> dict:
    """A budget schedule's changes (records/hN-budget.csv; DBLP's phases), per host in order: iteration
    (-1: the start), critical or not, the budget from then on, the gradient norm and its change."""
    t = run.budget
    out: dict[str, list] = {}
    for i in np.argsort(t.col("iter"), kind="stable") if len(t) else []:
        out.setdefault(str(t.col("host")[i]), []).append(
            {k: t.col(k)[i] for k in ("iter", "critical", "budget", "grad_norm", "change")}
        )
    return {
        "hosts": out,
        "critical_share": float(np.mean(t.col("critical"))) if len(t) else None,
    }


def agents_section(agents: dict[str, dict]) -> dict:
    """Agent totals flattened one level ({"malformed": {"version": 2}} -> "malformed.version")."""
    per_host = {}
    for host, data in agents.items():
        flat = {}
        for k, v in data.items():
            if isinstance(v, dict):
                flat.update({f"{k}.{kk}": vv for kk, vv in v.items() if isinstance(vv, (int, float))})
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                flat[k] = v
        per_host[host] = flat
    return per_host


def summarise(run: RunData) -> dict:
    """The full summary of one run (JSON-ready apart from NaN, see `json_ready`)."""
    run = undilated(run)
    warmup = run.facts.warmup_iterations
    all_senders = sender_rows(run)
    senders = after_warmup(all_senders, warmup)
    loss_rows, loss_which = all_senders, "sender"
    if len(all_senders) == 0 and len(run.messages):
        run.problems.append("records: no sender rows; MCT unavailable, loss counted from receiver rows")
        loss_rows, loss_which = run.messages, "receiver"
    series = iteration_series(run, warmup)
    all_iters = (
        np.unique(run.iterations.col("iter")[np.isfinite(run.iterations.col("iter"))])
        if len(run.iterations)
        else np.empty(0)
    )
    comm = {int(i): float(c) for i, c in zip(series.iters, series.comm_us) if np.isfinite(c)}
    comm_source = "iterations comm_us"
    if not comm and len(senders):
        comm, comm_source = message_comm_us(senders), "message records (first start to last completion)"
    curves = training_curves(run)
    summary = {
        "schema": SCHEMA_VERSION,
        "run": run_info(run),
        "percentile_method": PERCENTILE_METHOD_TEXT,
        "min_samples_rule": MIN_SAMPLES_RULE,
        "problems": list(run.problems),
        "scale": {
            **scale_info(run),
            "warmup_iterations_left_out": int((all_iters < warmup).sum()),
            "warmup_messages_left_out": len(all_senders) - len(senders),
        },
        "keep_up": keepup_section(run, senders),
        "mct_us": mct_section(senders),
        "iteration": iteration_section(series, warmup),
        "loss": loss_section(loss_rows, run, loss_which),
        "switch": {**switch_section(run.counters), "traffic": traffic_section(run.counters, run.config)},
        "agents": agents_section(run.agents),
        "training": {
            **training_section(curves, target_accuracy(run), run.facts.clock),
            "payload": payload_of(run),
        },
        "lower_bound": {**lower_bound(run, senders, comm), "comm_source": comm_source},
        "budget_schedule": budget_schedule_section(run),
    }
    summary["headline"] = headline(summary)
    return summary


SIZES_ONLY_TEXT = "sizes only (workload.payload = 'sizes': packets carried no gradient values; nothing was trained)"


def payload_of(run: RunData) -> str:
    """What the run's gradient packets carried: "values" (trained) or "sizes" (a simulated run of a
    layer profile: no values, so no losses or accuracy)."""
    meta, cfg = run.meta or {}, run.config or {}
    return meta.get("payload") or (cfg.get("workload") or {}).get("payload") or "values"


def run_info(run: RunData) -> dict:
    meta = run.meta or {}
    cfg = run.config or {}
    return {
        "name": run.name,
        "dir": str(run.path),
        "policy": run.policy,
        "mode": meta.get("mode") or (cfg.get("experiment") or {}).get("mode") or cfg.get("mode"),
        "backend": meta.get("backend"),
        "git": meta.get("git_revision") or meta.get("git"),
        "start_utc": meta.get("start_utc"),
        "wall_time_s": meta.get("wall_time_s"),
        "exit_status": meta.get("exit_status"),
        "status": run_status(run.meta),
        "error": meta.get("error"),  # why a run that failed ended (its first line), when meta.json says
        # stopped early (Ctrl-C, SIGTERM, an error, killed): the report covers only what was recorded
        "partial": run_status(run.meta) not in (None, "ok"),
    }


def headline(s: dict) -> dict:
    lb = s["lower_bound"].get("iteration", {})
    return {
        "mct_count": s["mct_us"]["overall"]["count"],
        "iteration_count": s["iteration"]["count"],
        "mct_p50_us": s["mct_us"]["overall"]["p50"],
        "mct_p99_us": s["mct_us"]["overall"]["p99"],
        "mct_p999_us": s["mct_us"]["overall"]["p999"],
        "iteration_p50_ms": s["iteration"]["iteration_ms"]["p50"],
        "iteration_p99_ms": s["iteration"]["iteration_ms"]["p99"],
        "final_accuracy": s["training"]["final_accuracy"],
        "time_to_accuracy_s": s["training"]["time_to_accuracy_s"],
        "lost_fraction": s["loss"]["lost_fraction"],
        "forced": s["loss"]["forced"],
        "protected_lost": s["loss"]["protected_lost"],
        "comm_p50_vs_ideal": lb.get("p50_multiple"),
        "comm_p99_vs_ideal": lb.get("p99_multiple"),
        "kept_up": s["keep_up"]["ok"],
    }


def json_ready(obj):
    """NaN/inf -> None and numpy scalars -> Python, recursively (summary.json is strict JSON)."""
    if isinstance(obj, dict):
        return {str(k): json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_ready(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if np.isfinite(obj) else None
    return obj
