"""Emulated runs on a Dask cluster (docs/runs.md, "On a cluster"): they go only to the worker
that offers the `emulation` resource (root, Mininet, one emulated run per machine), each run in a
process of its own with its own fork server, and come home whole; the machine is clean after."""

from __future__ import annotations

import json
import re
import subprocess

from dask_processes import DaskProcesses
from emulated_runs import DLCP, ROOT, clean_machine, write_config  # noqa: F401 (clean_machine: autouse)


def test_emulated_runs_go_to_the_worker_that_offers_emulation(tmp_path):
    cfg = write_config(tmp_path, iterations=4, model="synthetic")
    cluster = DaskProcesses(tmp_path, ["plain"])
    try:
        cluster.start_worker("root1", ("--resources", "emulation=1"))
        cluster.wait_for_workers(2)
        p = subprocess.run(
            [*DLCP, "run", str(cfg), "--policies", "fifo,dlcp", "--cluster", cluster.address]
            + ["--out", str(tmp_path / "out")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,
        )
    finally:
        cluster.close()
    assert p.returncode == 0, p.stderr[-3000:]
    for run in ("fifo", "dlcp"):
        assert re.search(rf"^{run}\s+ok\s+root1\s+1\s", p.stderr, re.M), p.stderr[-3000:]
    (results,) = (tmp_path / "out").iterdir()
    for run in ("fifo", "dlcp"):
        meta = json.loads((results / run / "meta.json").read_text())
        assert meta["status"] == "ok" and meta["backend"] == "builtin" and "s1" in meta["switch_cpu"]
        assert (results / run / "report.html").exists() and (results / run / "logs" / "forkserver.log").exists()
    assert json.loads((results / "compare.json").read_text())["baseline"] == "fifo"
    assert sorted(p.name for p in results.iterdir() if p.name.startswith(".")) == []
