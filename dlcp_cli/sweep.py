"""`dlcp sweep`: one experiment over a grid of config values, each point an independent `dlcp run`.

    dlcp sweep experiments/ps-incast.toml --grid dlcp.policy=fifo,dlcp --grid seed=1,2,3 \
        [--set KEY=VALUE ...] [--jobs N] [--shard I/N] [--out DIR] [--dry-run]

Points are the Cartesian product of the `--grid` keys, in the order given (the last key varies
fastest). Any dotted config key works, as with `--set`; so does a short key, the last part of a key
that no other key ends with (workers = workload.workers, policy = dlcp.policy, scheduler =
comm.scheduler, mode = workload.mode, kary = comm.multitree.kary...: `short_keys`, derived from
the config model and its registered sections). Every point is checked before anything starts and runs as its own process (`dlcp run CONFIG --set ...
--run-dir OUT/POINT`), so one failing point costs only itself.

Results merge by directory: point P always lands in `OUT/P` (P spells its values, e.g.
`policy=fifo,seed=2`), and each shard writes its own index `OUT/shard-I-of-N.json`, so the
outputs of shards run on different machines are merged by copying them into one directory;
`dlcp sweep --summary OUT` tabulates whatever points are there.

Parallelism: points run concurrently up to `--jobs` (default: the number of cores) on a backend
whose runs share nothing on one machine (dlcp/backends.py, `parallel_runs`: the simulator, one
process each). The emulated backends run their points one at a time whatever `--jobs` says: two
Mininet runs on one machine collide (interface names, and the clean-up of one removes the other's
leftovers).
`--shard I/N` takes points I, I+N, I+2N, ... (1-based) for a batch system that spreads a sweep.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from dlcp import backends
from dlcp.experiment import config as configmod
from dlcp.settings import reference_rows

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


def run_command(config: str, overrides: list[str], point: Point, run_dir: Path) -> list[str]:
    """The point as one `dlcp run --run-dir`: the series runner's per-run entry point, in a process
    of its own."""
    cmd = [sys.executable, "-m", "dlcp_cli", "run", config]
    for o in overrides + point.overrides():
        cmd += ["--set", o]
    return cmd + ["--run-dir", str(run_dir)]


def run_points(cmds: list[tuple[Point, list[str], Path]], jobs: int, log_dir: Path) -> dict[str, dict]:
    """Run `(point, command, run dir)` as processes, at most `jobs` at a time; status per point."""
    log_dir.mkdir(parents=True, exist_ok=True)
    todo = list(cmds)
    running: list[tuple[Point, subprocess.Popen, float, object]] = []
    status: dict[str, dict] = {}
    while todo or running:
        while todo and len(running) < jobs:
            point, cmd, _run_dir = todo.pop(0)
            log = open(log_dir / f"{point.name}.log", "wb")  # noqa: SIM115 (closed when the process ends)
            print(f"dlcp sweep: start {point.name}", file=sys.stderr, flush=True)
            running.append(
                (
                    point,
                    subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL),
                    time.monotonic(),
                    log,
                )
            )
        time.sleep(0.2)
        for item in list(running):
            point, proc, t0, log = item
            rc = proc.poll()
            if rc is None:
                continue
            log.close()
            running.remove(item)
            status[point.name] = {
                "index": point.index,
                "values": dict(point.values),
                "returncode": rc,
                "wall_s": round(time.monotonic() - t0, 3),
                "log": str(Path(log.name)),
            }
            print(
                f"dlcp sweep: {'done' if rc == 0 else f'FAILED ({rc})'} {point.name} "
                f"({status[point.name]['wall_s']:.1f} s)",
                file=sys.stderr,
                flush=True,
            )
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
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="points at once (simulator only)")
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
        if args.jobs < 1:
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
    used = [p.name for p in pts if (out / p.name).is_dir() and any((out / p.name).iterdir())]
    if used:  # each point would be refused (run directories are never reused): say so once, first
        print(
            f"dlcp sweep: {out} holds {len(used)} of these points already ({', '.join(used[:3])}"
            f"{', ...' if len(used) > 3 else ''}); run directories are never reused (give a new --out)",
            file=sys.stderr,
        )
        return 2
    jobs, note = effective_jobs({c["backend"] for c in cfgs.values()}, args.jobs)
    if note:
        print(note, file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)
    cmds = [(p, run_command(args.config, args.set, p, out / p.name), out / p.name) for p in pts]
    status = run_points(cmds, jobs, out / "logs")
    index = {
        "config": args.config,
        "set": args.set,
        "grid": args.grid,
        "shard": list(shard),
        "jobs": jobs,
        "points": status,
    }
    (out / f"shard-{shard[0]}-of-{shard[1]}.json").write_text(json.dumps(index, indent=1) + "\n")
    print_summary([r for r in summary_rows(out) if r["point"] in status])
    failed = [n for n, s in status.items() if s["returncode"]]
    if failed:
        print(
            f"dlcp sweep: {len(failed)} of {len(status)} points failed: {', '.join(failed)} (logs in {out / 'logs'})",
            file=sys.stderr,
        )
        return 1
    return 0
