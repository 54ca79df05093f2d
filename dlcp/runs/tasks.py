"""One run as a Dask task, on the worker that takes it (docs/runs.md, "On a cluster").

`run_task` is what the series submits per run. On the worker it runs the series runner's per-run
entry point (`series_runner.run_and_report`: the run, meta.json, its report) in a forked process,
as a series on one machine does: ns-3 is one simulator per process, and a stop must reach a run
as a signal in a main thread, which a Dask worker's task thread is not. A backend whose runs share
a session across forks (`forked_runs`: ns-3 loaded and our C++ compiled) opens it once per worker
process; any other backend opens one per run inside the forked process. What the run prints goes
to its `logs/worker.log`.

The run is written into a staging directory and installed whole (transfer.py): with results the
workers can write (`shared`), beside them and renamed into place on the worker; otherwise in the
worker's own directory, and returned as an archive for the submitting machine to install. Each
start and end is an event on the topic `TOPIC` (the series' progress board), and `stop_runs`
(called on every worker through `Client.run`) passes the series' stop on to its runs.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import platform
import shutil
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import dlcp.backends as backends
from dlcp.exit_status import exit_text
from dlcp.runs import machine_lock, run_dir, signals, transfer
from dlcp.runs.contract import RunFailed, Session
from dlcp.runs.forked import run_forked
from dlcp.runs.progress import Progress
from dlcp.runs.resume import read_meta
from dlcp.runs.series_runner import RunJob, cut_short_message, run_and_report

TOPIC = "dlcp-runs"
ERROR_LINES = 12  # of a failed run's output, brought back with its error
WORKER_LOG = Path("logs") / "worker.log"


@dataclass(frozen=True)
class RunTask:
    """What a worker needs to run one run of a series."""

    series: str  # the series' token: events and stops name it
    index: int  # the run's position in its series: events name it
    job: RunJob  # run_dir: the run's place in the results, as the submitter sees it
    results: str  # the series' results directory
    shared: bool  # the workers can write `results` (the same path on every worker)


@dataclass(frozen=True)
class RunOutcome:
    """How a run ended on its worker."""

    label: str
    status: str  # meta.json's: ok, error, interrupted, terminated; "not started" (stopped before)
    worker: str
    host: str
    wall_s: float | None
    error: str | None = None  # the run's last lines of output when it did not end "ok"
    archive: bytes | None = None  # the run directory, when the workers cannot write the results


# per worker process: the sessions of forked backends, the series stopped, the runs' processes
_sessions: dict[str, Session] = {}
_session_lock = threading.Lock()  # held while a session opens (seconds)
_runs_lock = threading.Lock()  # held briefly: stop_runs runs on the worker's event loop
_stopped: dict[str, int] = {}  # series -> the signal it was stopped by
_running: dict[str, set[int]] = {}  # series -> its runs' processes


def _worker():
    from distributed import get_worker

    return get_worker()


def _event(worker, msg: dict) -> None:
    """An event for the series' board (the scheduler adds the worker's address as "worker")."""
    worker.log_event(TOPIC, msg)


def worker_name(worker) -> str:
    """The worker's name (`dask worker --name`, a local cluster's number), else its address."""
    return str(worker.name) if worker.name is not None and str(worker.name) != worker.address else worker.address


def worker_session(backend: backends.Backend, cfg: dict, where: Path, with_report: bool) -> Session | None:
    """The session this worker process keeps for `backend` (opened on its first run), or None when
    the backend's runs do not share one across processes. The reports' modules (matplotlib, scipy)
    are loaded once here too, for every run forked after."""
    if with_report:
        import dlcp.reporting  # noqa: F401
    if not backend.capabilities.forked_runs:
        return None
    with _session_lock:
        if backend.name not in _sessions:
            runner = backends.implementation(backend.name)
            _sessions[backend.name] = runner.open_session(cfg, where, Progress(sys.stderr))
        return _sessions[backend.name]


def run_task(task: RunTask) -> RunOutcome:
    """Run `task` on this worker; how it ended (a failed run is an outcome, not an exception)."""
    worker = _worker()
    job = task.job
    name, host = worker_name(worker), platform.node()
    label = job.run.label
    if task.series in _stopped:
        return RunOutcome(label, "not started", name, host, None)
    _event(worker, {"series": task.series, "index": task.index, "event": "start", "name": name, "host": host})
    # the workers write the results: stage beside them; else in this worker's own directory
    results = Path(task.results)
    if task.shared:
        staged = transfer.staging_dir(results, job.run_dir)
    else:
        mine = Path(worker.local_directory) / "dlcp" / results.name
        staged = transfer.staging_dir(mine, mine / job.run_dir.relative_to(results))
    started = time.monotonic()
    try:
        outcome = run_staged(task, dataclasses.replace(job, run_dir=staged), name, host)
        if (staged / "meta.json").exists():  # a run began: it comes home, finished or not
            if task.shared:
                transfer.install(staged, job.run_dir)
            else:
                outcome = dataclasses.replace(outcome, archive=transfer.pack(staged))
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    _event(
        worker,
        {
            "series": task.series,
            "index": task.index,
            "event": "end",
            "name": name,
            "status": outcome.status,
            "wall_s": round(time.monotonic() - started, 3),
        },
    )
    return outcome


def run_staged(task: RunTask, job: RunJob, name: str, host: str) -> RunOutcome:
    """The run into `job.run_dir` (its staging directory) in a forked process."""
    backend, cfg = job.backend, job.run.cfg
    try:
        session = worker_session(backend, cfg, Path(_worker().local_directory), job.with_report)
    except RunFailed as e:
        return RunOutcome(job.run.label, "error", name, host, None, f"worker {name} ({host}): {e}")
    log = job.run_dir / WORKER_LOG
    log.parent.mkdir(parents=True, exist_ok=True)

    def child() -> int:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        gc.callbacks.clear()  # the worker's (distributed's diagnostics): a signal landing in one is lost
        # new stream objects: the worker's own may have been locked by another thread at the fork
        sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        progress = Progress(sys.stderr)
        own: Session | None = None
        try:
            with machine_lock.claim(backend):  # an emulated run has the machine to itself
                if session is not None:
                    run_and_report(job, session, progress)
                else:  # a session of its own, in the run's directory (its logs/)
                    own = backends.implementation(backend.name).open_session(cfg, job.run_dir, progress)
                    run_and_report(job, own, progress)
        except (RunFailed, machine_lock.MachineBusy) as e:
            print(f"dlcp run: failed: {e}", file=sys.stderr)
            return 1
        except (KeyboardInterrupt, signals.Terminated) as e:
            return signals.exit_code(e)
        finally:
            if own is not None:
                with signals.deferred():
                    own.close()
        return 0

    pids: list[int] = []

    def started(pid: int) -> None:
        """The run's process is there: registered for stop_runs, or stopped now when the series was
        stopped since the check above."""
        pids.append(pid)
        with _runs_lock:
            _running.setdefault(task.series, set()).add(pid)
            if task.series in _stopped:
                os.kill(pid, _stopped[task.series])

    if task.series in _stopped:  # stopped while the session opened
        return RunOutcome(job.run.label, "not started", name, host, None)
    try:
        code = run_forked(child, started)
    finally:
        with _runs_lock:
            for pid in pids:
                _running.get(task.series, set()).discard(pid)
    meta = read_meta(job.run_dir)
    if meta is None and task.series in _stopped:  # stopped before the run began
        return RunOutcome(job.run.label, "not started", name, host, None)
    cut_short: str | None = None
    if code < 0 and meta is not None:  # killed: the run could write neither meta.json's end nor its report
        why = f"the process of run {job.run.label} (pid {pids[0]}) {exit_text(code)}"
        run_dir.end_meta_for(job.run_dir, why)
        cut_short = cut_short_message(job, Progress(sys.stderr), why, task.job.run_dir)
        meta = read_meta(job.run_dir)
    status = ended(code, (meta or {}).get("status"))
    error = None
    if status != "ok":
        error = "\n".join(filter(None, [cut_short or (f"its process {exit_text(code)}" if code else None), tail(log)]))
    return RunOutcome(job.run.label, status, name, host, (meta or {}).get("wall_s"), error)


def ended(code: int, status: str | None) -> str:
    """How a run ended, from its process's exit code and meta.json's status: "ok" only when both
    say so (a stop in its report leaves meta.json "ok" and the report unfinished)."""
    if code == 0 and status:
        return status
    if code in (signals.exit_code(KeyboardInterrupt()), signals.exit_code(signals.Terminated())):
        return signals.status_of(signals.stop_for(code))
    return "error"


def tail(path: Path, lines: int = ERROR_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def stop_runs(series: str, signum: int) -> int:
    """On a worker (`Client.run`): no new run of `series` starts here, and its running runs get
    `signum` (SIGINT or SIGTERM: they stop as a run on one machine does, partial report and all).
    How many were signalled."""
    with _runs_lock:
        _stopped[series] = signum
        pids = list(_running.get(series, ()))
        for pid in pids:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass
    return len(pids)
