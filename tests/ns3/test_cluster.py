"""A series of ns-3 runs on Dask (docs/runs.md, "On a cluster"): on a running scheduler with two
workers started as a cluster's machines start them (`dask scheduler`, `dask worker`: separate
processes), one of them killed mid-run; and on this machine's local cluster, stopped with Ctrl-C
and resumed. Both must give the records of the same series run here without interruption,
every run once."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from dask_processes import DaskProcesses, still_running
from ns3_scripts import tiny_ps

from simulation.ns3.hosts import core_missing

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.skipif(core_missing() is not None, reason=str(core_missing())), pytest.mark.slow]

PS = tiny_ps(iterations=4)
SERIES = ("--policies", "fifo,dlcp", "--repeat", "2")
RUNS = ["dlcp/rep1", "dlcp/rep2", "fifo/rep1", "fifo/rep2"]


def dlcp_run(cfg: Path, *args: str, **popen) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "dlcp_cli", "run", str(cfg), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def config(tmp: Path) -> Path:
    path = tmp / "ps.toml"
    path.write_text(PS)
    return path


def records(results: Path) -> dict[str, str]:
    """Every record file of every run of a series, by its path in the series."""
    return {str(p.relative_to(results)): p.read_text() for p in sorted(results.glob("*/rep*/records/*"))}


def assert_every_run_once(results: Path) -> None:
    """The series' four runs, each finished once: nothing staged left, no other directory."""
    metas = sorted(str(p.parent.relative_to(results)) for p in results.rglob("meta.json"))
    assert metas == RUNS
    for run in RUNS:
        meta = json.loads((results / run / "meta.json").read_text())
        assert meta["status"] == "ok" and (results / run / "report.html").exists()
    assert not [p for p in results.iterdir() if p.name.startswith(".")]


@pytest.fixture(scope="module")
def here(tmp_path_factory) -> Path:
    """The series on this machine (its local cluster), uninterrupted."""
    tmp = tmp_path_factory.mktemp("here")
    p = dlcp_run(config(tmp), *SERIES, "--out", str(tmp / "out"))
    _, err = p.communicate(timeout=900)
    assert p.returncode == 0, err[-3000:]
    (results,) = (tmp / "out").iterdir()
    assert_every_run_once(results)
    return results


def wait_for(what, timeout_s: float = 300.0):
    deadline = time.monotonic() + timeout_s
    while not (found := what()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)
    return found


def test_a_running_cluster_gives_the_same_records_and_outlives_a_killed_worker(tmp_path, here):
    """`--cluster tcp://...` with workers w1 and w2; w1 (its nanny and worker process) is killed
    while it runs a run: the run starts again on w2, the final table says so, every run lands in
    the results once, the killed run's process died with its worker, and the records are those
    of the series run here."""
    cluster = DaskProcesses(tmp_path, ["w1", "w2"])
    p = None
    victims: list[psutil.Process] = []
    lines: list[str] = []
    try:
        p = dlcp_run(config(tmp_path), *SERIES, "--cluster", cluster.address, "--out", str(tmp_path / "out"))
        assert p.stderr is not None
        for line in p.stderr:
            lines.append(line)
            if not victims and re.search(r"worker w1: \d+ done, running \[", line):
                # its run has begun: meta.json is in its staging directory, in w1's own directory
                wait_for(lambda: list((tmp_path / "worker-w1").rglob(".staging/*/meta.json")))
                victims = cluster.descendants("w1")
                cluster.kill("w1")
        p.wait(timeout=900)
    finally:
        if p is not None and p.poll() is None:
            p.kill()
        cluster.close()
    err = "".join(lines)
    assert p.returncode == 0, err[-3000:]
    assert len(victims) >= 3, victims  # the nanny, its worker process, the run's process
    assert not still_running(victims)
    (retried,) = re.findall(r"dlcp run: \[(.+?)\] started again on worker w2: worker w1 was lost while running it", err)
    assert re.search(rf"{re.escape(retried)}\s+ok\s+w2\s+2\s+\S+\s+retried: worker w1 lost while running it", err), err
    (results,) = (tmp_path / "out").iterdir()
    assert_every_run_once(results)
    assert records(results) == records(here)
    assert len(records(here)) >= 4 * 5  # each run: iterations and messages of two workers and the PS


def test_ctrl_c_then_resume_runs_only_what_is_missing(tmp_path, here):
    """Ctrl-C (to the series' process group, as a terminal sends it) once a run has finished: exit
    130, no process left, the command to resume printed; resumed, the finished runs are kept as
    they are and only the others run; the records are those of the series run here."""
    cfg = config(tmp_path)
    out = tmp_path / "out"
    p = dlcp_run(cfg, *SERIES, "--out", str(out), start_new_session=True)

    def finished() -> list[Path]:
        found = []
        for meta in out.glob("*/*/rep*/meta.json"):
            try:
                if json.loads(meta.read_text())["status"] == "ok":
                    found.append(meta.parent)
            except (OSError, ValueError, KeyError):
                pass
        return found

    try:
        wait_for(lambda: finished() or p.poll() is not None, 900)
        assert p.poll() is None, p.communicate()[1][-3000:]
        procs = [psutil.Process(p.pid), *psutil.Process(p.pid).children(recursive=True)]
        os.killpg(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err[-3000:]
    assert not still_running(procs)
    (results,) = out.iterdir()
    done = {str(d.relative_to(results)): d / "meta.json" for d in finished() if (d / "report.html").exists()}
    assert 1 <= len(done) < 4, done
    kept = {run: (meta.stat().st_ino, meta.stat().st_mtime_ns) for run, meta in done.items()}
    (hint,) = [ln for ln in err.splitlines() if ln.startswith("dlcp run: to run what is missing: ")]
    again = shlex.split(hint.split(": ", 2)[2])
    assert again[:2] == ["dlcp", "run"] and again[-2:] == ["--resume", str(results)]

    p = subprocess.run(
        [sys.executable, "-m", "dlcp_cli", *again[1:]], cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert p.returncode == 0, p.stderr[-3000:]
    missing = 4 - len(done)
    assert f"{len(done)} of 4 runs are done in {results}; running the {missing} missing" in p.stderr
    assert len(re.findall(r"^dlcp run: tiny-ps \[", p.stderr, re.M)) == missing  # the runs it started
    assert p.stderr.count("done before") == len(done)
    assert {run: (m.stat().st_ino, m.stat().st_mtime_ns) for run, m in done.items()} == kept
    assert_every_run_once(results)
    assert records(results) == records(here)
    assert (results / "compare.json").exists()


def test_sigterm_to_the_process_group_stops_the_runs_without_losing_the_local_workers(tmp_path):
    """`kill -TERM -PGID` (a batch system's or a supervisor's stop) reaches the local Dask workers
    too: they ignore it, so the running runs are stopped by the series (terminated, partial report)
    instead of dying with their worker and starting again elsewhere."""
    cfg = tmp_path / "ps.toml"
    cfg.write_text(tiny_ps(iterations=400))  # long enough to be mid-run when the signal comes
    out = tmp_path / "out"
    p = dlcp_run(cfg, *SERIES, "--out", str(out), start_new_session=True)
    lines: list[str] = []
    try:
        assert p.stderr is not None
        for line in p.stderr:
            lines.append(line)
            if re.search(r"runs: 0 done, 2 running", line):
                wait_for(lambda: len(list(out.rglob(".staging/*/meta.json"))) == 2)  # both runs have begun
                procs = [psutil.Process(p.pid), *psutil.Process(p.pid).children(recursive=True)]
                os.killpg(p.pid, signal.SIGTERM)
                break
        lines += p.stderr.readlines()
        p.wait(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
    err = "".join(lines)
    assert p.returncode == 143, err[-3000:]
    assert not still_running(procs)
    assert "started again" not in err and "CommClosedError" not in err and "retried" not in err, err[-3000:]
    stopped = re.findall(r"^(\w+ rep 1, seed 1)\s+terminated\s+\d\s+1\s", err, re.M)
    assert sorted(stopped) == ["dlcp rep 1, seed 1", "fifo rep 1, seed 1"], err[-3000:]
    assert len(re.findall(r"^\w+ rep 2, seed 2\s+not started", err, re.M)) == 2, err[-3000:]
    (results,) = out.iterdir()
    for policy in ("dlcp", "fifo"):
        meta = json.loads((results / policy / "rep1" / "meta.json").read_text())
        assert meta["status"] == "terminated" and (results / policy / "rep1" / "report.html").exists()


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_while_the_local_cluster_starts_stops_the_series(tmp_path, sig, code):
    """A stop that lands while the local workers start (their processes are there) is not dropped:
    the series ends with its exit code and runs nothing to the end."""
    out = tmp_path / "out"
    p = dlcp_run(config(tmp_path), *SERIES, "--out", str(out), start_new_session=True)
    try:
        wait_for(lambda: len(psutil.Process(p.pid).children()) >= 2 or p.poll() is not None, 120)
        os.kill(p.pid, sig)
        _, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == code, err[-3000:]
    assert not re.search(r"^\w+ rep \d, seed \d\s+ok\s", err, re.M), err[-3000:]
