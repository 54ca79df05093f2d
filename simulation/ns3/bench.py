"""`dlcp bench sim`: what a simulated iteration costs, from 16 to 128 workers.

Each worker count is one `dlcp run` on ns-3 (its own process: one simulation per process) of a
ring all-reduce on a leaf-spine with 16 hosts per leaf (leaves = workers / 16, 2 spines; 50 Mbit/s
hosts, 100 Mbit/s fabric by default), the synthetic workload with LeNet-5's 44,426 values in one
message (one DDP bucket; `--layers` sets other layer sizes, one message per layer), `--iterations`
iterations. One message, because a ring step is one transport message (DESCRIBE, data, PROBE,
STOP) whose per-message Python work dominates at 128 workers: 2 x 127 steps x 128 workers per
message per iteration.

`--experiment FILE` benches that experiment instead (e.g. experiments/allreduce-128-resnet50-ns3.toml:
ResNet-50's profile, sizes only, 9000-byte MTU): each worker count runs it with `workload.workers`
set and, on a leaf-spine, as many leaves of up to its `hosts_per_leaf` as the workers need (at
least 2, so the ring crosses the fabric); `--iterations` overrides its iterations when given.

Per worker count it prints: simulated seconds per iteration (median over the workers' iterations
after the first; of the only one in a one-iteration run), the simulation's wall and CPU seconds
(and CPU seconds per iteration), simulator events per CPU second, packets the
switches forwarded, and peak memory (RSS of the simulation process). With --json the last line is
one JSON object.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from dlcp.bench_output import emit

HOSTS_PER_LEAF = 16
LENET5_VALUES = 44426  # the synthetic workload's default layers, summed


def config_text(
    workers: int, iterations: int, layers: list[int] | None, host_mbps: float, fabric_mbps: float, policy: str
) -> str:
    leaves = max(2, -(-workers // HOSTS_PER_LEAF))
    per_leaf = -(-workers // leaves)
    lines = [
        f'name = "bench-sim-{workers}"',
        'backend = "ns3"',
        "timeout_s = 3600",
        "[topology]",
        'kind = "leaf_spine"',
        "spines = 2",
        f"leaves = {leaves}",
        f"hosts_per_leaf = {per_leaf}",
        "[links]",
        f"host_mbps = {host_mbps}",
        f"fabric_mbps = {fabric_mbps}",
        "[workload]",
        'mode = "allreduce"',
        f"workers = {workers}",
        'model = "synthetic"',
        f"iterations = {iterations}",
        "eval_every = 0",
    ]
    if layers:
        lines.append(f"layers = {layers}")
    lines += ["[dlcp]", f'policy = "{policy}"']
    return "\n".join(lines) + "\n"


def experiment_overrides(raw: dict, workers: int, iterations: int | None) -> list[str]:
    """`--set` values that run experiment `raw` with `workers` workers."""
    sets = [f"workload.workers={workers}"]
    topo = raw.get("topology", {})
    if topo.get("kind") == "leaf_spine":
        per_leaf = int(topo.get("hosts_per_leaf", HOSTS_PER_LEAF))
        leaves = max(2, -(-workers // per_leaf))
        sets += [f"topology.leaves={leaves}", f"topology.hosts_per_leaf={-(-workers // leaves)}"]
    if iterations is not None:
        sets.append(f"workload.iterations={iterations}")
    return sets


def measure(workers: int, args, workdir: Path) -> dict:
    run = workdir / f"w{workers}"
    if args.experiment:
        from dlcp.experiment import config as configmod

        cfg, sets = (
            Path(args.experiment),
            experiment_overrides(configmod.load_raw(args.experiment, []), workers, args.iterations),
        )
    else:
        cfg, sets = workdir / f"w{workers}.toml", []
        cfg.write_text(
            config_text(workers, args.iterations or 2, args.layers, args.host_mbps, args.fabric_mbps, args.policy)
        )
    cmd = [
        sys.executable,
        "-m",
        "dlcp_cli",
        "run",
        str(cfg),
        *[a for s in sets for a in ("--set", s)],
        "--run-dir",
        str(run),
        "--no-report",
    ]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        tail = [ln for ln in p.stderr.splitlines() if ln.strip()][-1:] or ["(no output)"]
        raise SystemExit(f"dlcp bench sim: {workers} workers: {tail[0]}")
    sim = json.loads((run / "meta.json").read_text())["simulation"]
    rows = []
    for f in sorted((run / "records").glob("*-iterations.csv")):
        with open(f) as fh:
            rows += [(int(r["iter"]), int(r["iteration_us"])) for r in csv.DictReader(fh)]
    later = [us for it, us in rows if it > 0]
    its = later or [us for _, us in rows]  # a one-iteration run: its only iteration
    forwarded = 0
    for f in sorted((run / "counters").glob("*.json")):
        forwarded += sum(q["admitted_pkts"] for q in json.loads(f.read_text())["queues"])
    return {
        "workers": workers,
        "sim_s_per_iteration": statistics.median(its) / 1e6 if its else None,
        "iterations": sim["iterations_done"],
        "wall_s": sim["wall_s"],
        "cpu_s": sim["cpu_s"],
        "cpu_s_per_iteration": round(sim["cpu_s"] / max(1, sim["iterations_done"]), 1),
        "events": sim["events"],
        "events_per_cpu_s": sim["events_per_cpu_s"],
        "switch_pkts": forwarded,
        "payload": json.loads((run / "meta.json").read_text()).get("payload", "values"),
        "peak_rss_mb": sim["peak_rss_mb"],
    }


def bench_sim(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="dlcp bench sim", description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="16,32,64,128", help="worker counts (comma-separated)")
    ap.add_argument(
        "--experiment",
        help="bench this experiment file (leaf-spine: leaves follow the workers) instead of the synthetic LeNet-5 ring",
    )
    ap.add_argument(
        "--iterations", type=int, help="iterations per run (the first is not timed; default 2, or the experiment's)"
    )
    ap.add_argument(
        "--layers",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[LENET5_VALUES],
        help=f"layer sizes in values, one message each (default: {LENET5_VALUES}, LeNet-5's values in one)",
    )
    ap.add_argument("--host-mbps", type=float, default=50.0)
    ap.add_argument("--fabric-mbps", type=float, default=100.0)
    ap.add_argument("--policy", default="dlcp")
    ap.add_argument("--keep", metavar="DIR", help="keep each run's directory under DIR (default: a temporary one)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON on the last line")
    args = ap.parse_args(argv)
    try:
        counts = [int(x) for x in args.workers.split(",")]
    except ValueError:
        raise SystemExit(f"dlcp bench sim: --workers {args.workers}: expected integers like 16,32") from None
    if args.iterations is not None and args.iterations < 2:
        raise SystemExit("dlcp bench sim: --iterations must be >= 2 (the first iteration is not timed)")
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
        rows = [measure(w, args, Path(args.keep)) for w in counts]
    else:
        with tempfile.TemporaryDirectory(prefix="dlcp-bench-sim-") as tmp:
            rows = [measure(w, args, Path(tmp)) for w in counts]
    what = (
        f"ns-3, experiment {args.experiment}"
        if args.experiment
        else f"ns-3 ring all-reduce on a leaf-spine, synthetic workload, {args.iterations or 2} iterations, "
        f"policy {args.policy}"
    )
    emit(what, rows, {"bench": "sim", "experiment": args.experiment, "runs": rows}, args.json)
    return 0


# --- dlcp bench datapath, the ns-3 half -------------------------------------------------------------

# DLCP_SIM_RX values (hosts.SIM_RX_MODES), the baseline first
SIM_RX_PATHS = ("python", "cpp", "c")


DATAPATH_VALUES = 1 << 18  # one 1 MB message per iteration: ring steps of many datagrams each


def bench_rx_paths(workers: int, iterations: int, rounds: int) -> tuple[list[dict], dict]:
    """The synthetic ring (one layer of DATAPATH_VALUES values) at `workers` workers once per
    receive path of the simulated hosts, `rounds` times interleaved: the simulation's CPU
    microseconds per datagram the hosts received (all of its work, sending and ns-3's events
    included: what a run costs), median and range over rounds, and how much less than the Python
    path."""
    import os

    args = argparse.Namespace(
        experiment=None,
        iterations=iterations,
        layers=[DATAPATH_VALUES],
        host_mbps=50.0,
        fabric_mbps=100.0,
        policy="dlcp",
    )
    runs: dict[str, list[dict]] = {m: [] for m in SIM_RX_PATHS}
    before = os.environ.get("DLCP_SIM_RX")
    try:
        with tempfile.TemporaryDirectory(prefix="dlcp-bench-datapath-") as tmp:
            for i in range(rounds):
                for mode in SIM_RX_PATHS:
                    os.environ["DLCP_SIM_RX"] = mode
                    work = Path(tmp) / f"{mode}-{i}"
                    work.mkdir()
                    r = measure(workers, args, work)
                    meta = json.loads((work / f"w{workers}" / "meta.json").read_text())
                    sim = meta["simulation"]
                    r["us_per_datagram"] = sim["cpu_s"] * 1e6 / sim["datagrams_received"]
                    r["taken_in_c"] = sim["datagrams_taken_in_c"] / sim["datagrams_received"]
                    r["datagrams"] = sim["datagrams_received"]
                    runs[mode].append(r)
    finally:
        if before is None:
            os.environ.pop("DLCP_SIM_RX", None)
        else:
            os.environ["DLCP_SIM_RX"] = before
    base = statistics.median(r["us_per_datagram"] for r in runs[SIM_RX_PATHS[0]])

    def spread(xs):
        return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"

    rows = [
        {
            "driver": f"ns-3, {workers} workers",
            "receive path": mode,
            "rounds": len(rs),
            "us/datagram": spread([r["us_per_datagram"] for r in rs]),
            f"x less than {SIM_RX_PATHS[0]}": spread([base / r["us_per_datagram"] for r in rs]),
            "cpu s": spread([r["cpu_s"] for r in rs]),
            "taken in C": f"{statistics.median(r['taken_in_c'] for r in rs):.1%}",
        }
        for mode, rs in runs.items()
    ]
    result = {
        mode: {k: [r[k] for r in rs] for k in ("us_per_datagram", "cpu_s", "taken_in_c", "datagrams", "events")}
        for mode, rs in runs.items()
    }
    return rows, result
