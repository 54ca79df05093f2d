"""The emulated part of `dlcp bench schedulers`: the schedulers through Mininet, with repeats.

Runs an experiment (default experiments/schedulers-allreduce.toml: 4 workers, ring all-reduce
where communication dominates) once per value of one key (default `comm.scheduler`; e.g.
`comm.collective` for experiments/collectives-torus.toml) and repeat, the values of one repeat back
to back with the same seed (a pair, in the terms of paired comparisons), repeat r with seed
`seed + r`. Per run: the median of the slowest worker's iteration time from iteration 2 on (the
first two carry connection set-up and the first plans). Per value: the median over repeats,
and the ratio to the first value (the baseline) per repeat; the mean ratio with a 95 %
interval: bootstrap standard error over repeats (10,000 resamples of the repeats, with
replacement) times Student's t with repeats - 1 degrees of freedom. Needs root (Mininet); run it
under the netns lock. The runs' directories stay in `out` for their reports.
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

import numpy as np

RESAMPLES = 10_000
WARMUP = 2


def slowest_iterations_ms(run_dir: Path) -> list[float]:
    """Per iteration (from WARMUP on), the slowest worker's iteration time in ms."""
    per_it: dict[int, float] = {}
    for f in sorted((run_dir / "records").glob("h*-iterations.csv")):
        with open(f, newline="") as fh:
            for r in csv.DictReader(fh):
                it = int(r["iter"])
                per_it[it] = max(per_it.get(it, 0.0), int(r["iteration_us"]) / 1e3)
    out = [per_it[k] for k in sorted(per_it) if k >= WARMUP]
    if not out:
        raise ValueError(f"{run_dir}: no iterations after the first {WARMUP}")
    return out


def paired_ratio(values: list[float], baseline: list[float], seed: int = 0) -> tuple[float, float, float]:
    """(mean ratio, 95 % low, high) of values[i] / baseline[i] over pairs i (see the module docstring)."""
    from scipy import stats

    r = np.asarray(values, float) / np.asarray(baseline, float)
    n = len(r)
    if n < 2:
        return float(r.mean()), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = r[rng.integers(0, n, size=(RESAMPLES, n))].mean(axis=1)
    half = float(stats.t.ppf(0.975, n - 1)) * float(np.std(means, ddof=1))
    return float(r.mean()), float(r.mean()) - half, float(r.mean()) + half


def emulated(
    config: str,
    key: str,
    values: list[str],
    repeats: int,
    iterations: int,
    out: Path,
    seed: int = 1,
    overrides: list[str] = (),
) -> dict:
    """Run `config` with `key` set to each of `values` (the first is the baseline), `repeats` times."""
    from dlcp.runs.series import run_series
    from dlcp.runs.series_runner import SeriesRequest

    medians: dict[str, list[float]] = {v: [] for v in values}
    dirs = []
    for rep in range(1, repeats + 1):
        results = run_series(
            SeriesRequest(
                config,
                [*overrides, f"seed={seed + rep - 1}", f"workload.iterations={iterations}"],
                out_root=str(out / f"rep{rep}"),
                with_report=False,
                vary=[f"{key}={','.join(values)}"],
            )
        )
        dirs.append(str(results))
        for v in values:
            medians[v].append(statistics.median(slowest_iterations_ms(results / v)))
    rows = []
    for v in values:
        point, lo, hi = paired_ratio(medians[v], medians[values[0]])
        rows.append(
            {
                key: v,
                "iteration_ms": round(statistics.median(medians[v]), 1),
                "per_repeat_ms": [round(m, 1) for m in medians[v]],
                "ratio": round(point, 3),
                "ci95_low": round(lo, 3),
                "ci95_high": round(hi, 3),
            }
        )
    return {
        "config": config,
        "key": key,
        "repeats": repeats,
        "iterations": iterations,
        "baseline": values[0],
        "runs": dirs,
        "rows": rows,
    }
