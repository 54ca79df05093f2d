"""`dlcp bench switch` runs end to end (briefly) and ends with its JSON object."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def test_bench_switch_json_last_line():
    p = subprocess.run(
        [sys.executable, "-m", "dlcp_cli", "bench", "switch", "--seconds", "0.5", "--warmup", "0.2", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    assert set(result) >= {"ref_kpps", "bridge_kpps", "bmv2_kpps", "frame_bytes"} and result["frame_bytes"] == 1442
    # both forwarded for real
    assert result["ref_kpps"] > 1 and result["bridge_kpps"] > 1, f"{p.stdout}\n{p.stderr}"
    assert "linux bridge" in p.stdout and "built-in switch" in p.stdout  # the readable table came first


def test_bench_switch_refuses_a_machine_a_run_holds(tmp_path):
    # a bench measures the machine: it takes the run lock as a Mininet series does, and says who has it
    from dlcp.runs import machine_lock

    lock = tmp_path / "run.lock"
    with machine_lock.held("a test's series", lock):
        p = subprocess.run(
            [sys.executable, "-m", "dlcp_cli", "bench", "switch", "--seconds", "0.5", "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "DLCP_RUN_LOCK": str(lock)},
        )
    assert p.returncode == 1 and p.stdout == "", p.stderr
    assert (
        p.stderr.startswith("dlcp bench switch: another run has this machine (pid ") and "a test's series" in p.stderr
    )
    assert len(p.stderr.strip().splitlines()) == 1
