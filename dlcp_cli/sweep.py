"""`dlcp sweep`: one experiment over a grid of config values, each point one run.

    dlcp sweep experiments/ps-incast.toml --grid dlcp.policy=fifo,dlcp --grid seed=1,2,3 \
        [--set KEY=VALUE ...] [--jobs N] [--cluster tcp://HOST:PORT|slurm] [--shard I/N]
        [--out DIR] [--dry-run]

Points are the Cartesian product of the `--grid` keys, in the order given (the last key varies
fastest). Any dotted config key works, as with `--set`; so does a short key, the last part of a key
that no other key ends with (workers = workload.workers, policy = dlcp.policy, scheduler =
comm.scheduler, mode = workload.mode, kary = comm.multitree.kary...: `short_keys`, derived from
the config model and its registered sections). Every point is planned as `dlcp run CONFIG --set
... --run-dir OUT/POINT` plans its run, and checked, before anything starts.

The points are the runs of one series per backend (dlcp/runs/series.py): tasks on the local Dask
cluster (`--jobs` worker processes, default the cores) or the one `--cluster` names, on a backend
whose runs share nothing on one machine (dlcp/backends.py, `parallel_runs`: the simulator); one
at a time in this process on the emulated backends without `--cluster` (two Mininet runs on one
machine collide: interface names, and the clean-up of one removes the other's leftovers). One
failing point costs only itself.

Results merge by directory: point P always lands in `OUT/P` (P spells its values, e.g.
`policy=fifo,seed=2`), and each shard writes its own index `OUT/shard-I-of-N.json`, so the
outputs of shards run on different machines are merged by copying them into one directory;
`dlcp sweep --summary OUT` tabulates whatever points are there. The same sweep into the same OUT
runs only the points not found finished there (a run is its resolved config and seed:
dlcp/runs/resume.py). `--shard I/N` takes points I, I+N, I+2N, ... (1-based).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from dlcp import backends
from dlcp.experiment import config as configmod
from dlcp.runs import privilege, resume, series_runner, signals
from dlcp.runs import series as series_mod
from dlcp.runs.cluster import ClusterError, ClusterOptions
from dlcp.runs.contract import RunFailed
from dlcp.runs.machine_lock import MachineBusy
from dlcp.runs.series_runner import Series, SeriesRequest
from dlcp.settings import reference_rows
from dlcp_cli import cluster_options

SERIAL_NOTE = (
    "dlcp sweep: backend {backend} runs points one at a time (two of its runs on one machine collide "
    "on interface names and clean-up); use backend {parallel} for parallel points"
)


class SweepError(ValueError):
    """A sweep that cannot start; one line naming the option or point."""


def config_keys() -> list[str]:
    """Every key of the experiment model (registered sections included; list entries excluded)."""
    return list(dict.fromkeys(k for k, *_ in reference_rows(configmod.Experiment, "", repr) if "[]" not in k))


def _by_last_part() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key in config_keys():
        out.setdefault(key.rsplit(".", 1)[-1], []).append(key)
    return out


def short_keys() -> dict[str, str]:
    """Short key -> key: the last part of every key inside a section that no other key ends with."""
    return {last: keys[0] for last, keys in _by_last_part().items() if len(keys) == 1 and keys[0] != last}


def full_key(key: str) -> str:
    """The config key `key` stands for: itself when dotted or top-level, else the key it is short for."""
    if "." in key:
        return key
    candidates = _by_last_part().get(key, [])
    if len(candidates) == 1:
        return candidates[0]
    if candidates:
        raise SweepError(f"--grid {key}: short for {' and '.join(candidates)}: give the whole key")
    raise SweepError(f"--grid {key}: not a config key, nor the last part of one")


@dataclass(frozen=True)
class Point:
    index: int  # position in the whole grid (0-based), the same on every shard
    values: tuple[tuple[str, str], ...]  # (key as given, value text)

    @property
    def name(self) -> str:
        return ",".join(f"{k}={_safe(v)}" for k, v in self.values) or "default"

    def overrides(self) -> list[str]:
        return [f"{full_key(k)}={v}" for k, v in self.values]


def _safe(text: str) -> str:
    """A value as it may appear in a directory name."""
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", text)


def parse_grid(items: list[str]) -> list[tuple[str, list[str]]]:
    """`KEY=V1,V2,...` options -> [(key, [values])], keys unique, values non-empty."""
    grid, seen = [], set()
    for item in items:
        if "=" not in item:
            raise SweepError(f"--grid {item}: expected KEY=V1,V2,...")
        key, text = (s.strip() for s in item.split("=", 1))
        values = [v.strip() for v in text.split(",")]
        if not key or not all(values):
            raise SweepError(f"--grid {item}: empty key or value")
        if full_key(key) in seen:
            raise SweepError(f"--grid {key}: given twice")
        seen.add(full_key(key))
        grid.append((key, values))
    return grid


def points(grid: list[tuple[str, list[str]]]) -> list[Point]:
    keys = [k for k, _ in grid]
    return [Point(i, tuple(zip(keys, combo))) for i, combo in enumerate(itertools.product(*(v for _, v in grid)))]


def parse_shard(text: str | None) -> tuple[int, int]:
    """`I/N` (1 <= I <= N) -> (I, N); None -> (1, 1)."""
    if text is None:
        return 1, 1
    m = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise SweepError(f"--shard {text}: expected I/N with 1 <= I <= N, e.g. 2/4")
    return int(m.group(1)), int(m.group(2))


def shard_of(pts: list[Point], shard: tuple[int, int]) -> list[Point]:
    i, n = shard
    return [p for p in pts if p.index % n == i - 1]


def check_points(config: str, overrides: list[str], pts: list[Point]) -> dict[str, dict]:
    """Every point's resolved config (ConfigError names the point and key); backend -> configs."""
    out = {}
    for p in pts:
        try:
            out[p.name] = configmod.load(config, overrides + p.overrides())
        except configmod.ConfigError as e:
            raise SweepError(f"point {p.name}: {e}") from None
    return out


def effective_jobs(names: set[str], jobs: int) -> tuple[int, str | None]:
    """Points at once for these backends, and the note to print when that is fewer than asked."""
    serial = sorted(b for b in names if not backends.capabilities(b).parallel_runs)
    if serial and jobs > 1:
        return 1, SERIAL_NOTE.format(backend=", ".join(serial), parallel=backends.offering(lambda c: c.parallel_runs))
    return jobs, None


def plan_sweep(config: str, overrides: list[str], pts: list[Point], out: Path, options: ClusterOptions) -> list[Series]:
    """The points as series of runs, one per backend (a series runs on one): each point's run
    planned as `dlcp run CONFIG --set ... --run-dir OUT/POINT` plans it, into OUT/POINT."""
    by_backend: dict[str, Series] = {}
    for p in pts:
        point = series_runner.plan(SeriesRequest(config, overrides + p.overrides(), run_dir=str(out / p.name)))
        (run,) = point.runs
        run = dataclasses.replace(run, dir=out / p.name)
        series = by_backend.get(point.backend.name)
        if series is None:
            request = SeriesRequest(config, overrides, out_root=str(out), cluster=options)
            series = by_backend[point.backend.name] = Series(request, point.base, point.backend, [], out)
        series.runs.append(run)
    return list(by_backend.values())


def run_points(series: Series, names: dict[str, Point]) -> dict[str, dict]:
    """Run a series of points (those not already done in OUT); status per point."""
    runner = backends.implementation(series.backend.name)
    series_runner.check(series, runner)
    todo = series_mod.runs_to_do(series)
    started = time.monotonic()
    created = [p for p in [series.results, *series.results.parents] if not p.exists()] if series.results else []
    with signals.installed():
        try:
            ran = series_mod.execute(series, runner, todo, keep_going=True)
        finally:
            with signals.deferred():
                if series.results is not None:
                    privilege.hand_over_to_sudo_user(series.results, created)
    statuses = {id(run): state for run, state in zip(todo, ran)}
    status = {}
    for run in series.runs:
        point = names[run.dir.name if run.dir else ""]
        meta = resume.read_meta(run.dir) if run.dir else None
        done_before = all(run is not t for t in todo)
        state = "ok" if done_before else statuses.get(id(run), "not started")
        status[point.name] = {
            "index": point.index,
            "values": dict(point.values),
            "status": state,
            "returncode": 0 if state == "ok" else 1,
            "done_before": done_before,
            "wall_s": (meta or {}).get("wall_s"),
        }
    print(f"dlcp sweep: {len(todo)} points ran in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return status


def summary_rows(out: Path) -> list[dict]:
    """One row per point directory under `out` (merged shards included): its status from
    meta.json and its headline from summary.json when the run wrote one."""
    rows = []
    for meta_path in sorted(out.glob("*/meta.json")):
        point = meta_path.parent
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError):
            meta = {}
        row = {
            "point": point.name,
            "status": meta.get("status", "?"),
            "backend": meta.get("backend"),
            "wall_s": meta.get("wall_s"),
        }
        try:
            head = json.loads((point / "summary.json").read_text())["headline"]
            row["mct_p99_us"] = head.get("mct_p99_us")
            row["iteration_p99_ms"] = head.get("iteration_p99_ms")
        except (OSError, ValueError, KeyError, TypeError):
            pass
        rows.append(row)
    return rows


def print_summary(rows: list[dict]) -> None:
    if not rows:
        print("dlcp sweep: no point directories yet")
        return
    keys = list(dict.fromkeys(k for r in rows for k in r))
    widths = {k: max(len(k), *(len(_cell(r.get(k))) for r in rows)) for k in keys}
    print("  ".join(k.ljust(widths[k]) for k in keys))
    for r in rows:
        print("  ".join(_cell(r.get(k)).ljust(widths[k]) for k in keys))


def _cell(v) -> str:
    if v is None:
        return "-"
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dlcp sweep", description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="?", help="experiment file")
    ap.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="a grid dimension (repeatable); a key or its last part when no other key ends with it: "
        + ", ".join(sorted(short_keys())),
    )
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="fixed override (repeatable)")
    cluster_options.add_to(
        ap,
        "points at once on this machine (simulator only; default: the cores); with --cluster slurm, at most "
        "N worker jobs",
    )
    ap.add_argument("--shard", metavar="I/N", help="run only shard I of N (points I, I+N, ...)")
    ap.add_argument("--out", help="sweep directory (default: results/sweep-NAME)")
    ap.add_argument("--dry-run", action="store_true", help="list this shard's points and exit")
    ap.add_argument("--summary", metavar="DIR", help="tabulate the points found in a (merged) sweep directory")
    return ap


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.summary:
        print_summary(summary_rows(Path(args.summary)))
        return 0
    if not args.config:
        print("dlcp sweep: give an experiment file (or --summary DIR)", file=sys.stderr)
        return 2
    try:
        if args.jobs is not None and args.jobs < 1:
            raise SweepError(f"--jobs {args.jobs}: must be >= 1")
        if not args.grid:
            raise SweepError("--grid: give at least one KEY=V1,V2,... dimension")
        shard = parse_shard(args.shard)
        pts = shard_of(points(parse_grid(args.grid)), shard)
        cfgs = check_points(args.config, args.set, pts)
    except (SweepError, configmod.ConfigError) as e:
        print(f"dlcp sweep: {e}", file=sys.stderr)
        return 2
    name = next(iter(cfgs.values()))["name"] if cfgs else "empty"
    out = Path(args.out or Path("results") / f"sweep-{name}")
    if args.dry_run:
        for p in pts:
            print(f"{p.index}\t{p.name}\t{out / p.name}")
        return 0
    options = cluster_options.options_of(args)
    jobs, note = effective_jobs({c["backend"] for c in cfgs.values()}, args.jobs or os.cpu_count() or 1)
    if note and options.local:  # a cluster's emulation workers take one run per machine anyway
        print(note, file=sys.stderr)
    status: dict[str, dict] = {}
    try:
        all_series = plan_sweep(args.config, args.set, pts, out, options)
        for series in all_series:
            status.update(run_points(series, {p.name: p for p in pts}))
    except configmod.ConfigError as e:
        print(f"dlcp sweep: {e}", file=sys.stderr)
        return 2
    except (series_runner.NeedsRoot, MachineBusy, ClusterError) as e:
        print(f"dlcp sweep: {e}", file=sys.stderr)
        return 1
    except RunFailed as e:
        print(f"dlcp sweep: failed: {e}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, signals.Terminated) as e:
        print(
            f"dlcp sweep: stopped; run the same command again to run the points still missing in {out}", file=sys.stderr
        )
        return signals.exit_code(e)
    index = {
        "config": args.config,
        "set": args.set,
        "grid": args.grid,
        "shard": list(shard),
        "jobs": jobs,
        "cluster": args.cluster,
        "points": status,
    }
    (out / f"shard-{shard[0]}-of-{shard[1]}.json").write_text(json.dumps(index, indent=1) + "\n")
    print_summary([r for r in summary_rows(out) if r["point"] in status])
    failed = [n for n, s in status.items() if s["returncode"]]
    if failed:
        print(
            f"dlcp sweep: {len(failed)} of {len(status)} points failed: {', '.join(failed)} (each point's "
            "logs/; run the same command again to rerun them)",
            file=sys.stderr,
        )
        return 1
    return 0
