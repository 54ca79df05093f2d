"""Reports from run directories (docs/runs.md, docs/reports.md).

load (RunData from a run directory, noting missing pieces) -> summarise (summary.json content) ->
plots (matplotlib figures) -> render (Markdown + self-contained HTML); runreport and compare put
them together. `dlcp report` / `dlcp compare` (dlcp_cli/report_cmds.py) call the two below.

    report_run(run_dir) -> summary dict          (writes summary.json, report.md, report.html, plots/)
    compare_runs(run_dirs, out_dir) -> path       (writes compare.json, compare.md, compare.html, plots/)

Neither needs root; both only read the run directories, so they work on a copied results directory.
"""

from dlcp.reporting.compare import compare_runs
from dlcp.reporting.runreport import report_run

__all__ = ["compare_runs", "report_run"]
