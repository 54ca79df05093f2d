"""`dlcp schedule`: a scheduler's decisions and predicted iteration time, or a collective's plan.

    dlcp schedule --profile resnet50-usbyte --workers 16 --alpha 9e-4 --beta 7.4e-10 --scheduler mgwfbp --json
    dlcp schedule --profile resnet50-usbyte --workers 64 --fit fits.json --scheduler dear   # dlcp bench collectives --fit
    dlcp schedule --collective multitree --topology torus:4x4 --json
    dlcp schedule --collective ring --topology leaf_spine:2x2x4 --order locality --json
    dlcp schedule --collective dssync --workers 16 --group 4 --json

A summary first; with `--json` the result as one JSON object on the last line (dlcp/comm/prediction.py
`prediction_json`; a collective's `describe`, dlcp/comm/plans/). A scheduler's lists `groups`
(tensor indices in the profile's forward order), `partitions` and `send_order` where the
scheduler has them, and `predicted_iteration_s` from the alpha-beta timeline. Alpha and beta are the
all-reduce's (seconds, seconds per byte: seeds-brief §1), or a fit (`--fit`: a file `dlcp bench
collectives --fit` wrote, or a named one of dlcp/comm/costmodel.py), or derived from `--rate-gbps` and
`--latency-s` for a ring; with `--collective` and `--topology` as well, from that collective's
schedule on that topology.

The choices of `--scheduler` and `--collective` are the registered ones (dlcp/comm/schedulers/,
dlcp/comm/plans/), and every option a collective declares is a flag (`--kary`, `--group`, ...).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dlcp.comm.assemble import collective_cost
from dlcp.comm.costmodel import CostModel, load_fit, named_fit
from dlcp.comm.plans import PlanError
from dlcp.comm.plans.collective import COLLECTIVES
from dlcp.comm.plans.paths import rank_hosts
from dlcp.comm.plans.topology_arg import parse_topology
from dlcp.comm.prediction import prediction_json
from dlcp.comm.schedulers import SCHEDULERS
from dlcp.experiment.config import parse_value
from dlcp.settings import add_option_flags, options_from_flags
from dlcp.workloads.profile import load_profile


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dlcp schedule", description=__doc__.splitlines()[0])
    ap.add_argument("--scheduler", choices=SCHEDULERS.choices(), help="a communication scheduler's decisions")
    ap.add_argument("--profile", help="bundled profile name (`dlcp profile list`) or a profile JSON file")
    ap.add_argument("--workers", type=int, help="ranks")
    ap.add_argument(
        "--compute-scale",
        type=float,
        default=1.0,
        metavar="K",
        help="every compute time of the profile times K: a device K times slower (default 1)",
    )
    ap.add_argument("--alpha", type=float, help="all-reduce start-up, seconds")
    ap.add_argument("--beta", type=float, help="all-reduce seconds per byte")
    ap.add_argument("--rate-gbps", type=float, help="instead of alpha/beta: link rate (ring all-reduce)")
    ap.add_argument(
        "--fit",
        metavar="FILE|NAME",
        help="instead of alpha/beta: the ring fit at --workers from `dlcp bench collectives --fit FILE`, "
        "or a named fit (costmodel PAPER_FITS / NS3_FITS, e.g. 10GbE)",
    )
    ap.add_argument(
        "--fit-variant", help="with --fit FILE: the bench variant (lossless, dlcp, ...) when it has several"
    )
    ap.add_argument("--latency-s", type=float, default=30e-6, help="with --rate-gbps: per step (default 30 us)")
    ap.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a scheduler option, e.g. credit_bytes=8000000 (repeatable)",
    )
    ap.add_argument("--collective", choices=COLLECTIVES.choices(), help="a collective's plan")
    ap.add_argument("--topology", help='e.g. "torus:4x4", "mesh:4x4", "leaf_spine:2x2x4", "star:8"')
    ap.add_argument("--fabric-mbps", type=float, default=50.0, help="switch-to-switch rate (default 50)")
    ap.add_argument("--host-mbps", type=float, help="host link rate (default: fabric x degree on torus/mesh)")
    add_option_flags(ap, COLLECTIVES)
    ap.add_argument("--json", action="store_true", help="the plan as JSON on the last line")
    return ap


def parse_option(text: str) -> tuple[str, object]:
    if "=" not in text:
        raise ValueError(f"--option {text}: expected KEY=VALUE")
    key, value = text.split("=", 1)
    return key.strip(), parse_value(value.strip())


def _fail(text: str) -> int:
    print(f"dlcp schedule: {text}", file=sys.stderr)
    return 2


def _cost(args, spec) -> CostModel:
    if args.fit:
        if args.alpha is not None or args.beta is not None or args.rate_gbps is not None:
            raise ValueError("--fit replaces --alpha/--beta and --rate-gbps: give one")
        if args.workers is None:
            raise ValueError("--fit needs --workers")
        if Path(args.fit).suffix == ".json" or Path(args.fit).exists():
            return load_fit(args.fit, args.workers, variant=args.fit_variant)
        return named_fit(args.fit, args.workers)
    if args.alpha is not None or args.beta is not None:
        if args.alpha is None or args.beta is None:
            raise ValueError("--alpha and --beta go together")
        return CostModel(alpha=args.alpha, beta=args.beta, workers=args.workers)
    if args.rate_gbps is not None:
        return CostModel.from_link(args.rate_gbps * 1e9, args.latency_s, args.workers)
    if args.collective and spec is not None:
        entry = COLLECTIVES.get(args.collective)
        plan = entry.plan(options_from_flags(args, entry), args.workers, spec)
        return collective_cost(plan.schedule(0), spec, args.latency_s, args.fabric_mbps)
    raise ValueError("give --alpha and --beta, or --rate-gbps (or --collective with --topology)")


def scheduler_plan(args) -> dict:
    if not args.profile or args.workers is None:
        raise ValueError("--scheduler needs --profile and --workers")
    spec = parse_topology(args.topology, args.fabric_mbps, args.host_mbps) if args.topology else None
    if spec is not None and len(spec.hosts) != args.workers:
        raise ValueError(f"--workers {args.workers}, but --topology {args.topology} has {len(spec.hosts)} hosts")
    options = dict(parse_option(o) for o in args.option)
    profile = load_profile(args.profile).scaled(args.compute_scale)  # ValueError on K <= 0
    plan = prediction_json(args.scheduler, profile, args.workers, _cost(args, spec), **options)
    plan["compute_scale"] = args.compute_scale
    if args.collective:
        plan["collective"] = args.collective
    return plan


def collective_plan(args) -> dict:
    spec = parse_topology(args.topology, args.fabric_mbps, args.host_mbps) if args.topology else None
    if spec is None and args.workers is None:
        raise ValueError(f"--collective {args.collective} needs --topology (or --workers: a star)")
    entry = COLLECTIVES.get(args.collective)
    workers = args.workers if args.workers is not None else len(rank_hosts(spec))
    return entry.describe(options_from_flags(args, entry), workers, spec)


def summary(plan: dict) -> list[str]:
    if "scheduler" in plan:
        ops = plan["send_order"]
        return [
            f"{plan['scheduler']} on {plan['profile']} with {plan['workers']} workers: "
            f"{len(plan.get('groups', []))} groups, {len(ops)} operations per iteration",
            f"predicted iteration {plan['predicted_iteration_s'] * 1e3:.2f} ms "
            f"(compute {plan['compute_s'] * 1e3:.2f} ms"
            + (f", the profile's x {plan['compute_scale']:g}" if plan.get("compute_scale", 1) != 1 else "")
            + ")",
            *(f"note: {n}" for n in plan.get("notes", [])),
        ]
    return COLLECTIVES.get(plan["collective"]).summary(plan)


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if not args.scheduler and not args.collective:
        return _fail("give --scheduler (with --profile, --workers and a cost) or --collective")
    try:
        plan = scheduler_plan(args) if args.scheduler else collective_plan(args)
    except (ValueError, PlanError) as e:
        return _fail(str(e))
    for line in summary(plan):
        print(line)
    if args.json:
        print(json.dumps(plan))
    return 0
