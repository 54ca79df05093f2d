"""`timeshift`: each job's first iteration is delayed by a time-shift chosen so that the jobs'
communication phases interleave on the links they share (after CASSINI, NSDI'24).

CASSINI puts each job's iteration on a circle whose perimeter is its iteration time, with its
communication phases as arcs; jobs sharing a link go on one circle whose perimeter is the least
common multiple of their iteration times, and it rotates each job's arcs so that as little demand
as possible lies over the link's capacity. Here, with every job on one fabric:

- a job's pattern is its iteration time and the intervals of it in which it communicates, as the
  alpha-beta timeline predicts them for the job alone (dlcp/comm/timeline.py: the job's scheduler,
  collective and workers, its profile's compute, the links' cost model; docs/schedulers.md), in
  the steady state (iteration 1 of 3);
- a communicating job is taken to want the whole bottleneck (demand 1, capacity 1), so the excess
  demand at an instant is the number of jobs communicating then, less one;
- time is cut into steps of the longest iteration / `resolution`; each job's iteration is a whole
  number of steps; the unified circle is the least common multiple of those numbers, at most 16
  longest iterations (beyond that the horizon stops there: an approximation);
- the first job keeps shift 0; the others' shifts (0 .. their iteration time, in steps) minimise
  the excess summed over the circle: every combination for two jobs, one job at a time (until
  nothing improves) for more. Ties go to the smaller shift.

So what it assumes is CASSINI's: jobs that, left alone, repeat the same iteration, which a time-
shift at the start then keeps apart. It does not re-align jobs that drift apart while running
(CASSINI's agents re-apply the shifts). `[cluster.timeshift] shifts_s` gives the shifts by hand.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
from pydantic import Field

from dlcp.experiment.job_policy import JOB_POLICIES, SHIFT, JobPolicyEntry
from dlcp.settings import BadValue, Settings

HORIZON_PERIODS = 16  # the longest the unified circle gets, in longest iterations
TIMELINE_ITERATIONS = 3  # the timeline's steady state is its second iteration


class TimeshiftOptions(Settings):
    shifts_s: list[float] = Field(
        [], description="timeshift: each job's shift by hand, in the order of [[jobs]] (empty = computed)"
    )
    resolution: int = Field(256, ge=8, le=4096, description="timeshift: steps per longest iteration in the search")


@dataclass(frozen=True)
class CommPattern:
    """One job's iteration as the timeline predicts it alone: `period_s`, and the intervals
    [start, end) within it (seconds after the iteration's start, wrapped into the period) in
    which it communicates."""

    period_s: float
    busy: tuple[tuple[float, float], ...]

    @property
    def comm_share(self) -> float:
        return sum(e - s for s, e in self.busy) / self.period_s if self.period_s else 0.0


def comm_pattern(view: dict) -> CommPattern:
    """The pattern of the job whose whole experiment config is `view` (an all-reduce job). Kept
    per view: a config is validated several times on its way to a run, and a timeline of a large
    model costs a fraction of a second."""
    key = json.dumps(view, sort_keys=True)
    if key not in _PATTERNS:
        _PATTERNS[key] = _predicted_pattern(view)
    return _PATTERNS[key]


_PATTERNS: dict[str, CommPattern] = {}


def _predicted_pattern(view: dict) -> CommPattern:
    from dlcp.comm.assemble import build_scheduler, cost_model, planning_profile, step_plan
    from dlcp.comm.communicator import forward_order
    from dlcp.comm.timeline import simulate
    from dlcp.experiment.config import Experiment
    from dlcp.network.topology import from_config
    from dlcp.workloads.contract import message_layouts
    from dlcp.workloads.profiled import layer_sizes, workload_profile

    exp = Experiment.parse(view)
    w = exp.workload
    if w.mode != "allreduce":
        raise BadValue(
            "workload.mode", "cluster.job_policy = 'timeshift' plans all-reduce jobs (a PS job has no pattern here)"
        )
    profile = workload_profile(w)
    if profile is None and w.model != "synthetic":
        raise BadValue(
            "workload.compute", "cluster.job_policy = 'timeshift' needs compute = 'profile' (or the synthetic model)"
        )
    layouts = forward_order([lay for lay, _ in message_layouts(layer_sizes(w), w.bucket_values)])
    if profile is not None:
        times = (profile.forward_s, profile.backward_s)
        planned = planning_profile(layouts, layer_times=times, name=profile.name)
    else:
        planned = planning_profile(layouts, backward_ms=w.compute_ms)
    spec = from_config(view)
    plan = step_plan(exp.comm, w.workers, spec)
    cost = cost_model(exp.comm, w.workers, exp.links.host_mbps, plan, spec, exp.links.fabric_mbps)
    tl = simulate(planned, build_scheduler(exp.comm, planned, w.workers, cost), cost, TIMELINE_ITERATIONS)
    start, period = tl.backward_start_s[1], tl.periods[1]
    busy = []
    for r in tl.ops_of(1):
        s, e = r.start_s - start, r.end_s - start
        busy += _wrapped(s, e, period)
    return CommPattern(period, tuple(_merged(busy)))


def _wrapped(s: float, e: float, period: float) -> list[tuple[float, float]]:
    """[s, e) folded into [0, period)."""
    if e - s >= period:
        return [(0.0, period)]
    s0 = s % period
    e0 = s0 + (e - s)
    return [(s0, e0)] if e0 <= period else [(s0, period), (0.0, e0 - period)]


def _merged(ivs: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for s, e in sorted(ivs):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _busy_steps(p: CommPattern, step: float) -> np.ndarray:
    """The pattern's period in steps, True where it communicates (a step counts when its middle does)."""
    n = max(1, round(p.period_s / step))
    mid = (np.arange(n) + 0.5) * (p.period_s / n)
    busy = np.zeros(n, bool)
    for s, e in p.busy:
        busy |= (mid >= s) & (mid < e)
    return busy


def excess(patterns: list[np.ndarray], shifts: list[int], horizon: int) -> int:
    """Steps x jobs of demand above one link over the circle, with job j shifted by shifts[j] steps."""
    t = np.arange(horizon)
    load = sum(b[(t - s) % len(b)].astype(np.int64) for b, s in zip(patterns, shifts))
    return int(np.maximum(load - 1, 0).sum())


def best_shifts(patterns: list[CommPattern], resolution: int = 256) -> list[float]:
    """The shifts (seconds; the first job's 0) that minimise the excess demand (module docstring)."""
    step = max(p.period_s for p in patterns) / resolution
    steps = [_busy_steps(p, step) for p in patterns]
    longest = max(len(b) for b in steps)
    horizon = min(math.lcm(*(len(b) for b in steps)), HORIZON_PERIODS * longest)
    shifts = [0] * len(steps)
    if len(steps) == 2:
        scores = [excess(steps, [0, s], horizon) for s in range(len(steps[1]))]
        shifts[1] = int(np.argmin(scores))  # the first of the best: the smallest shift
    else:
        best = excess(steps, shifts, horizon)
        improved = True
        while improved:
            improved = False
            for j in range(1, len(steps)):
                for s in range(len(steps[j])):
                    trial = shifts[:j] + [s] + shifts[j + 1 :]
                    score = excess(steps, trial, horizon)
                    if score < best:
                        best, shifts, improved = score, trial, True
    return [s * step for s in shifts]


def decide(jobs, exp, options: TimeshiftOptions) -> list[dict]:
    if options.shifts_s:
        if len(options.shifts_s) != len(jobs):
            raise BadValue(
                "cluster.timeshift.shifts_s", f"{len(options.shifts_s)} shifts for {len(jobs)} jobs (one per job)"
            )
        if any(s < 0 for s in options.shifts_s):
            raise BadValue("cluster.timeshift.shifts_s", "a shift is a delay: >= 0")
        return [{SHIFT: float(s)} for s in options.shifts_s]
    patterns = []
    for i in range(len(jobs)):
        try:
            patterns.append(comm_pattern(exp.job_view(i)))
        except BadValue as e:
            raise BadValue(f"jobs[{i}].{e.key}", e.what or "") from None
        except ValueError as e:  # a profile that cannot be had, a scheduler that cannot plan
            raise BadValue(f"jobs[{i}]", f"cluster.job_policy = 'timeshift' cannot predict its pattern: {e}") from None
    return [{SHIFT: s} for s in best_shifts(patterns, options.resolution)]


JOB_POLICIES.register(
    JobPolicyEntry(
        "timeshift",
        "each job's start delayed so the jobs' communication phases interleave (CASSINI-style)",
        options=TimeshiftOptions,
        sets=(SHIFT,),
        decide=decide,
    )
)
