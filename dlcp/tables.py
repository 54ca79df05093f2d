"""Plain-text tables for the terminal (benchmarks, comparisons)."""

from __future__ import annotations


def format_table(rows: list[dict], columns: list[str] | None = None) -> str:
    """Rows of dicts as an aligned text table; floats get 4 significant digits."""
    if not rows:
        return "(no rows)"
    columns = columns or list(rows[0])

    def cell(v) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v)

    body = [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(b[i]) for b in body)) for i, c in enumerate(columns)]
    line = lambda cells: "  ".join(s.rjust(w) for s, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(columns), line(["-" * w for w in widths]), *map(line, body)])
