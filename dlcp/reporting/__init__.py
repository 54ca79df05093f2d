"""Reports from run directories (docs/runs.md, docs/reports.md).

load (RunData from a run directory, noting missing pieces) -> summarise (summary.json content) ->
plots (matplotlib figures) -> render (Markdown + self-contained HTML); runreport and compare put
them together; synthetic writes a run directory for tests and demos.
"""

from .compare import compare_runs
from .runreport import report_run

__all__ = ["report_run", "compare_runs"]
