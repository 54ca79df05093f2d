"""`dlcp bench sweep`: what the local cluster gives a series of ns-3 runs on this machine.

One series of `--runs` runs (the same experiment with seeds 1..runs: `--repeat`) runs on the local
cluster with 1 worker process and with `--workers` (default: the cores), `--repeats` times each,
alternating which goes first. Per worker count it prints the series' wall time, runs per minute,
and the per-task overhead: the worker-seconds of the series (its wall time times its workers)
not spent in a run itself (each run's meta.json `wall_s`: the simulation and its records), per
run; that is what the engine costs a run (the cluster's start, ns-3 loaded in each worker, the
fork, staging and installing the run, the report unless --no-report, the scheduling, a worker
idle at the end), spread over the runs.
Then the speed-up of N workers over 1 (per repeat, the ratio of the two wall times). Each figure
is the median with the range over the repeats. With --json the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import dlcp.backends as backends
from dlcp.bench_output import emit
from dlcp.runs import naming
from dlcp.runs.cluster import ClusterOptions
from dlcp.runs.resume import read_meta
from dlcp.runs.series import execute
from dlcp.runs.series_runner import SeriesRequest, plan


def small_ps_experiment(name: str, iterations: int, timeout_s: int) -> str:
    """The TOML of a small ns-3 experiment: a PS of 2 workers on a star of 4 hosts at 50 Mbit/s,
    the synthetic model with 5 ms of compute (the bench's series; the tests' smallest run)."""
    return f"""
name = "{name}"
backend = "ns3"
timeout_s = {timeout_s}
[topology]
hosts = 4
[links]
host_mbps = 50
[workload]
mode = "ps"
workers = 2
model = "synthetic"
iterations = {iterations}
compute_ms = 5
"""


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dlcp bench sweep", description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=8, help="runs in the series (default: 8)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="N (default: the cores)")
    ap.add_argument("--repeats", type=int, default=3, help="series per worker count (default: 3)")
    ap.add_argument("--iterations", type=int, default=4, help="iterations of each run (default: 4)")
    ap.add_argument("--experiment", help="an ns-3 experiment file instead of the built-in PS of 2 workers")
    ap.add_argument("--no-report", action="store_true", help="runs without their reports")
    ap.add_argument("--out", default="results/bench-sweep", help="where the series go")
    ap.add_argument("--json", action="store_true", help="one JSON object as the last line")
    return ap


def spread(values: list[float], digits: int = 2) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def run_once(config: str, args: argparse.Namespace, workers: int, into: Path) -> dict:
    """One series on a local cluster of `workers`; its wall time and its runs' own time."""
    request = SeriesRequest(
        config,
        [f"workload.iterations={args.iterations}"],
        repeat=args.runs,
        with_report=not args.no_report,
        cluster=ClusterOptions(jobs=workers),
    )
    series = plan(request)
    if not series.backend.capabilities.parallel_runs:
        raise SystemExit(
            f"dlcp bench sweep: {config}: backend {series.backend.name} holds one run per machine at a time "
            f"(bench a backend whose runs share nothing: {backends.offering(lambda c: c.parallel_runs)})"
        )
    series.results = into
    runner = backends.implementation(series.backend.name)
    t0 = time.monotonic()
    statuses = execute(series, runner, series.runs)
    wall = time.monotonic() - t0
    if any(s != "ok" for s in statuses):
        raise SystemExit(f"dlcp bench sweep: a run failed in {into}: {statuses}")
    run_s = sum((read_meta(series.run_dir_of(r)) or {}).get("wall_s") or 0.0 for r in series.runs)
    return {"workers": workers, "wall_s": round(wall, 3), "run_s": round(run_s, 3)}


def bench_sweep(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    for opt in ("runs", "workers", "repeats", "iterations"):
        if getattr(args, opt) < 1:
            raise SystemExit(f"dlcp bench sweep: --{opt} {getattr(args, opt)}: must be >= 1")
    root = Path(args.out) / naming.utc_stamp()
    root.mkdir(parents=True, exist_ok=True)
    config = args.experiment
    if config is None:
        config = str(root / "bench-sweep.toml")
        Path(config).write_text(small_ps_experiment("bench-sweep", args.iterations, timeout_s=600))
    counts = [1, args.workers] if args.workers > 1 else [1]
    samples: dict[int, list[dict]] = {k: [] for k in counts}
    for r in range(args.repeats):
        for k in counts if r % 2 == 0 else counts[::-1]:
            samples[k].append(run_once(config, args, k, root / f"{k}-workers-{r + 1}"))
    rows, result = [], {"runs": args.runs, "repeats": args.repeats, "iterations": args.iterations, "counts": {}}
    for k, got in samples.items():
        walls = [s["wall_s"] for s in got]
        per_min = [args.runs / w * 60 for w in walls]
        overhead = [(s["wall_s"] * k - s["run_s"]) / args.runs for s in got]
        rows.append(
            {
                "workers": k,
                "series wall s": spread(walls, 1),
                "runs per minute": spread(per_min),
                "overhead s per run": spread(overhead),
            }
        )
        result["counts"][str(k)] = {"samples": got, "runs_per_minute": per_min, "overhead_s_per_run": overhead}
    if len(counts) == 2:
        ratios = [a["wall_s"] / b["wall_s"] for a, b in zip(samples[1], samples[args.workers])]
        result["speedup"] = ratios
        rows.append({"workers": f"{args.workers} vs 1", "series wall s": f"speed-up {spread(ratios)}"})
    title = (
        f"dlcp bench sweep: {args.runs} ns-3 runs ({Path(config).name}, {args.iterations} iterations) on a local "
        f"cluster; median (range) over {args.repeats} repeats; results in {root}"
    )
    emit(title, rows, result, args.json)
    return 0
