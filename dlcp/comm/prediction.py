"""What a scheduler decides and how long its iterations take, predicted on the virtual-time timeline.

`prediction_json` is what `dlcp schedule --profile P --workers N --alpha A --beta B --scheduler S --json`
prints: the scheduler's decisions (groups of tensor indices in the profile's forward order; partitions
where the scheduler has them), the operations of one steady-state iteration in send order with
their predicted times, and the predicted iteration time. `sweep` tabulates predicted iteration
times over schedulers x profiles x worker counts; `tune` grid-searches a scheduler's knobs under the
model (ByteScheduler and DeAR tune theirs at run time by Bayesian optimisation).
"""

from __future__ import annotations

import itertools
import math

from dlcp.comm.costmodel import CostModel
from dlcp.comm.schedulers import SCHEDULERS, make_scheduler
from dlcp.comm.timeline import Timeline, simulate
from dlcp.workloads.profile import Profile

ITERATIONS = 2  # every period is the steady state (timeline.py); 2 shows it is


def predict(scheduler: str, profile: Profile, workers: int, cost: CostModel, iterations: int = ITERATIONS, **options):
    """(scheduler object, Timeline) of `scheduler` on `profile` with `workers` ranks."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers: must be an integer >= 1, got {workers!r}")
    if cost.workers is not None and cost.workers != workers:
        raise ValueError(f"workers: the cost model holds for {cost.workers} workers, not {workers}")
    sched = make_scheduler(scheduler, profile, cost, workers, **options)
    return sched, simulate(profile, sched, cost, iterations)


def _ops_json(tl: Timeline) -> list[dict]:
    """The last iteration's operations in send order, times from that iteration's backward start."""
    last = tl.iterations - 1
    t0 = tl.backward_start_s[last]
    return [
        {
            "primitive": r.op.primitive,
            "priority": r.op.priority,
            "bytes": r.op.nbytes,
            "segments": [[s.tensor, s.start, s.stop] for s in r.op.segments],
            "start_s": r.start_s - t0,
            "end_s": r.end_s - t0,
        }
        for r in tl.ops_of(last)
    ]


def prediction_json(scheduler: str, profile: Profile, workers: int, cost: CostModel, **options) -> dict:
    """What `scheduler` decides and the timeline predicts, as plain JSON-ready data (see the module
    docstring)."""
    sched, tl = predict(scheduler, profile, workers, cost, **options)
    return {
        "scheduler": scheduler,
        "profile": profile.name,
        "workers": workers,
        "alpha_s": cost.alpha,
        "beta_s_per_byte": cost.beta,
        "options": options,
        **sched.describe(),
        "send_order": _ops_json(tl),
        "compute_s": profile.compute_s,
        "predicted_iteration_s": tl.iteration_s,
    }


def sweep(profiles, workers_list, cost_for, schedulers=None, options=None) -> list[dict]:
    """Predicted iteration time of every scheduler (default: every registered one) x profile x
    worker count. cost_for(workers) -> CostModel; options: {scheduler name: {option: value}}."""
    schedulers = SCHEDULERS.names() if schedulers is None else schedulers
    options = options or {}
    rows = []
    for profile, workers, name in itertools.product(profiles, workers_list, schedulers):
        _, tl = predict(name, profile, workers, cost_for(workers), **options.get(name, {}))
        rows.append(
            {
                "profile": profile.name,
                "workers": workers,
                "scheduler": name,
                "iteration_s": tl.iteration_s,
                "compute_s": tl.compute_s,
                "periods_s": tl.periods,
            }
        )
    return rows


def tune(scheduler: str, profile: Profile, workers: int, cost: CostModel, grid: dict) -> tuple[dict, float]:
    """The option values from `grid` ({option: [values]}) with the smallest predicted iteration
    time, and that time. Ties keep the first in grid order."""
    if not grid:
        raise ValueError("tune: grid is empty")
    keys = list(grid)
    best, best_s = None, math.inf
    for values in itertools.product(*(grid[k] for k in keys)):
        opts = dict(zip(keys, values))
        try:
            sched = make_scheduler(scheduler, profile, cost, workers, **opts)
        except ValueError:
            continue  # an invalid combination (e.g. credit below the partition size)
        tl = simulate(profile, sched, cost, ITERATIONS)
        if tl.iteration_s < best_s:
            best, best_s = opts, tl.iteration_s
    if best is None:
        raise ValueError(f"tune: no valid combination in grid {grid!r}")
    return best, best_s


def format_table(rows: list[dict]) -> str:
    """rows of `sweep` as a text table: one line per profile x workers, ms per scheduler."""
    names = list(dict.fromkeys(r["scheduler"] for r in rows))
    lines = ["profile   workers  compute_ms  " + "  ".join(f"{n:>13s}" for n in names)]
    by_key: dict = {}
    for r in rows:
        by_key.setdefault((r["profile"], r["workers"]), {})[r["scheduler"]] = r
    for (prof, w), cells in by_key.items():
        compute = next(iter(cells.values()))["compute_s"]
        lines.append(
            f"{prof:9s} {w:7d}  {compute * 1e3:10.2f}  "
            + "  ".join(f"{cells[n]['iteration_s'] * 1e3:13.2f}" if n in cells else f"{'':13s}" for n in names)
        )
    return "\n".join(lines)
