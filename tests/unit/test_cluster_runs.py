"""The pieces of a series on a cluster that need no simulator (docs/runs.md, "On a cluster"):
what identifies a run and what a resumed series finds done, a run's directory staged and installed
whole, the board's lines and final table, the cluster options' one-line errors, and a real Dask
scheduler and worker (separate processes) refusing an emulated series in one line when no worker
offers what its runs need."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dask_processes import DaskProcesses

from dlcp.experiment import config as configmod
from dlcp.runs import resume, signals, transfer
from dlcp.runs.board import Board
from dlcp.runs.cluster import ClusterOptions, check_options
from dlcp.runs.series_runner import SeriesRequest, plan, rerun_command
from dlcp.settings import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def cfg(**over) -> dict:
    raw = {"name": "r", "backend": "ns3", "topology": {"hosts": 4}, "workload": {"workers": 2}}
    for k, v in over.items():
        configmod.apply_override(raw, f"{k}={v}")
    return configmod.validate(raw)


def test_a_run_is_its_config_and_seed_not_where_its_results_go():
    base = resume.run_id(cfg())
    assert base == resume.run_id(cfg()) and len(base) == 20
    assert resume.run_id(cfg(seed=2)) != base
    assert resume.run_id(cfg(**{"dlcp.policy": '"fifo"'})) != base
    assert resume.run_id(cfg(**{"output.dir": '"elsewhere"'})) == base


def write_run(path: Path, c: dict, status: str, report: bool = True) -> None:
    path.mkdir(parents=True)
    (path / "config.toml").write_text(configmod.dumps(c))
    (path / "meta.json").write_text(json.dumps({"run_id": resume.run_id(c), "status": status}))
    if report:
        (path / "report.html").write_text("<html></html>")


def test_what_a_resumed_series_finds_done(tmp_path):
    c = cfg()
    assert resume.state(tmp_path / "absent", c, True) == "todo"
    write_run(tmp_path / "ok", c, "ok")
    assert resume.state(tmp_path / "ok", c, True) == "done"
    write_run(tmp_path / "stopped", c, "interrupted")
    assert resume.state(tmp_path / "stopped", c, True) == "todo"
    write_run(tmp_path / "unreported", c, "ok", report=False)  # stopped while writing its report
    assert resume.state(tmp_path / "unreported", c, True) == "todo"
    assert resume.state(tmp_path / "unreported", c, False) == "done"  # a series without reports


def test_a_directory_holding_another_run_is_refused_naming_the_key(tmp_path):
    write_run(tmp_path / "run", cfg(seed=2), "ok")
    with pytest.raises(ConfigError) as e:
        resume.state(tmp_path / "run", cfg(), True)
    assert "holds another run (seed = 2 there, 1 here)" in str(e.value) and "\n" not in str(e.value)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="holds something other than a run"):
        resume.state(tmp_path / "junk", cfg(), True)


def test_a_run_travels_as_an_archive_and_replaces_an_unfinished_one_whole(tmp_path):
    run = tmp_path / "worker" / "run"
    (run / "records").mkdir(parents=True)
    (run / "records" / "h1-messages.csv").write_text("a,b\n1,2\n")
    (run / "meta.json").write_text('{"status": "ok"}')
    data = transfer.pack(run)
    results = tmp_path / "results"
    dest = results / "fifo" / "rep1"
    write_run(dest, cfg(), "interrupted")  # the partial run a stop left
    staged = transfer.staging_dir(results, dest)
    assert staged.parent == results / ".staging" and staged.name.startswith("fifo_rep1-")
    transfer.unpack(data, staged)
    transfer.install(staged, dest)
    assert (dest / "records" / "h1-messages.csv").read_text() == "a,b\n1,2\n"
    assert json.loads((dest / "meta.json").read_text()) == {"status": "ok"}
    assert not (dest / "report.html").exists()  # the old run is gone, not merged
    assert not list((results / ".staging").iterdir())
    transfer.remove_staging(results)
    assert sorted(p.name for p in results.iterdir()) == ["fifo"]
    one = tmp_path / "one"  # a series that is one run (--run-dir): staged beside it
    assert transfer.staging_dir(one, one).parent == tmp_path / ".one.staging"
    transfer.remove_staging(one)
    assert not (tmp_path / ".one.staging").exists()


def test_the_board_says_where_runs_are_and_which_were_retried():
    board = Board("s", ["a", "b", "c"], {2})
    assert board.line() == "runs: 1 done, 0 running, 2 queued"
    for index, worker in ((0, "w1"), (1, "w2"), (0, "w2")):
        board.on_event((0.0, {"series": "s", "index": index, "event": "start", "name": worker}))
    board.on_event((0.0, {"series": "another series", "index": 1, "event": "start", "name": "w9"}))
    board.on_event((0.0, {"series": "s", "index": 1, "event": "end", "name": "w9"}))
    board.take_events()
    assert board.line() == "runs: 1 done, 2 running, 0 queued; worker w2: 0 done, running [b]"
    board.finished(0, "ok", "w2", 1.5)
    board.finished(1, "error", "w2", None, "boom")
    rows = {r["run"]: r for r in board.rows()}
    assert rows["a"] == {
        "run": "a",
        "status": "ok",
        "worker": "w2",
        "starts": 2,
        "wall_s": 1.5,
        "note": "retried: worker w1 lost while running it",
    }
    assert rows["b"]["note"] == "boom" and rows["c"]["status"] == "done before"
    assert board.line() == "runs: 3 done, 0 running, 0 queued; worker w2: 2 done"


@pytest.mark.parametrize(
    "options, message",
    [
        (ClusterOptions(jobs=0), "--jobs 0: must be >= 1"),
        (ClusterOptions("host:8786"), "--cluster host:8786: expected tcp://HOST:PORT"),
        (ClusterOptions("tcp://h:1", config="x.yaml"), "--cluster-config: only with --cluster slurm"),
        (ClusterOptions("slurm", config="/nonexistent.yaml"), "--cluster-config /nonexistent.yaml: no such file"),
    ],
)
def test_cluster_options_are_refused_in_one_line(options, message):
    with pytest.raises(ConfigError, match=message.replace("+", r"\+")):
        check_options(options)


def test_the_command_that_reruns_a_run_here(tmp_path):
    path = tmp_path / "r.toml"
    path.write_text('name = "r"\nbackend = "ns3"\n[topology]\nhosts = 4\n[workload]\nworkers = 2\n')
    series = plan(SeriesRequest(str(path), ["links.mtu=9000"], vary=["seed=1,5"], repeat=2, out_root="o"))
    assert [rerun_command(series, r).split(str(path))[1] for r in series.runs] == [
        " --set links.mtu=9000 --set seed=1 --out o",
        " --set links.mtu=9000 --set seed=5 --out o",
        " --set links.mtu=9000 --set seed=1 --set seed=2 --out o",
        " --set links.mtu=9000 --set seed=5 --set seed=6 --out o",
    ]
    assert [r.cfg["seed"] for r in series.runs] == [1, 5, 2, 6]


def test_an_emulated_series_is_refused_where_no_worker_offers_emulation(tmp_path):
    """A running scheduler whose one worker offers no `emulation` resource: refused in one line,
    exit 1, before a results directory is made."""
    exp = tmp_path / "emu.toml"
    exp.write_text('name = "emu"\nbackend = "builtin"\n[workload]\nmodel = "synthetic"\n')
    cluster = DaskProcesses(tmp_path, ["plain"])
    try:
        p = subprocess.run(
            [sys.executable, "-m", "dlcp_cli", "run", str(exp), "--policies", "fifo,dlcp"]
            + ["--cluster", cluster.address, "--out", str(tmp_path / "out")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        cluster.close()
    assert p.returncode == 1, p.stderr
    assert p.stderr.strip() == (
        f"dlcp run: {cluster.address}: no worker offers the resource emulation=1 that backend builtin's runs "
        "need (a root worker with Mininet, the machine to itself: dask worker ADDRESS --nthreads 1 "
        "--resources emulation=1, as root, one per machine)"
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("sig, stop", [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, signals.Terminated)])
def test_a_stop_while_a_finished_run_is_put_in_place_comes_after_it(sig, stop):
    """signals.held (cluster_series: a finished run installed whole): a real signal inside lets the
    step finish, then raises its stop; `deferred` would have dropped it (the series ran on)."""
    finished = []
    with signals.installed(), pytest.raises(stop), signals.held():
        os.kill(os.getpid(), sig)
        time.sleep(0.05)
        finished.append(True)
    assert finished == [True]
    with signals.installed(), signals.held():
        pass  # no signal: nothing raised


def test_a_local_worker_drops_only_the_heartbeat_that_found_the_scheduler_gone(caplog):
    """The local workers' filter (installed by their preload) drops Dask's record of a failed
    heartbeat, logged as distributed/worker.py logs it, and keeps the worker's other errors."""
    import inspect

    from distributed.comm.core import CommClosedError
    from distributed.worker import Worker

    from dlcp.runs.local_worker import HEARTBEAT_FAILED, NoHeartbeatFailure

    assert repr(HEARTBEAT_FAILED) in inspect.getsource(Worker.heartbeat).replace('"', "'")  # Dask's own words

    log = logging.getLogger("distributed.worker")
    quiet = NoHeartbeatFailure()
    log.addFilter(quiet)
    try:
        with caplog.at_level(logging.ERROR, logger="distributed.worker"):
            try:
                raise CommClosedError("in <TCP (closed) ConnectionPool.heartbeat_worker>: Stream is closed")
            except OSError:
                log.exception(HEARTBEAT_FAILED)
                log.exception("Unexpected exception during heartbeat. Closing worker.")
    finally:
        log.removeFilter(quiet)
    assert [r.getMessage() for r in caplog.records] == ["Unexpected exception during heartbeat. Closing worker."]
