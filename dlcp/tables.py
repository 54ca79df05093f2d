"""Plain-text tables for the terminal (benchmarks, comparisons), drawn by rich."""

from __future__ import annotations

import io

from rich import box
from rich.console import Console
from rich.table import Table


def cell(v) -> str:
    """A value as a table cell: floats with 4 significant digits, None as '-'."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def format_table(rows: list[dict], columns: list[str] | None = None) -> str:
    """Rows of dicts as an aligned text table (header, rule, one line per row; the first column
    left-aligned, the others right-aligned; no colour, never wrapped: the text goes to logs and
    pipes as well as terminals)."""
    if not rows:
        return "(no rows)"
    columns = columns or list(rows[0])
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="")
    for i, c in enumerate(columns):  # the first column names the row: left-aligned; values right-aligned
        table.add_column(c, justify="left" if i == 0 else "right", no_wrap=True)
    for r in rows:
        table.add_row(*(cell(r.get(c)) for c in columns))
    out = io.StringIO()
    Console(file=out, width=100_000, color_system=None, force_terminal=False, highlight=False).print(table)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines() if line.strip())
