"""`dlcp bench schedulers`, the parts that need no network: iteration times from the alpha-beta
timeline (dlcp/comm/timeline.py) per registered scheduler x profile x worker count, and one row
per registered collective (ring, MultiTree, DS-Sync...) on a torus, a mesh and a leaf-spine.

Timeline rows: each scheduler at its defaults, a ring all-reduce over links of `rate_gbps` with
`latency_s` per step (CostModel.from_link), as docs/schedulers.md's sweep. Collective rows: the
collective's own step schedule on the topology priced with contention (alpha_beta_cost with the
topology: a step lasts latency + the busiest link's bytes / its rate), for the profile's whole
gradient (`allreduce_ms`), and the iteration time of WFBP, MG-WFBP and DeAR planning and running
with that collective's (alpha, beta) (`collective_cost`). A collective's options are flags
(`--kary`, `--group`, ...: every option a registered collective declares; this bench's own
defaults are MultiTree's kary 5 and DS-Sync's group 4), and its row is labelled with the options
set here. A collective that varies per iteration (DS-Sync) gives one iteration's all-reduce as the
mean over its period and `rounds` to the exact global average (or the period); with DS-Sync's
parameter averaging nothing overlaps the backward, so its iteration is compute + allreduce_ms
(WFBP's column; the gradient schedulers' columns are empty, as a run refuses them).
Deterministic: one run gives the figures (no spread to report).
"""

from __future__ import annotations

import statistics

from dlcp.comm.assemble import collective_cost
from dlcp.comm.costmodel import CostModel
from dlcp.comm.plans.collective import COLLECTIVES
from dlcp.comm.plans.schedule import alpha_beta_cost
from dlcp.comm.plans.topology_arg import parse_topology
from dlcp.comm.prediction import predict, sweep
from dlcp.comm.schedulers import SCHEDULERS
from dlcp.settings import add_option_flags
from dlcp.workloads.profile import BYTES_PER_ELEMENT, load_profile

WORKERS = (4, 8, 16, 32, 64, 128)
TOPOLOGIES = ("torus:4x4", "mesh:4x4", "leaf_spine:2x4x4", "torus:8x8")
COLLECTIVE_SCHEDULERS = ("wfbp", "mgwfbp", "dear")
COLLECTIVE_OPTIONS = {"kary": 5, "group": 4}  # this bench's defaults of collectives' options


def timeline_rows(profiles, workers, rate_gbps: float, latency_s: float) -> list[dict]:
    """One row per profile x workers: compute and every scheduler's predicted iteration (ms)."""
    rows = sweep(profiles, workers, lambda p: CostModel.from_link(rate_gbps * 1e9, latency_s, p))
    out: dict = {}
    for r in rows:
        row = out.setdefault(
            (r["profile"], r["workers"]),
            {"profile": r["profile"], "workers": r["workers"], "compute_ms": round(r["compute_s"] * 1e3, 2)},
        )
        row[r["scheduler"]] = round(r["iteration_s"] * 1e3, 2)
    return list(out.values())


def _plans(spec, options: dict):
    """(label, entry, parsed options, plan) of every registered collective on `spec`, each with the
    options of `options` it declares (the others at its defaults); the label names the options set."""
    workers = len(spec.hosts)
    for entry in COLLECTIVES.entries():
        mine = {k: v for k, v in options.items() if entry.options is not None and k in entry.options.model_fields}
        label = " ".join([entry.name, *(f"{k}={v}" for k, v in mine.items())])
        parsed = entry.options.parse(mine) if entry.options is not None else None
        yield label, entry, parsed, entry.plan(parsed, workers, spec)


def scheduler_iteration_ms(entry, options, scheduler: str, profile, workers: int, cost, allreduce_s: float):
    """A scheduler's iteration over a collective, priced as it runs: a collective that averages
    parameters after the local step (DS-Sync's own mode) cannot overlap the backward, so its
    iteration is the compute plus one round of averaging, whatever the scheduler (and None where
    the collective refuses the scheduler, as a run would); otherwise the timeline's prediction."""
    from dlcp.settings import BadValue

    if entry.averages_parameters(options):
        try:
            entry.check(options, scheduler, workers)
        except BadValue:
            return None
        return round((profile.compute_s + allreduce_s) * 1e3, 2)
    return round(predict(scheduler, profile, workers, cost)[1].iteration_s * 1e3, 2)


def collective_rows(
    profile, topologies, fabric_gbps: float, latency_s: float, options: dict | None = None
) -> list[dict]:
    """One row per topology x collective (see the module docstring); `options`: collectives'
    options by key (default COLLECTIVE_OPTIONS)."""
    options = COLLECTIVE_OPTIONS if options is None else options
    nbytes = BYTES_PER_ELEMENT * profile.parameters
    link_beta = 8.0 / (fabric_gbps * 1e9)
    rows = []
    for topology in topologies:
        spec = parse_topology(topology, fabric_mbps=fabric_gbps * 1e3)
        for name, entry, parsed, plan in _plans(spec, options):
            scheds = [plan.schedule(k) for k in range(plan.period)]
            allreduce = statistics.fmean(alpha_beta_cost(s, nbytes, latency_s, link_beta, spec) for s in scheds)
            costs = [collective_cost(s, spec, latency_s, fabric_gbps * 1e3) for s in scheds]
            cost = CostModel(
                alpha=statistics.fmean(c.alpha for c in costs),
                beta=statistics.fmean(c.beta for c in costs),
                workers=plan.workers,
            )
            row = {
                "topology": topology,
                "collective": name,
                "workers": plan.workers,
                "steps_per_phase": max(s.steps_per_phase for s in scheds),
                "rounds": plan.period,
                "allreduce_ms": round(allreduce * 1e3, 2),
            }
            for s in COLLECTIVE_SCHEDULERS:
                row[s] = scheduler_iteration_ms(entry, parsed, s, profile, plan.workers, cost, allreduce)
            rows.append(row)
    return rows


def timeline_result(
    profiles: list[str],
    workers,
    rate_gbps: float,
    latency_s: float,
    collective_profile: str,
    topologies,
    fabric_gbps: float,
    options: dict,
    compute_scale: float = 1.0,
) -> dict:
    """Both tables; `compute_scale` multiplies every profile's compute times (a slower device)."""
    loaded = [load_profile(p).scaled(compute_scale) for p in profiles]
    return {
        "compute_scale": compute_scale,
        "timeline": {
            "rate_gbps": rate_gbps,
            "latency_s": latency_s,
            "schedulers": list(SCHEDULERS.names()),
            "rows": timeline_rows(loaded, workers, rate_gbps, latency_s),
        },
        "collectives": {
            "profile": collective_profile,
            "fabric_gbps": fabric_gbps,
            "latency_s": latency_s,
            "options": options,
            "rows": collective_rows(
                load_profile(collective_profile).scaled(compute_scale), topologies, fabric_gbps, latency_s, options
            ),
        },
    }


def _ints(text: str) -> tuple[int, ...]:
    import argparse

    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"worker counts must be >= 1: {text!r}")
    return values


def _positive(text: str) -> float:
    import argparse
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0: {text!r}")
    return value


def _names(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def parser():
    import argparse

    ap = argparse.ArgumentParser(prog="dlcp bench schedulers", description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", type=_names, default=["resnet50-usbyte", "vgg16-usbyte"])
    ap.add_argument("--workers", type=_ints, default=WORKERS, help="comma-separated worker counts")
    ap.add_argument("--rate-gbps", type=float, default=10.0, help="link rate of the timeline's ring")
    ap.add_argument("--latency-s", type=float, default=30e-6, help="per collective step")
    ap.add_argument("--collective-profile", default="resnet50-usbyte", help="the profile of the collectives' rows")
    ap.add_argument(
        "--compute-scale",
        type=_positive,
        default=1.0,
        metavar="K",
        help="every profile compute time times K: a device K times slower than the profile's (default 1)",
    )
    ap.add_argument("--topologies", type=_names, default=list(TOPOLOGIES))
    ap.add_argument("--fabric-gbps", type=float, default=10.0, help="switch-to-switch rate of the collectives' rows")
    add_option_flags(ap, COLLECTIVES, COLLECTIVE_OPTIONS)
    ap.add_argument("--json", action="store_true")
    return ap


def print_timeline(result: dict) -> None:
    from dlcp.tables import format_table

    t, c = result["timeline"], result["collectives"]
    k = result.get("compute_scale", 1.0)
    print(
        f"timeline: predicted iteration time (ms) per scheduler, ring all-reduce at {t['rate_gbps']:g} Gb/s, "
        f"{t['latency_s'] * 1e6:g} us per step" + (f"; every compute time x {k:g} (--compute-scale)" if k != 1 else "")
    )
    print(format_table(t["rows"]))
    print(
        f"\ncollectives: {c['profile']} gradient over each collective's schedule, fabric {c['fabric_gbps']:g} Gb/s "
        f"(torus/mesh host links at degree x fabric), {c['latency_s'] * 1e6:g} us per step, with contention; "
        f"iteration ms of three schedulers planning with that collective"
    )
    print(format_table(c["rows"]))
