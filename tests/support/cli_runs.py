"""The `dlcp` command line as a user starts it: one experiment run (for the tests of backends that
need no root: ns-3), and a benchmark with its --json figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_experiment(cfg: Path, out: Path, *sets: str, timeout_s: float = 600) -> Path:
    """`dlcp run CFG --set ... --run-dir OUT`; fails the test with the command's stderr unless it
    exits 0. Returns OUT."""
    args = [a for s in sets for a in ("--set", s)]
    p = subprocess.run(
        [sys.executable, "-m", "dlcp_cli", "run", str(cfg), *args, "--run-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return out


def bench_json(name: str, *args: str, timeout_s: float = 300) -> tuple[str, dict]:
    """`dlcp bench NAME ARGS --json`: (its whole output, the figures of its last line); fails the
    test with the command's stderr unless it exits 0."""
    p = subprocess.run(
        [sys.executable, "-m", "dlcp_cli", "bench", name, *args, "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert p.returncode == 0, p.stderr
    return p.stdout, json.loads(p.stdout.strip().splitlines()[-1])
