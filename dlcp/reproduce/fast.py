"""`dlcp reproduce --fast`: each claim's figure from the alpha-beta timeline or the collectives'
cost model, in seconds.

These models are deterministic, so a figure has no confidence interval. Where a spread means
something it is given, and named for what it is (never a 95 % CI):

* timeline: where a profile was measured on both an H200 and an H100 (`...-h200` and `...-h100`),
  the figure with each: the range over the two measurements of the same model (docs/profiles.md:
  step totals within 10 %, the forward/backward split up to 40 % apart);
* ecmp: per-flow hashing is random; the 2.5-97.5 percentiles over `draws` seeded hash draws;
* collectives: none (the schedules are exact).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dlcp.comm.assemble import collective_cost
from dlcp.comm.costmodel import CostModel, paper_fit
from dlcp.comm.plans.collective import COLLECTIVES
from dlcp.comm.plans.paths import Router, links_of
from dlcp.comm.plans.ring import ring_schedule
from dlcp.comm.plans.schedule import alpha_beta_cost
from dlcp.comm.plans.topology_arg import parse_topology
from dlcp.comm.prediction import predict
from dlcp.comm.schedulers_bench import scheduler_iteration_ms
from dlcp.reproduce.claims import Claim, CollectivesFast, EcmpFast, TimelineFast
from dlcp.workloads.profile import BYTES_PER_ELEMENT, bundled_profiles, load_profile


@dataclass
class Row:
    """One comparison's figure: S = best baseline / ours, where it came from, its spread."""

    label: str
    speedup: float | None
    where: str  # the profile / topology the figure is taken at
    spread: tuple[float, float] | None = None
    spread_kind: str = "none: the model is deterministic"
    details: list[dict] = field(default_factory=list)  # per profile / topology: times and the best baseline
    notes: list[str] = field(default_factory=list)


def _aggregate(values: list[tuple[float, str]], how: str) -> tuple[float, str]:
    if how == "max":
        return max(values)
    return math.exp(statistics.fmean(math.log(v) for v, _ in values)), f"geometric mean over {len(values)}"


def sibling(profile: str) -> str | None:
    """The same model measured on the other card (h200 <-> h100), if bundled."""
    for a, b in (("-h200", "-h100"), ("-h100", "-h200")):
        if profile.endswith(a) and profile[: -len(a)] + b in bundled_profiles():
            return profile[: -len(a)] + b
    return None


def _timeline_cost(spec: TimelineFast) -> CostModel:
    if spec.network:
        return paper_fit(spec.network, spec.workers)
    return CostModel.from_link(spec.rate_gbps * 1e9, spec.latency_s, spec.workers)


def _scheduler(name: str) -> tuple[str, dict]:
    """'bytescheduler architecture=ps' -> ('bytescheduler', {'architecture': 'ps'})."""
    head, *opts = name.split()
    out: dict = {}
    for o in opts:
        k, _, v = o.partition("=")
        out[k] = int(v) if v.isdigit() else v
    return head, out


def timeline_speedup(spec: TimelineFast, ours: str, baselines: list[str], profile_name: str) -> tuple[float, dict]:
    """(S, details) of `ours` against the best of `baselines` on one profile."""
    profile = load_profile(profile_name).scaled(spec.compute_scale)
    cost = _timeline_cost(spec)
    times, notes = {}, []
    for name in [ours, *baselines]:
        sched_name, opts = _scheduler(name)
        sched, tl = predict(sched_name, profile, spec.workers, cost, **opts)
        times[name] = tl.iteration_s
        notes += [f"{profile_name}: {n}" for n in sched.describe().get("notes", [])]
    best = min(baselines, key=lambda b: times[b])
    return times[best] / times[ours], {
        "at": profile_name,
        "compute_ms": round(profile.compute_s * 1e3, 2),
        "ms": {k: round(v * 1e3, 2) for k, v in times.items()},
        "best_baseline": best,
        "speedup": round(times[best] / times[ours], 4),
        "notes": notes,
    }


def fast_timeline(spec: TimelineFast) -> list[Row]:
    rows = []
    for v in spec.versus:
        per, details = [], []
        for p in spec.profiles:
            s, d = timeline_speedup(spec, v.ours, v.baselines, p)
            per.append((s, p))
            details.append(d)
        s, where = _aggregate(per, spec.aggregate)
        row = Row(v.label, s, where, details=details, notes=[n for d in details for n in d["notes"]])
        chosen = [where] if spec.aggregate == "max" else list(spec.profiles)
        others = [sibling(p) for p in chosen]
        if all(others):
            alt = [timeline_speedup(spec, v.ours, v.baselines, o)[0] for o in others if o]
            alt_s = max(alt) if spec.aggregate == "max" else math.exp(statistics.fmean(math.log(a) for a in alt))
            row.spread = (min(s, alt_s), max(s, alt_s))
            row.spread_kind = "range over the H200 and H100 measurements of the profile(s)"
        rows.append(row)
    return rows


def _collective(label: str):
    """('multitree', {'kary': 5}) of 'multitree kary=5'."""
    return _scheduler(label)


def collective_figures(spec: CollectivesFast, label: str, topology: str) -> dict:
    """One collective on one topology: its all-reduce of the profile's gradient (mean over its
    period, with contention) and the iteration WFBP runs over it (DS-Sync as it runs)."""
    fabric_mbps = spec.fabric_gbps * 1e3
    topo = parse_topology(topology, fabric_mbps=fabric_mbps, host_mbps=spec.host_gbps * 1e3 or None)
    profile = load_profile(spec.profile).scaled(spec.compute_scale)
    nbytes = BYTES_PER_ELEMENT * profile.parameters
    name, opts = _collective(label)
    entry = COLLECTIVES.get(name)
    options = entry.options.parse(opts) if entry.options is not None else None
    plan = entry.plan(options, len(topo.hosts), topo)
    scheds = [plan.schedule(k) for k in range(plan.period)]
    link_beta = 8.0 / (spec.fabric_gbps * 1e9)
    allreduce = statistics.fmean(alpha_beta_cost(s, nbytes, spec.latency_s, link_beta, topo) for s in scheds)
    costs = [collective_cost(s, topo, spec.latency_s, fabric_mbps) for s in scheds]
    cost = CostModel(
        statistics.fmean(c.alpha for c in costs), statistics.fmean(c.beta for c in costs), workers=plan.workers
    )
    iteration_ms = scheduler_iteration_ms(entry, options, "wfbp", profile, plan.workers, cost, allreduce)
    return {"allreduce_ms": round(allreduce * 1e3, 3), "iteration_ms": iteration_ms, "steps": scheds[0].steps_per_phase}


def fast_collectives(spec: CollectivesFast) -> list[Row]:
    key = "allreduce_ms" if spec.metric == "allreduce" else "iteration_ms"
    rows = []
    for v in spec.versus:
        per, details = [], []
        for topology in spec.topologies:
            figs = {c: collective_figures(spec, c, topology) for c in [v.ours, *v.baselines]}
            best = min(v.baselines, key=lambda b: figs[b][key])
            s = figs[best][key] / figs[v.ours][key]
            per.append((s, topology))
            details.append(
                {
                    "at": topology,
                    "ms": {c: f[key] for c, f in figs.items()},
                    "steps_per_phase": {c: f["steps"] for c, f in figs.items()},
                    "best_baseline": best,
                    "speedup": round(s, 4),
                }
            )
        s, where = _aggregate(per, spec.aggregate)
        rows.append(Row(v.label, s, where, details=details))
    return rows


def _ring_cost_pinned(sched, topo, router: Router, paths: dict, nbytes: float, latency: float, beta: float) -> float:
    """The ring's alpha-beta time with each (src, dst) flow on `paths[(src, dst)]`."""
    total = 0.0
    for step in sched.steps:
        load: dict = {}
        for t in step:
            for ln in links_of(paths[(t.src, t.dst)]):
                load[ln] = load.get(ln, 0.0) + nbytes / t.chunks
        total += latency + max(b / router.capacity[ln] for ln, b in load.items()) * beta
    return total


def _ring_cost_sprayed(sched, router: Router, nbytes: float, latency: float, beta: float) -> float:
    total = 0.0
    for step in sched.steps:
        load: dict = {}
        for t in step:
            for ln, f in router.spray_shares(sched.hosts[t.src], sched.hosts[t.dst]).items():
                load[ln] = load.get(ln, 0.0) + f * nbytes / t.chunks
        total += latency + max(b / router.capacity[ln] for ln, b in load.items()) * beta
    return total


def fast_ecmp(spec: EcmpFast) -> list[Row]:
    topo = parse_topology(spec.topology, fabric_mbps=spec.fabric_gbps * 1e3, host_mbps=spec.host_gbps * 1e3)
    router = Router(topo)
    sched = ring_schedule(topo)
    P = sched.ranks
    beta = 8.0 / (spec.fabric_gbps * 1e9)
    flows = sorted({(t.src, t.dst) for step in sched.steps for t in step})
    choices = {f: router.paths(sched.hosts[f[0]], sched.hosts[f[1]]) for f in flows}
    rng = np.random.default_rng(2008)

    def iteration(profile, fn) -> float:
        a, b1 = fn(0.0), fn(1e6)
        cost = CostModel(alpha=a, beta=(b1 - a) / 1e6, workers=P)
        return predict("wfbp", profile, P, cost)[1].iteration_s

    rows_per_profile: list[dict[str, Any]] = []
    for name in spec.profiles:
        profile = load_profile(name).scaled(spec.compute_scale)
        sprayed = iteration(profile, lambda m: _ring_cost_sprayed(sched, router, m, spec.latency_s, beta))
        draws = []
        for _ in range(spec.draws):
            paths = {f: c[int(rng.integers(len(c)))] for f, c in choices.items()}
            draws.append(
                iteration(
                    profile, lambda m, p=paths: _ring_cost_pinned(sched, topo, router, p, m, spec.latency_s, beta)
                )
            )
        ratios = np.array(draws) / sprayed
        rows_per_profile.append(
            {
                "at": name,
                "ms": {"spray": round(sprayed * 1e3, 2), "per_flow_median": round(float(np.median(draws)) * 1e3, 2)},
                "speedup": round(float(np.median(ratios)), 4),
                "spread": [float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))],
            }
        )
    best = max(rows_per_profile, key=lambda d: d["speedup"])
    row = Row(
        spec.label,
        best["speedup"],
        best["at"],
        spread=(best["spread"][0], best["spread"][1]),
        spread_kind=f"2.5-97.5 percentiles over {spec.draws} per-flow hash draws (median shown)",
        details=rows_per_profile,
    )
    return [row] + [
        Row(label, None, "", spread_kind="not modelled: packet-level only (--full)") for label in spec.not_modelled
    ]


def fast_rows(claim: Claim) -> list[Row]:
    spec = claim.fast
    if isinstance(spec, TimelineFast):
        return fast_timeline(spec)
    if isinstance(spec, CollectivesFast):
        return fast_collectives(spec)
    return fast_ecmp(spec)
