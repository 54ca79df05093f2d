"""`dlcp reproduce [CLAIM ...] [--fast | --full]`: the source papers' claims beside our figures
(dlcp/reproduce/, docs/reproduce.md). Exit status: 0 done, 1 a run failed, 2 a bad claim or option, 130 / 143 stopped by Ctrl-C / SIGTERM."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dlcp_cli import cluster_options
from dlcp_cli.run_cmd import SERIES_ERRORS, series_exit_code


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="dlcp reproduce",
        description="Each source paper's claim, its setup and ours, our figure and the verdict: "
        "reproduce.md and reproduce.html (docs/reproduce.md).",
    )
    ap.add_argument("claims", nargs="*", metavar="CLAIM", help="claim folders of experiments/papers/ (default: all)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument(
        "--fast", action="store_true", help="the alpha-beta timeline and the collectives' cost model (default; minutes)"
    )
    mode.add_argument(
        "--full",
        action="store_true",
        help="packet-level series on ns-3 with paired repeats (hours at the papers' scale)",
    )
    ap.add_argument(
        "--reduced",
        action="store_true",
        help="with --full: each claim's reduced scale (minutes), to check the path and its cost",
    )
    ap.add_argument(
        "--repeat", type=int, metavar="N", help="with --full: paired repeats per series (default: the claim's)"
    )
    ap.add_argument(
        "--series", action="append", metavar="NAME", help="with --full: only these series of the claims (repeatable)"
    )
    cluster_options.add_to(
        ap,
        "with --full: runs at once on this machine (the local cluster's worker processes; default: the "
        "cores); with --cluster slurm, at most N worker jobs",
    )
    ap.add_argument("--out", metavar="DIR", help="output directory (default: results/<UTC time>-reproduce)")
    ap.add_argument("--claims-dir", metavar="DIR", help="where the claims are (default: experiments/papers)")
    ap.add_argument("--list", action="store_true", help="list the claims and exit")
    return ap


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    from dlcp.reproduce.claims import claims_root, load_claims
    from dlcp.reproduce.report import reproduce

    where = (args.cluster, args.jobs, args.shared_results, args.cluster_config)
    if (args.reduced or args.repeat or args.series or any(where)) and not args.full:
        print("dlcp reproduce: --reduced, --repeat, --series and the cluster options go with --full", file=sys.stderr)
        return 2
    if args.repeat is not None and args.repeat < 1:
        print(f"dlcp reproduce: --repeat {args.repeat}: need a number of pairs >= 1", file=sys.stderr)
        return 2
    try:
        if args.list:
            for c in load_claims(claims_root(args.claims_dir), args.claims or None):
                print(f"{c.id}: {c.title}{'' if c.full else ' (no --full yet)'}")
            return 0
        reproduce(
            args.claims or None,
            full=args.full,
            out=Path(args.out) if args.out else None,
            root=args.claims_dir,
            reduced=args.reduced,
            repeat=args.repeat,
            series=args.series,
            cluster=cluster_options.options_of(args),
            command="dlcp reproduce " + " ".join(argv),
        )
    except SERIES_ERRORS as e:
        return series_exit_code("dlcp reproduce", e)
    return 0
