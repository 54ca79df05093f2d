"""A series of ns-3 runs as Slurm jobs (`--cluster slurm`, dask-jobqueue) on a single-node Slurm
brought up in the test's directory (tests/support/slurm_node.py; Debian's slurm-wlm): two worker
jobs take the runs, the results are written by the workers themselves (`--shared-results`), and
no job is left when the series ends. Skipped where slurm-wlm or the sim extra is missing."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from slurm_node import missing, slurm_node

from simulation.ns3.hosts import core_missing

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.skipif(missing() is not None, reason=str(missing())),
    pytest.mark.skipif(core_missing() is not None, reason=str(core_missing())),
    pytest.mark.slow,
]

PS = """
name = "tiny-ps"
backend = "ns3"
timeout_s = 20
[topology]
hosts = 4
[workload]
mode = "ps"
workers = 2
model = "synthetic"
iterations = 2
"""

JOBQUEUE = """
jobqueue:
  slurm:
    queue: debug
    cores: 1
    processes: 1
    memory: 900MB
    walltime: "00:20:00"
    python: {python}
    log-directory: {logs}
    job-script-prologue:
      - export PYTHONPATH={root}
"""


def test_a_series_runs_as_slurm_jobs(tmp_path):
    cfg = tmp_path / "ps.toml"
    cfg.write_text(PS)
    settings = tmp_path / "jobqueue.yaml"
    settings.write_text(JOBQUEUE.format(python=sys.executable, logs=tmp_path / "job-logs", root=ROOT))
    with slurm_node(tmp_path / "slurm") as env:
        p = subprocess.run(
            [sys.executable, "-m", "dlcp_cli", "run", str(cfg), "--policies", "fifo,dlcp", "--no-report"]
            + ["--cluster", "slurm", "--cluster-config", str(settings), "--jobs", "2", "--shared-results"]
            + ["--out", str(tmp_path / "out")],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        left = subprocess.run(["squeue", "-h"], capture_output=True, text=True, env=env).stdout
    assert p.returncode == 0, p.stderr[-3000:]
    assert "dlcp run: 2 runs on Slurm" in p.stderr
    for run in ("fifo", "dlcp"):
        assert re.search(rf"^{run}\s+ok\s+SLURMCluster-\d+\s+1\s", p.stderr, re.M), p.stderr[-3000:]
    (results,) = (tmp_path / "out").iterdir()
    for run in ("fifo", "dlcp"):
        meta = json.loads((results / run / "meta.json").read_text())
        assert meta["status"] == "ok" and meta["simulation"]["iterations_done"] == 2
    assert sorted(p.name for p in results.iterdir()) == ["dlcp", "fifo"]
    assert left.strip() == ""  # the worker jobs ended with the series
    assert list((tmp_path / "job-logs").glob("*.err"))  # the jobs ran through Slurm
