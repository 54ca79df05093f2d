"""House rules: `dlcp/` stays importable without root, Mininet, bmv2 or the other top-level
packages; every bench prints its JSON on the last line."""

import ast
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
FORBIDDEN = {"mininet", "emulation", "agents", "p4runtime_sh", "bm_runtime", "sswitch_runtime"}


def imported_modules(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_dlcp_imports_nothing_that_needs_root():
    offenders = {str(p.relative_to(ROOT)): sorted(imported_modules(p) & FORBIDDEN)
                 for p in (ROOT / "dlcp").rglob("*.py") if imported_modules(p) & FORBIDDEN}
    assert not offenders, offenders


def test_bench_tagging_json_last_line():
    out = subprocess.run([sys.executable, "-m", "dlcp.cli", "bench", "tagging", "--values", "100000",
                          "--repeats", "1", "--json"], capture_output=True, text=True, check=True).stdout
    lines = out.strip().splitlines()
    result = json.loads(lines[-1])
    assert result["values"] == 100000 and result["seconds"] > 0
    assert "Mvalues_per_s" in out  # the readable table came first


def test_unknown_bench_is_one_line_error():
    p = subprocess.run([sys.executable, "-m", "dlcp.cli", "bench", "nosuch"], capture_output=True, text=True)
    assert p.returncode != 0 and "unknown benchmark 'nosuch'" in p.stderr
