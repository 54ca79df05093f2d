"""How every `dlcp bench` prints: a readable table, then (with `--json`) one JSON object as the
last line. The benchmarks themselves live beside what they measure; dlcp_cli/benches.py lists them.
"""

from __future__ import annotations

import json

from dlcp.tables import format_table


def emit(title: str, rows: list[dict], result: dict, as_json: bool) -> None:
    """Print a titled table, then (with --json) the result object as the last line."""
    print(title)
    print(format_table(rows))
    if as_json:
        print(json.dumps(result, sort_keys=False))
