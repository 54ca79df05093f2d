"""`dlcp run`: the command line of the series runner (dlcp/runs/series.py), which drives
whichever backend the experiment names (dlcp/backends.py). Exit status: 0 done, 1 a run failed
(or root is missing, or another run has the machine, or the cluster cannot take the series), 2 a config or option error before anything
started, 130 Ctrl-C, 143 SIGTERM (docs/runs.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dlcp.runs import signals
from dlcp.runs.cluster import ClusterError
from dlcp.runs.contract import RunFailed
from dlcp.runs.machine_lock import MachineBusy
from dlcp.runs.series import run_series
from dlcp.runs.series_runner import NeedsRoot, SeriesRequest
from dlcp.settings import ConfigError
from dlcp_cli import cluster_options


def request_of(args: argparse.Namespace) -> SeriesRequest:
    return SeriesRequest(
        config=args.config,
        overrides=list(args.set or []),
        policies=[p.strip() for p in args.policies.split(",") if p.strip()] if args.policies else None,
        vary=list(args.vary or []),
        repeat=args.repeat,
        name=args.name,
        out_root=args.out,
        run_dir=args.run_dir,
        with_report=not args.no_report,
        resume=args.resume,
        cluster=cluster_options.options_of(args),
        command=("dlcp", *sys.argv[1:]),
    )


# what running a series raises (dlcp.runs.series.run_series), for a command that runs one
SERIES_ERRORS = (ConfigError, NeedsRoot, MachineBusy, ClusterError, RunFailed, KeyboardInterrupt, signals.Terminated)


def series_exit_code(prog: str, e: BaseException) -> int:
    """A series' failure as `prog` reports it: one line on stderr (none after a stop: the series
    runner said where it stopped) and the exit status: 2 for a bad configuration, 1 otherwise."""
    if isinstance(e, (KeyboardInterrupt, signals.Terminated)):
        return signals.exit_code(e)
    print(f"{prog}: failed: {e}" if isinstance(e, RunFailed) else f"{prog}: {e}", file=sys.stderr)
    return 2 if isinstance(e, ConfigError) else 1


def main(args: argparse.Namespace) -> int:
    try:
        results = run_series(request_of(args))
    except SERIES_ERRORS as e:
        return series_exit_code("dlcp run", e)
    print(f"dlcp run: results in {results}")
    for report in reports_in(results):
        print(f"  {report}")
    return 0


def reports_in(results: Path) -> list[Path]:
    return (
        sorted(results.glob("report.html"))
        + sorted(results.glob("*/report.html"))
        + sorted(results.glob("*/rep*/report.html"))
        + sorted(results.glob("compare.html"))
    )
