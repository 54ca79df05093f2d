"""What a run's statistics are taken over: the system's time (undilated) and the steady state
(after the warm-up iterations).

- Time dilation (D: meta.json `dilation`, else `[scale] dilation` in config.toml; the run's facts,
  dlcp/reporting/facts.py; dlcp/experiment/dilation.py): the run took
  D times longer than the system it stands for, so every measured time is divided by D here,
  once, before anything is summarised: durations (`mct_us`, `iteration_us`, `comm_us`,
  `compute_us`) / D, timestamps re-based so the run's first one stays and the rest are spaced
  / D. Rates in config.toml are the system's already. Keep-up figures (dlcp/reporting/keepup_check.py)
  are about the emulation machine and stay in wall-clock time.
- Warm-up (`workload.warmup_iterations` = W): iterations 0..W-1 (connections opening, caches and
  allocators warming up, background traffic not started yet) are left out of the iteration-time
  and MCT statistics (messages by their `iter`; the wire carries it mod 2^16, so runs of more
  than 65,536 iterations would drop a few more). Loss, switch counters and training curves keep
  every iteration. A config without the key (runs older than it) has W = 0; a run without a
  readable config.toml, too (the report says so).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from dlcp.reporting.load import RunData, Table

DURATION_COLUMNS = ("mct_us", "iteration_us", "comm_us", "compute_us")
TIMESTAMP_COLUMNS = ("start_us", "first_byte_us", "complete_us", "end_us")


def _first_timestamp(*tables: Table) -> float | None:
    firsts = [
        np.nanmin(t.col(c))
        for t in tables
        for c in TIMESTAMP_COLUMNS
        if c in t.columns and len(t) and np.isfinite(t.col(c)).any()
    ]
    return min(firsts) if firsts else None


def run_time_us(run: RunData, unix_s: float) -> float:
    """A wall-clock Unix time (seconds) on the timeline of `run`'s tables (microseconds; undilated
    the way `undilated` scales them), so it can be compared with their timestamps."""
    t = unix_s * 1e6
    if run.time_scale == 1:
        return t
    t0 = _first_timestamp(run.messages, run.iterations)  # scaling keeps the first timestamp in place
    return t if t0 is None else t0 + (t - t0) / run.time_scale


def _scaled(table: Table, d: float, t0: float | None) -> Table:
    cols = dict(table.columns)
    for c in DURATION_COLUMNS:
        if c in cols:
            cols[c] = cols[c] / d
    for c in TIMESTAMP_COLUMNS:
        if c in cols and t0 is not None:
            cols[c] = t0 + (cols[c] - t0) / d
    return Table(cols)


def undilated(run: RunData) -> RunData:
    """The run in the system's time: every measured time / D (a copy; D = 1 or done already: the
    run itself)."""
    d = run.facts.dilation
    if d == 1 or run.time_scale != 1:
        return run
    t0 = _first_timestamp(run.messages, run.iterations)
    counters = [_scaled_telemetry(c, d) for c in run.counters]
    return dataclasses.replace(
        run,
        messages=_scaled(run.messages, d, t0),
        iterations=_scaled(run.iterations, d, t0),
        counters=counters,
        time_scale=d,
    )


def _scaled_telemetry(dump: dict, d: float) -> dict:
    tel = dump.get("telemetry")
    if not isinstance(tel, dict) or not isinstance(tel.get("deq_timedelta_us"), dict):
        return dump
    q = {k: (v / d if isinstance(v, (int, float)) else v) for k, v in tel["deq_timedelta_us"].items()}
    return {**dump, "telemetry": {**tel, "deq_timedelta_us": q}}


def after_warmup(table: Table, warmup: int) -> Table:
    """Rows of iterations >= warmup (rows without an iteration are kept)."""
    if not warmup or not len(table) or "iter" not in table.columns:
        return table
    it = table.col("iter")
    return table.where(~(np.isfinite(it) & (it < warmup)))


def scale_info(run: RunData) -> dict:
    """summary.json `scale`: the dilation applied, the profile's compute scale and the warm-up left out, and where each came
    from (None: unknown, so times are as measured and every iteration counts)."""
    f = run.facts
    workload = (run.config or {}).get("workload") or {}
    return {
        "dilation": f.dilation,
        "dilation_from": f.dilation_from,
        "times": "measured / dilation (the system's time)" if f.dilation != 1 else "measured",
        "compute_scale": workload.get("compute_scale", 1.0),
        "profile": workload.get("profile", "") if workload.get("compute") == "profile" else "",
        # another model's profile fitted onto this model's tensors (the workers' records say)
        "profile_fitted": any(a.get("profile_fit") == "parameter fraction" for a in run.agents.values()),
        "warmup_iterations": f.warmup_iterations,
        "warmup_from": f.warmup_from,
    }
