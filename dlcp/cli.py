"""The `dlcp` command: run | build | report | compare | clean | bench.

Commands that need root, Mininet or bmv2 are implemented in `emulation/` and imported only when
invoked, so the rest of the CLI (and `dlcp/` as a library) works anywhere.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from . import __version__
from .bench import BENCHES, run_bench
from .header import DATA_PORT


def _call(target: str, args: argparse.Namespace) -> int:
    module, func = target.split(":")
    return getattr(importlib.import_module(module), func)(args) or 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dlcp", description=__doc__.splitlines()[0])
    ap.add_argument("--version", action="version", version=f"dlcp {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    bd = sub.add_parser("build", help="compile p4/dlcp.p4 for bmv2 with p4c (into build/p4/)")
    bd.add_argument("--out", help="output directory (default: build/p4 in the repository)")
    bd.add_argument("--data-port", type=int, default=DATA_PORT,
                    help=f"UDP destination port parsed as DLCP (default: {DATA_PORT})")
    bd.set_defaults(func=lambda a: _call("emulation.p4build:main", a))

    b = sub.add_parser("bench", help="run a benchmark and print its figures",
                       description="Benchmarks: " + "; ".join(f"{k}: {v[1]}" for k, v in BENCHES.items()))
    b.add_argument("name", choices=sorted(BENCHES))
    b.add_argument("bench_args", nargs=argparse.REMAINDER, help="options of the benchmark (--help)")
    b.set_defaults(func=lambda a: run_bench(a.name, a.bench_args))
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # `dlcp bench NAME --json` must reach the benchmark's own parser untouched
    if len(argv) >= 2 and argv[0] == "bench" and not argv[1].startswith("-"):
        return run_bench(argv[1], argv[2:])
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("dlcp: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
