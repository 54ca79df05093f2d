"""`dlcp report` and `dlcp compare`: the public entry points of dlcp.reporting.

    report_run(run_dir) -> summary dict          (writes summary.json, report.md, report.html, plots/)
    compare_runs(run_dirs, out_dir) -> path       (writes compare.json, compare.md, compare.html, plots/)

Neither needs root; both only read the run directories (report_run writes its outputs into the run
directory unless told otherwise), so they work on a copied results directory.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from .reporting.compare import compare_runs
from .reporting.load import NotARunDirectory
from .reporting.runreport import headline_lines, protected_warning, report_run

__all__ = ["report_run", "compare_runs", "cmd_report", "cmd_compare"]


def cmd_report(args: argparse.Namespace) -> int:
    run_dir = pathlib.Path(args.run_dir)
    out = pathlib.Path(args.out) if args.out else run_dir
    try:
        summary = report_run(run_dir, out)
    except NotARunDirectory as e:
        print(f"dlcp report: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"dlcp report: cannot write the report into {out}: {e.strerror or e} (use --out DIR)",
              file=sys.stderr)
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
    if len(args.run_dirs) < 2:
        print("dlcp compare: give at least two run directories (the first is the baseline)", file=sys.stderr)
        return 2
    try:
        path = compare_runs(args.run_dirs, args.out, echo=True)
    except NotARunDirectory as e:
        print(f"dlcp compare: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"dlcp compare: cannot write the comparison: {e} (use --out DIR)", file=sys.stderr)
        return 1
    print(f"comparison: {path} (also compare.md, compare.json, plots/)")
    return 0
