"""The ns-3 backend's one-line errors where ns-3 itself is not needed: a bad runtime file is refused
before ns-3 loads, and a run without the sim extra (or the transport core) says what is missing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dlcp.network.runtime_file import RuntimeFileError
from simulation.ns3.loader import available
from simulation.ns3.simulated_switch import Ns3Switch

ROOT = Path(__file__).resolve().parents[2]


def test_a_bad_runtime_fails_in_one_line_before_ns3_loads():
    doc = {
        "switch": "s1",
        "device_id": 1,
        "table_entries": [{"table": "DlcpIngress.nope", "action_name": "x"}],
        "ports": [],
    }
    with pytest.raises(RuntimeFileError) as e:
        Ns3Switch(doc, source="s1-runtime.json")
    assert str(e.value).startswith("s1-runtime.json: table_entries[0]: unknown table 'DlcpIngress.nope'")
    assert "\n" not in str(e.value)


def test_run_without_what_ns3_needs_is_a_one_line_error(tmp_path):
    """Without the sim extra (or, with it, without the transport core) `dlcp run` says what is
    missing in one line and exits 1."""
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "dlcp_cli",
            "run",
            "experiments/ps-incast.toml",
            "--set",
            "backend=ns3",
            "--set",
            "workload.iterations=1",
            "--run-dir",
            str(tmp_path / "r"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    from simulation.ns3.hosts import core_missing

    missing = available() or core_missing()
    if missing is None:
        pytest.skip("ns-3 and the transport core are both here: the run itself is tested elsewhere")
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("dlcp run: failed")]
    assert p.returncode == 1 and lines == [f"dlcp run: failed: {missing}"], p.stderr
