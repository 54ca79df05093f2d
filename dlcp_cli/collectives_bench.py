"""`dlcp bench collectives`: time, algorithm and bus bandwidth of each collective on an idle
fabric, as nccl-tests reports them, on ns-3 (sizes only) and, at small scale, on the emulated
backend; with an alpha-beta fit of the times for the timeline and `dlcp schedule`.

**Definitions**: nccl-tests' algbw and busbw (dlcp/comm/busbw.py, with the registry of
collectives). `busbw_frac` is busbw over the host link's rate: 1.0
is the link, every header included (a 1500-byte frame carries 1400 payload bytes of 1466, 95.5 %;
9000-byte links 99.3 %).

**Time.** nccl-tests runs an operation back to back `iters` times after warm-up and divides.
Here a run's workers compute nothing (ns-3: a one-tensor profile with zero compute times; emulated:
the synthetic model, whose compute is counted and subtracted) and run `iterations` all-reduces
(or push + pull rounds) back to back; operation k's time is when the last worker finished
iteration k minus when the last finished k - 1, less that iteration's longest compute. Iteration 0
(control connections, the congestion windows' slow start) is the warm-up; with `--iterations 1`
(for the largest simulations) the one operation is timed from the start and includes them (a few
round trips). A row gives the median over operations and seeds, with the minimum and maximum.

**What runs.** One point = one collective (`collectives_to_bench()`: every collective of the
registry, `comm.collective`, and the PS), one worker count, one message size (one tensor of that size, sizes only on
ns-3: no values carried, memory flat), one variant (`VARIANTS`: `lossless` = every packet
recovered (`dlcp.reliable`) over FIFO switches (policy `fifo`); each tagging policy with its loss
budgets), one fabric (`Fabric`: by default a leaf-spine of up to 16 hosts per leaf under 2
spines, every link at the host rate, and the ring in locality order, so no link carries two of
the ring's flows; or one switch). A point is one `dlcp run` variant: the points of
one collective, worker count, seed and variant kind run as one series (`dlcp run --vary`), forked
from one process that loaded ns-3 once. Records: each run directory (kept with `--keep`).

**Fit.** Per collective, worker count and variant with two sizes or more: alpha and beta of
t = alpha + beta S by least squares over every operation's time (`fit_alpha_beta`), the form the
planners take (dlcp/comm/costmodel.py). `--fit FILE` writes them as JSON (`dlcp schedule --fit
FILE`, `costmodel.load_fit`).
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from dlcp import backends
from dlcp.comm.busbw import NCCL_TESTS, BenchCollective, collectives_to_bench, fit_alpha_beta

MB = 1_000_000
VALUE_BYTES = 4  # fp32


# --- what is measured --------------------------------------------------------------------------


# variant -> the experiment keys it sets. `lossless`: every packet recovered, FIFO switches.
VARIANTS: dict[str, dict] = {
    "lossless": {"dlcp.policy": "fifo", "dlcp.reliable": True},
    **{p: {"dlcp.policy": p, "dlcp.reliable": False} for p in ("fifo", "layer", "magnitude", "dlcp")},
}


@dataclass(frozen=True)
class Fabric:
    """The network of a point. `leaf_spine`: leaves of up to `hosts_per_leaf` hosts (as many
    leaves as the hosts need, at least 2, filled evenly) under `spines` spines, spine links at
    `fabric_mbps` (None: the host rate); `star`: one switch (up to 64 hosts). The ring runs in
    `ring_order` (`comm.ring.order`): `locality` (default) crosses from leaf to leaf once per leaf,
    as NCCL's rings do, so no link carries two of its flows; `rank` follows the interleaved
    placement, every hop across the spines (each leaf then sends as many flows up as it has
    workers: shared links unless spines x fabric_mbps >= hosts per leaf x host_mbps)."""

    kind: str = "leaf_spine"
    host_mbps: float = 10_000.0
    fabric_mbps: float | None = None
    spines: int = 2
    hosts_per_leaf: int = 16
    load_balancing: str = "spray_random"
    mtu: int = 1500
    ring_order: str = "locality"
    queue_pkts: int = 128

    def topology(self, hosts: int) -> tuple[dict, float]:
        """The `[topology]` table for `hosts` hosts and the spine links' rate."""
        if self.kind == "star":
            return {"kind": "star", "hosts": hosts}, self.host_mbps
        leaves = max(2, -(-hosts // self.hosts_per_leaf))
        topo = {"kind": "leaf_spine", "spines": self.spines, "leaves": leaves, "hosts_per_leaf": -(-hosts // leaves)}
        return topo, self.fabric_mbps or self.host_mbps

    def label(self, hosts: int) -> str:
        topo, rate = self.topology(hosts)
        links = f"{self.load_balancing}, MTU {self.mtu}, ring order {self.ring_order}"
        if topo["kind"] == "star":
            return f"star of {hosts} at {self.host_mbps / 1e3:g} Gbit/s, {links}"
        return (
            f"leaf-spine {topo['spines']}x{topo['leaves']}x{topo['hosts_per_leaf']}, hosts "
            f"{self.host_mbps / 1e3:g} Gbit/s, spines {rate / 1e3:g} Gbit/s, {links}"
        )


def message_values(size_bytes: int) -> int:
    return max(1, size_bytes // VALUE_BYTES)


def sizes_only(backend: str) -> bool:
    """Whether `backend` runs the bench's points carrying sizes only (no values: memory stays
    flat at scale), as ns-3 does; otherwise its hosts carry values."""
    return "sizes" in backends.capabilities(backend).payloads


def base_config(backend: str, coll: BenchCollective, workers: int, fabric: Fabric, iterations: int, seed: int) -> dict:
    """The experiment of a series (its size and variant keys are set per run) on `backend` (a
    registered backend, dlcp/backends.py)."""
    topo, fabric_rate = fabric.topology(workers + coll.extra_hosts)
    cfg = {
        "name": f"bench-collectives-{coll.name}-{workers}",
        "backend": backend,
        "seed": seed,
        "timeout_s": 3600.0 if backends.capabilities(backend).clock == "simulated" else 900.0,
        "topology": topo,
        "links": {
            "host_mbps": fabric.host_mbps,
            "fabric_mbps": fabric_rate,
            "mtu": fabric.mtu,
            "queue_pkts": fabric.queue_pkts,
        },
        "workload": {
            "mode": coll.mode,
            "workers": workers,
            "model": "synthetic",
            "iterations": iterations,
            "eval_every": 0,
            "warmup_iterations": 0,
        },
        "dlcp": {"load_balancing": fabric.load_balancing, "resync_every": 0},
        "comm": {"ring": {"order": fabric.ring_order}},
    }
    for key, value in coll.sets.items():
        set_key(cfg, key, value)
    return cfg


def set_key(cfg: dict, dotted: str, value) -> None:
    *path, last = dotted.split(".")
    node = cfg
    for p in path:
        node = node.setdefault(p, {})
    node[last] = value


def profile_file(directory: Path, size_bytes: int) -> Path:
    """A one-tensor profile of `size_bytes` with no compute: what a sizes-only ns-3 run sends."""
    path = directory / f"message-{size_bytes}B.json"
    if not path.exists():
        path.write_text(
            json.dumps(
                {
                    "model": f"message-{size_bytes}B",
                    "note": "dlcp bench collectives: one tensor, no compute",
                    "names": ["message"],
                    "sizes": [message_values(size_bytes)],
                    "forward_s": [0.0],
                    "backward_s": [0.0],
                }
            )
        )
    return path


# --- one run's records ---------------------------------------------------------------------------


def op_times_s(run_dir: Path) -> list[float]:
    """Each timed operation's duration (seconds; see the module docstring): iterations 1..K-1, or
    in a one-iteration run the only one, from the start of the run (0 on ns-3's clock)."""
    ends: dict[int, int] = {}
    starts: dict[int, int] = {}
    compute: dict[int, int] = {}
    for f in sorted((run_dir / "records").glob("*-iterations.csv")):
        with open(f, newline="") as fh:
            for r in csv.DictReader(fh):
                k = int(r["iter"])
                ends[k] = max(ends.get(k, 0), int(r["end_us"]))
                starts[k] = min(starts.get(k, int(r["start_us"])), int(r["start_us"]))
                compute[k] = max(compute.get(k, 0), int(r["compute_us"] or 0))
    if not ends:
        raise ValueError(f"{run_dir}: no iteration recorded")
    if len(ends) == 1:
        return [(ends[0] - starts[0] - compute[0]) / 1e6]
    return [(ends[k] - ends[k - 1] - compute[k]) / 1e6 for k in sorted(ends)[1:]]


def run_counts(run_dir: Path) -> dict:
    """Packets lost, retransmitted, messages forced (senders' records); switch drops and marks."""
    out = {"lost_pkts": 0, "retx_pkts": 0, "forced": 0, "early_drops": 0, "tail_drops": 0, "ce_marked": 0}
    for f in sorted((run_dir / "records").glob("*-messages.csv")):
        with open(f, newline="") as fh:
            for r in csv.DictReader(fh):
                if r["side"] == "sender":
                    out["lost_pkts"] += int(r["lost_pkts"])
                    out["retx_pkts"] += int(r["retx_pkts"])
                    out["forced"] += int(r["forced"] in ("1", "True", "true"))
    for f in sorted((run_dir / "counters").glob("*.json")):
        doc = json.loads(f.read_text())
        for q in doc.get("queues", []):
            out["early_drops"] += q.get("early_drop_pkts", 0)
            out["tail_drops"] += q.get("tail_drop_pkts", 0)
        for q in doc.get("ecn_marks", []) or []:
            out["ce_marked"] += q.get("ce_marked_pkts", 0)
    return out


def run_cost(run_dir: Path) -> dict:
    """What a simulated run cost (meta.json `simulation`), or {} for an emulated run."""
    sim = json.loads((run_dir / "meta.json").read_text()).get("simulation") or {}
    return {k: sim[k] for k in ("cpu_s", "events", "peak_rss_mb", "simulated_s") if k in sim}


# --- series ------------------------------------------------------------------------------------


@dataclass
class Point:
    collective: str
    workers: int
    size_bytes: int
    variant: str
    seed: int
    times_s: list[float]
    counts: dict
    cost: dict
    run_dir: str


def run_series(
    backend: str,
    coll: BenchCollective,
    workers: int,
    sizes: list[int],
    variant_names: list[str],
    fabric: Fabric,
    iterations: int,
    seed: int,
    workdir: Path,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
) -> list[Point]:
    """Every size x variant of one collective, worker count and seed: `dlcp run` series, one per
    variant kind (lossless apart, the policies as one `--vary`)."""
    from dlcp.experiment import config as configmod

    base = base_config(backend, coll, workers, fabric, iterations, seed)
    if sizes_only(backend):
        base["workload"].update(compute="profile", payload="sizes", profile=str(profile_file(workdir, sizes[0])))
        size_key, size_values = "workload.profile", [str(profile_file(workdir, s)) for s in sizes]
    else:
        base["workload"].update(compute="real", compute_ms=0.0, layers=[message_values(sizes[0])])
        size_key, size_values = "workload.layers.0", [str(message_values(s)) for s in sizes]
    size_of = dict(zip(size_values, sizes))
    policies = [v for v in variant_names if v != "lossless"]
    series = []  # (label, variant keys fixed, policy values varied)
    if "lossless" in variant_names:
        series.append(("lossless", VARIANTS["lossless"], None))
    if policies:
        series.append(("policies", {"dlcp.reliable": False}, policies))
    points = []
    for label, fixed, varied in series:
        cfg = json.loads(json.dumps(base))
        for key, value in fixed.items():
            set_key(cfg, key, value)
        set_key(cfg, "dlcp.policy", varied[0] if varied else fixed["dlcp.policy"])
        configmod.validate(cfg)  # a bad fabric or size fails here, in one line, before anything runs
        path = workdir / f"{coll.name}-{workers}-s{seed}-{label}.toml"
        path.write_text(configmod.dumps(cfg))
        out = workdir / f"{coll.name}-{workers}-s{seed}-{label}"
        # one size or one policy is set in the config above (`dlcp run` refuses a one-value --vary)
        varies = [f"{size_key}={','.join(size_values)}"] if len(size_values) > 1 else []
        if varied and len(varied) > 1:
            varies.append(f"dlcp.policy={','.join(varied)}")
        cmd = [sys.executable, "-m", "dlcp_cli", "run", str(path), "--out", str(out), "--no-report"]
        for v in varies:
            cmd += ["--vary", v]
        log(
            f"dlcp bench collectives: {coll.name}, {workers} workers, seed {seed}, {label}: {len(sizes) * len(varied or [1])} runs"
        )
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode:
            tail = [ln for ln in p.stderr.splitlines() if ln.strip()][-1:] or ["(no output)"]
            raise RuntimeError(f"{coll.name}, {workers} workers, {label}: {tail[0]}")
        for run in sorted(m.parent for m in out.rglob("meta.json")):
            doc = _read_toml(run / "config.toml")
            size_val = doc["workload"]["profile"] if sizes_only(backend) else str(doc["workload"]["layers"][0])
            variant = "lossless" if label == "lossless" else doc["dlcp"]["policy"]
            points.append(
                Point(
                    coll.name,
                    workers,
                    size_of[size_val],
                    variant,
                    seed,
                    op_times_s(run),
                    run_counts(run),
                    run_cost(run),
                    str(run),
                )
            )
    return points


def _read_toml(path: Path) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    return tomllib.loads(path.read_text())


# --- rows, fit ---------------------------------------------------------------------------------


def rows_of(points: list[Point], fabric: Fabric) -> list[dict]:
    """One row per collective x workers x size x variant: the seeds pooled (module docstring)."""
    groups: dict[tuple, list[Point]] = {}
    for p in points:
        groups.setdefault((p.collective, p.workers, p.size_bytes, p.variant), []).append(p)
    order = {name: i for i, name in enumerate(VARIANTS)}
    collectives = collectives_to_bench()
    rows = []
    for (coll, n, size, variant), ps in sorted(
        groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2], order.get(kv[0][3], 99))
    ):
        times = [t for p in ps for t in p.times_s]
        t = statistics.median(times)
        algbw = size / t * 8 / 1e9
        busbw = algbw * collectives[coll].bus_factor(n)
        worst = {key: max(p.counts[key] for p in ps) for key in ps[0].counts}
        rows.append(
            {
                "collective": coll,
                "workers": n,
                "size_mb": size / MB,
                "variant": variant,
                "time_ms": round(t * 1e3, 4),
                "time_min_ms": round(min(times) * 1e3, 4),
                "time_max_ms": round(max(times) * 1e3, 4),
                "algbw_gbps": round(algbw, 3),
                "busbw_gbps": round(busbw, 3),
                "busbw_frac": round(busbw * 1e3 / fabric.host_mbps, 4),
                "ops": len(times),
                "seeds": len(ps),
                "lost_pkts": worst["lost_pkts"],
                "retx_pkts": worst["retx_pkts"],
                "forced": worst["forced"],
                "early_drops": worst["early_drops"],
                "tail_drops": worst["tail_drops"],
                "ce_marked": worst["ce_marked"],
                "cpu_s": round(max(p.cost.get("cpu_s", 0.0) for p in ps), 1) or None,
                "peak_rss_mb": max((p.cost.get("peak_rss_mb", 0.0) for p in ps), default=None) or None,
            }
        )
    return rows


def fits_of(points: list[Point], network: str) -> list[dict]:
    """One fit per collective x workers x variant with two sizes or more."""
    groups: dict[tuple, list[tuple[int, float]]] = {}
    for p in points:
        groups.setdefault((p.collective, p.workers, p.variant), []).extend((p.size_bytes, t) for t in p.times_s)
    out = []
    for (coll, n, variant), samples in sorted(groups.items()):
        if len({s for s, _ in samples}) < 2:
            continue
        out.append(
            {
                "network": network,
                "collective": coll,
                "workers": n,
                "variant": variant,
                "sizes_bytes": sorted({s for s, _ in samples}),
                **fit_alpha_beta(samples),
            }
        )
    return out


# --- the command ---------------------------------------------------------------------------------

DEFAULTS = {  # sizes only (a simulator) or values (emulated hosts) -> (workers, sizes in MB, host Gbit/s, topology kind)
    True: ("16,64,128", "1,16,64,256", 10.0, "leaf_spine"),
    False: ("4", "0.25,1", 0.05, "star"),
}


def default_backend() -> str:
    """The first registered backend that carries sizes only (the simulator)."""
    return next(b for b in backends.names() if sizes_only(b))


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dlcp bench collectives", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--backend",
        choices=backends.names(),
        default=default_backend(),
        help=f"default {default_backend()} (sizes only); the emulated backends need root",
    )
    ap.add_argument("--collectives", default="ring,multitree,ps", help=f"of {', '.join(collectives_to_bench())}")
    ap.add_argument("--workers", help="worker counts (simulated: 16,64,128; emulated: 4)")
    ap.add_argument("--sizes-mb", help="message sizes in MB (simulated: 1,16,64,256; emulated: 0.25,1)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"of {', '.join(VARIANTS)}")
    ap.add_argument("--host-gbps", type=float, help="host links (simulated: 10; emulated: 0.05)")
    ap.add_argument("--fabric-gbps", type=float, help="spine links (default: the host rate)")
    ap.add_argument("--topology", choices=("leaf_spine", "star"), help="simulated: leaf_spine; emulated: star")
    ap.add_argument("--spines", type=int, default=2)
    ap.add_argument("--hosts-per-leaf", type=int, default=16)
    ap.add_argument("--load-balancing", default="spray_random", help="spray_random, spray_rr or per_flow")
    ap.add_argument("--ring-order", default="locality", help="comm.ring.order: locality or rank")
    ap.add_argument("--mtu", type=int, default=1500, help="IP MTU (simulated: up to 9000)")
    ap.add_argument(
        "--iterations", type=int, default=3, help="operations per run, the first a warm-up (1: time it from the start)"
    )
    ap.add_argument("--seeds", default="1", help="one run per seed (ns-3: spray_random choices)")
    ap.add_argument("--fit", metavar="FILE", help="write the alpha-beta fits (JSON) for dlcp schedule --fit")
    ap.add_argument("--keep", metavar="DIR", help="keep the runs under DIR (default: a temporary directory)")
    ap.add_argument("--json", action="store_true", help="the result as JSON on the last line")
    return ap


def _numbers(text: str, kind, what: str) -> list:
    try:
        out = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--{what} {text}: expected numbers like 1,16") from None
    if not out or any(v <= 0 for v in out):
        raise ValueError(f"--{what} {text}: expected positive numbers")
    return out


def _names(text: str, known, what: str) -> list[str]:
    out = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in out if x not in known]
    if bad or not out:
        raise ValueError(f"--{what}: {bad[0] if bad else text!r} is not one of {', '.join(known)}")
    return out


def settings_of(args) -> dict:
    """The bench's settings from its arguments (ValueError with one line naming the argument)."""
    workers, sizes, gbps, kind = DEFAULTS[sizes_only(args.backend)]
    if args.iterations < 1:
        raise ValueError("--iterations must be >= 1")
    fabric = Fabric(
        kind=args.topology or kind,
        host_mbps=(args.host_gbps or gbps) * 1e3,
        fabric_mbps=args.fabric_gbps * 1e3 if args.fabric_gbps else None,
        spines=args.spines,
        hosts_per_leaf=args.hosts_per_leaf,
        load_balancing=args.load_balancing,
        mtu=args.mtu,
        ring_order=args.ring_order,
    )
    return {
        "backend": args.backend,
        "collectives": _names(args.collectives, collectives_to_bench(), "collectives"),
        "workers": _numbers(args.workers or workers, int, "workers"),
        "sizes": [round(mb * MB) for mb in _numbers(args.sizes_mb or sizes, float, "sizes-mb")],
        "variants": _names(args.variants, VARIANTS, "variants"),
        "seeds": _numbers(args.seeds, int, "seeds"),
        "iterations": args.iterations,
        "fabric": fabric,
    }


def run_bench(st: dict, workdir: Path) -> list[Point]:
    collectives = collectives_to_bench()
    points = []
    for name in st["collectives"]:
        for n in st["workers"]:
            for seed in st["seeds"]:
                points += run_series(
                    st["backend"],
                    collectives[name],
                    n,
                    st["sizes"],
                    st["variants"],
                    st["fabric"],
                    st["iterations"],
                    seed,
                    workdir,
                )
    return points


TABLE_COLUMNS = (
    "collective",
    "workers",
    "size_mb",
    "variant",
    "time_ms",
    "time_min_ms",
    "time_max_ms",
    "algbw_gbps",
    "busbw_gbps",
    "busbw_frac",
    "lost_pkts",
    "retx_pkts",
    "early_drops",
    "tail_drops",
    "cpu_s",
)


def bench_collectives(argv: list[str]) -> int:
    from dlcp.bench_output import emit

    args = parser().parse_args(argv)
    try:
        st = settings_of(args)
    except ValueError as e:
        raise SystemExit(f"dlcp bench collectives: {e}") from None
    needs_root = backends.capabilities(st["backend"]).root
    if needs_root:
        import os

        if os.geteuid() != 0:
            raise SystemExit(
                f"dlcp bench collectives: --backend {st['backend']} needs root ({needs_root}; hold the netns lock)"
            )
    try:
        if args.keep:
            Path(args.keep).mkdir(parents=True, exist_ok=True)
            points = run_bench(st, Path(args.keep).resolve())
        else:
            with tempfile.TemporaryDirectory(prefix="dlcp-bench-collectives-") as tmp:
                points = run_bench(st, Path(tmp))
    except RuntimeError as e:
        raise SystemExit(f"dlcp bench collectives: {e}") from None
    fabric: Fabric = st["fabric"]
    rows = rows_of(points, fabric)
    network = f"{st['backend']} {fabric.label(max(st['workers']))}"
    fits = fits_of(points, network)
    result = {
        "bench": "collectives",
        "definitions": NCCL_TESTS,
        "backend": st["backend"],
        "fabric": asdict(fabric),
        "iterations": st["iterations"],
        "seeds": st["seeds"],
        "rows": rows,
        "fits": fits,
        "points": [asdict(p) for p in points] if args.keep else [],
    }
    if args.fit:
        Path(args.fit).write_text(json.dumps({"fits": fits}, indent=1) + "\n")
    title = (
        f"{st['backend']}: {'; '.join(fabric.label(n) for n in st['workers'])}; {st['iterations'] - 1} "
        f"timed operations per run; busbw as nccl-tests ({NCCL_TESTS}); busbw_frac of the host link"
    )
    emit(title, [{k: r[k] for k in TABLE_COLUMNS} for r in rows], result, False)
    if fits:
        print("alpha-beta fits (t = alpha + beta S):")
    for f in fits:
        print(
            f"  {f['collective']} {f['workers']} workers {f['variant']}: alpha {f['alpha_s'] * 1e6:.1f} us, "
            f"beta {f['beta_s_per_byte']:.4g} s/B, worst residual {f['max_rel_residual']:.1%}"
        )
    if args.json:
        print(json.dumps(result))
    return 0
