"""`dlcp report` and `dlcp compare`: arguments in, dlcp.reporting called, one-line errors out.

dlcp.reporting (matplotlib, scipy: ~2 s) is imported when one of them runs, not with the `dlcp`
command: every `dlcp run` and each simulated run of a series would pay for it.
"""

from __future__ import annotations

import argparse
import pathlib
import sys


def cmd_report(args: argparse.Namespace) -> int:
    from dlcp.reporting.load import NotARunDirectory
    from dlcp.reporting.runreport import headline_lines, protected_warning, report_run

    run_dir = pathlib.Path(args.run_dir)
    out = pathlib.Path(args.out) if args.out else run_dir
    try:
        summary = report_run(run_dir, out)
    except NotARunDirectory as e:
        print(f"dlcp report: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"dlcp report: cannot write the report into {out}: {e.strerror or e} (use --out DIR)", file=sys.stderr)
        return 1
    print(f"{summary['run']['name']} (policy {summary['run']['policy'] or 'unknown'})")
    for line in headline_lines(summary):
        print(f"  {line}")
    warning = protected_warning(summary["loss"])
    if warning:
        print(f"WARNING: {warning}", file=sys.stderr)
    for problem in summary["problems"]:
        print(f"missing: {problem}", file=sys.stderr)
    print(f"report: {out / 'report.html'} (also report.md, summary.json, plots/)")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from dlcp.reporting.compare import compare_runs
    from dlcp.reporting.load import ReportInputError

    try:
        path = compare_runs(args.run_dirs, args.out, echo=True, baseline=args.baseline)
    except ReportInputError as e:  # NotARunDirectory too; any other ValueError is a bug: its traceback stays
        print(f"dlcp compare: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"dlcp compare: cannot write the comparison: {e} (use --out DIR)", file=sys.stderr)
        return 1
    print(f"comparison: {path} (also compare.md, compare.json, plots/)")
    return 0


def cmd_trace(args: argparse.Namespace) -> int:
    from dlcp.reporting.trace import OPEN_HINT, write_trace

    try:
        out = write_trace(pathlib.Path(args.run_dir), args.out)
    except ValueError as e:
        print(f"dlcp trace: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"dlcp trace: cannot write the trace: {e.strerror or e} (use --out FILE)", file=sys.stderr)
        return 1
    print(f"trace: {out} ({OPEN_HINT})")
    return 0
