"""The `dlcp` command: run | sweep | build | gen | report | trace | compare | profile | chakra | clean | bench | schedule | reproduce.

The CLI sits above `dlcp/`, `emulation/` and `simulation/`. Commands that need root, Mininet, bmv2
or ns-3 import them only when invoked, so `dlcp report`, `dlcp compare` and `dlcp bench tagging`
work anywhere. `dlcp run` hands the experiment to the series runner (dlcp/runs/), which drives the
backend the experiment names through the registry (dlcp/backends.py).
"""

from __future__ import annotations

import argparse
import sys

from dlcp import __version__
from dlcp.wire.header import DATA_PORT
from dlcp_cli import cluster_options, profile_cmd, report_cmds
from dlcp_cli.benches import BENCHES, run_bench


def _run(args: argparse.Namespace) -> int:
    from dlcp_cli import run_cmd

    return run_cmd.main(args)


def _sweep(argv: list[str]) -> int:
    from dlcp_cli import sweep

    return sweep.main(argv)


def _clean(args: argparse.Namespace) -> int:
    from emulation import clean

    return clean.main(args)


def _schedule(argv: list[str]) -> int:
    from dlcp_cli.schedule_cmd import main as schedule_main

    return schedule_main(argv)


def _reproduce(argv: list[str]) -> int:
    from dlcp_cli.reproduce_cmd import main as reproduce_main

    return reproduce_main(argv)


def _build(args: argparse.Namespace) -> int:
    from emulation.bmv2 import build

    return build.main(args)


def _gen(args: argparse.Namespace) -> int:
    from dlcp import codegen

    return codegen.main(["--check"] if args.check else [])


def backend_help() -> list[str]:
    """Each backend with what it needs, for `dlcp run --help`."""
    from dlcp import backends

    return [f"{name}{': root' if backends.capabilities(name).root else ''}" for name in backends.names()]


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dlcp", description=__doc__.splitlines()[0])
    ap.add_argument("--version", action="version", version=f"dlcp {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    r = sub.add_parser(
        "run",
        help="run an experiment on its backend (" + ", ".join(backend_help()) + ")",
        description="Run an experiment config (TOML) on the backend it names; results go to "
        "results/<UTC time>-<name>/<variant>/.",
    )
    r.add_argument("config", help="experiment file, e.g. experiments/ps-incast.toml")
    r.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set dlcp.policy=fifo (repeatable)",
    )
    r.add_argument(
        "--policies",
        metavar="P1,P2",
        help="run one variant per tagging policy or system, back to back on the same topology and seed "
        "(= --vary dlcp.policy=P1,P2 when all are tagging policies, else --vary system=P1,P2; systems: "
        "docs/bounded-loss.md)",
    )
    r.add_argument(
        "--vary",
        action="append",
        metavar="KEY=V1,V2",
        help="run one variant per value of any config key, e.g. --vary comm.scheduler=wfbp,dear "
        "(repeatable: every combination)",
    )
    r.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="run the variants N times as interleaved pairs a1 b1 a2 b2 ... (a new seed per pair, "
        "the same within a pair) and compare them with 95%% confidence intervals",
    )
    r.add_argument("--out", metavar="DIR", help="results root (default: output.dir of the config)")
    r.add_argument(
        "--name",
        help="name of the run directory (default: the keys of --set, e.g. "
        "load_balancing=per_flow, else the policy); with --policies/--vary: <variant>+NAME",
    )
    r.add_argument("--no-report", action="store_true", help="skip the report and comparison")
    r.add_argument(
        "--resume",
        metavar="DIR",
        help="run what is missing of the series in DIR (its results directory), with the same arguments "
        "it was started with: runs found finished there (same config and seed) are not run again",
    )
    cluster_options.add_to(
        r,
        "runs at once on this machine: the local cluster's worker processes (default: the cores); with "
        "--cluster slurm, at most N worker jobs (default: one per run)",
    )
    r.add_argument(
        "--run-dir",
        metavar="DIR",
        help="write the (single-variant) run exactly into DIR instead of OUT/<UTC time>-NAME/run",
    )
    r.set_defaults(func=_run)

    sw = sub.add_parser(
        "sweep",
        help="run an experiment over a grid of config values, points in parallel",
        description="See `dlcp sweep --help`.",
        add_help=False,
    )
    sw.add_argument("sweep_args", nargs=argparse.REMAINDER)
    sw.set_defaults(func=lambda a: _sweep(a.sweep_args))

    c = sub.add_parser("clean", help="stop what a killed run left (processes, host shells, links; root)")
    c.set_defaults(func=_clean)

    bd = sub.add_parser("build", help="compile p4/dlcp.p4 for bmv2 with p4c (into build/p4/)")
    bd.add_argument("--out", help="output directory (default: build/p4 in the repository)")
    bd.add_argument(
        "--data-port", type=int, default=DATA_PORT, help=f"UDP destination port parsed as DLCP (default: {DATA_PORT})"
    )
    bd.set_defaults(func=_build)

    g = sub.add_parser(
        "gen",
        help="write the P4, C and doc views of the wire format and switch names",
        description="Regenerate p4/include/generated/*.p4, dlcp/switch/c/dlcp_wire.h and the "
        "tables of docs/wire-format.md from dlcp/wire/layout.py and "
        "dlcp/network/pipeline_names.py (docs/wire-format.md).",
    )
    g.add_argument("--check", action="store_true", help="write nothing; exit 1 if a generated file is stale")
    g.set_defaults(func=_gen)

    b = sub.add_parser(
        "bench",
        help="run a benchmark and print its figures",
        description="Benchmarks: " + "; ".join(f"{k}: {v[1]}" for k, v in BENCHES.items()),
    )
    b.add_argument("name", choices=sorted(BENCHES))
    b.add_argument("bench_args", nargs=argparse.REMAINDER, help="options of the benchmark (--help)")
    b.set_defaults(func=lambda a: run_bench(a.name, a.bench_args))

    sc = sub.add_parser(
        "schedule",
        help="a scheduler's prediction or a collective's plan (--json: last line)",
        description="What a communication scheduler decides on a profile and the iteration time it "
        "predicts, or a collective's plan on a topology: dlcp schedule --help",
    )
    sc.add_argument("schedule_args", nargs=argparse.REMAINDER, help="options (dlcp schedule --help)")
    sc.set_defaults(func=lambda a: _schedule(a.schedule_args))

    rp = sub.add_parser(
        "reproduce",
        help="the source papers' claims beside our figures, with verdicts (--fast | --full)",
        description="See `dlcp reproduce --help`.",
        add_help=False,
    )
    rp.add_argument("reproduce_args", nargs=argparse.REMAINDER)
    rp.set_defaults(func=lambda a: _reproduce(a.reproduce_args))

    r = sub.add_parser(
        "report",
        help="summarise a run: summary.json, report.md, report.html, plots/",
        description="Tail-latency report of one run directory (docs/reports.md).",
    )
    r.add_argument("run_dir", help="a run directory, e.g. results/<time>-NAME/dlcp")
    r.add_argument("--out", help="write the report here instead of into the run directory")
    r.set_defaults(func=report_cmds.cmd_report)

    t = sub.add_parser(
        "trace",
        help="a run's timeline as a Chrome/Perfetto trace (dlcp report writes it too)",
        description="Per rank the forward and backward of every layer and every message; per switch "
        "port queue depth and drops (dlcp/reporting/trace.py). Open it at https://ui.perfetto.dev.",
    )
    t.add_argument("run_dir", help="a run directory")
    t.add_argument("--out", help="output file (default: RUN_DIR/trace.json)")
    t.set_defaults(func=report_cmds.cmd_trace)

    profile_cmd.add_parser(sub)
    ch = sub.add_parser("chakra", help="Chakra execution traces: import one as a profile, export a run", add_help=False)
    ch.add_argument("chakra_args", nargs=argparse.REMAINDER)

    c = sub.add_parser(
        "compare",
        help="compare runs against the first (baseline): compare.md/.html/.json",
        description="Side-by-side metrics of runs with ratios against the first run; or, given "
        "results directories of `dlcp run --repeat` (one or several, pooled), their "
        "variants over all their pairs with 95%% confidence intervals.",
    )
    c.add_argument(
        "run_dirs",
        nargs="+",
        metavar="DIR",
        help="run directories (the first is the baseline), repeat groups (results/T-NAME/VARIANT), "
        "or results directories of repeated runs (results/T-NAME) to pool",
    )
    c.add_argument(
        "--out",
        help="output directory (default: the runs' common parent directory if they "
        "share one, else the current directory; several pooled results directories: "
        "pooled-FIRST+N beside them)",
    )
    c.add_argument(
        "--baseline",
        metavar="VARIANT",
        help="with results directories: the baseline variant (default: the one their compare.json names)",
    )
    c.set_defaults(func=report_cmds.cmd_compare)
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # `dlcp bench NAME --json` and `dlcp schedule ...` must reach their own parsers untouched
    if len(argv) >= 2 and argv[0] == "bench" and not argv[1].startswith("-"):
        return run_bench(argv[1], argv[2:])
    if argv and argv[0] == "sweep":  # its own parser, like the benchmarks
        return _sweep(argv[1:])
    if argv[:1] == ["schedule"]:
        return _schedule(argv[1:])
    if argv[:1] == ["reproduce"]:  # its own parser
        return _reproduce(argv[1:])
    if argv[:1] == ["profile"]:  # list | show | MODEL: its own parser
        return profile_cmd.main(argv[1:])
    if argv[:1] == ["chakra"]:
        from dlcp_cli import chakra_cmd

        return chakra_cmd.main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except KeyboardInterrupt:
        print("dlcp: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
