"""A series' runs as tasks on a Dask cluster (docs/runs.md, "On a cluster"): one task per run
(tasks.py), submitted in the series' order (Dask starts them in that order as workers free up),
each run's directory installed whole at its place in the results as it comes home (transfer.py),
and where the series stands on the terminal (board.py).

A run that fails is reported with its worker's error and the command that reruns it on this
machine; the others go on. A worker lost mid-run (killed, its machine gone) has its run started
again on another worker by Dask (`distributed.scheduler.allowed-failures` times), and the final
table says so. Ctrl-C or SIGTERM stops the series: no run starts any more, the running ones get
the signal on their workers and come home as stopped runs with their partial reports, as on one
machine.
"""

from __future__ import annotations

import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import dlcp.backends as backends
from dlcp.runs import signals, transfer
from dlcp.runs.board import Board
from dlcp.runs.cluster import Engine, resources
from dlcp.runs.series_runner import RunJob, interrupted_message
from dlcp.runs.tasks import TOPIC, RunOutcome, RunTask, run_task, stop_runs

STOP_GRACE_S = 60.0  # for the stopped runs to write their partial reports and come home
TICK_S = 1.0


@dataclass(frozen=True)
class ClusterJob:
    index: int  # the run's position in its series
    job: RunJob
    rerun: str  # the command that runs it on this machine, for its error message


def run_jobs(
    engine: Engine, backend: backends.Backend, jobs: list[ClusterJob], results: Path, name: str, labels: list[str]
) -> list[RunOutcome]:
    """Run `jobs` on the cluster into `results`; how each ended, in the series' order (`labels`:
    every run of the series, those not in `jobs` found finished before). Raises KeyboardInterrupt
    or signals.Terminated after a stop, once the stopped runs are home."""
    from distributed import wait

    client = engine.client
    token = uuid.uuid4().hex
    board = Board(token, labels, set(range(len(labels))) - {j.index for j in jobs})
    client.subscribe_topic(TOPIC, board.on_event)  # type: ignore[attr-defined]
    futures: dict = {}
    outcomes: dict[int, RunOutcome] = {}  # by position in the series
    pending: set = set()
    try:
        for i, cj in enumerate(jobs):
            signals.raise_pending()
            print(
                f"dlcp run: {name} [{cj.job.run.label}] ({i + 1}/{len(jobs)}) on {backend.name} -> {cj.job.run_dir}",
                file=sys.stderr,
            )
            task = RunTask(token, cj.index, cj.job, str(results), engine.shared)
            with signals.held():  # a submitted run is in `pending`, for stop() to cancel or stop
                f = client.submit(  # type: ignore[attr-defined]
                    run_task, task, key=f"dlcp-run-{token[:12]}-{i}", pure=False, resources=resources(backend)
                )
                futures[f] = cj
                pending.add(f)
        print(f"dlcp run: {len(jobs)} run{'s' if len(jobs) > 1 else ''} on {engine.where}", file=sys.stderr)
        while pending:
            signals.raise_pending()
            try:
                done, pending = wait(pending, timeout=TICK_S, return_when="FIRST_COMPLETED")
            except TimeoutError:
                done = set()
            with signals.held():  # a finished run is installed whole; a stop meanwhile comes after
                for f in done:
                    outcomes[futures[f].index] = collect(f, futures[f], results, board)
            board.show()
    except BaseException as e:
        if not signals.is_stop(e):
            raise
        signals.handled()
        with signals.deferred():
            outcomes.update(stop(client, token, pending, futures, results, board, e))
            board.show()
            print(board.table(), file=sys.stderr)
        raise
    finally:
        client.unsubscribe_topic(TOPIC)  # type: ignore[attr-defined]
    print(board.table(), file=sys.stderr)
    ordered = [outcomes[cj.index] for cj in jobs]
    for cj, outcome in zip(jobs, ordered):
        if outcome.status != "ok":
            print(failure_message(cj, outcome), file=sys.stderr)
    return ordered


def collect(future, cj: ClusterJob, results: Path, board: Board) -> RunOutcome:
    """A finished task's outcome, its run directory installed in the results."""
    from distributed import KilledWorker

    label = cj.job.run.label
    try:
        outcome = future.result()
    except KilledWorker as e:
        outcome = RunOutcome(label, "lost", "-", "-", None, f"every worker that started it died ({e})")
    except Exception as e:  # noqa: BLE001 - the task itself broke: the run's outcome, the series goes on
        outcome = RunOutcome(label, "error", "-", "-", None, f"{type(e).__name__}: {e}")
    future.release()
    if outcome.archive is not None:
        staged = transfer.staging_dir(results, cj.job.run_dir)
        transfer.unpack(outcome.archive, staged)
        transfer.install(staged, cj.job.run_dir)
    note = (outcome.error or "").strip().splitlines()[-1:] if outcome.status in ("error", "lost") else []
    board.finished(cj.index, outcome.status, outcome.worker, outcome.wall_s, note[0] if note else "")
    return RunOutcome(label, outcome.status, outcome.worker, outcome.host, outcome.wall_s, outcome.error)


def stop(
    client, token: str, pending: set, futures: dict, results: Path, board: Board, exc: BaseException
) -> dict[int, RunOutcome]:
    """After Ctrl-C / SIGTERM: the queued runs are cancelled, the running ones get the signal on
    their workers and come home stopped (with their partial reports) within STOP_GRACE_S; a run
    that starts again after the stop (on a worker that came up since) is cancelled too. Outcomes
    by position in the series."""
    from distributed import wait

    try:
        client.run(stop_runs, token, int(signals.signal_of(exc)))
    except Exception as e:  # noqa: BLE001 - a worker that cannot be reached: its runs are cancelled below
        print(f"dlcp run: could not reach every worker to stop its runs: {e}", file=sys.stderr)
    board.take_events()
    starts = {i: len(r.workers) for i, r in enumerate(board.runs)}
    queued = {f for f in pending if board.runs[futures[f].index].state == "queued"}
    client.cancel(list(queued))
    pending = pending - queued
    out: dict[int, RunOutcome] = {}
    deadline = time.monotonic() + STOP_GRACE_S
    while pending and time.monotonic() < deadline:
        try:
            done, pending = wait(pending, timeout=TICK_S, return_when="FIRST_COMPLETED")
        except TimeoutError:
            done = set()
        for f in done:
            cj = futures[f]
            out[cj.index] = outcome = collect(f, cj, results, board)
            if outcome.status in ("interrupted", "terminated"):
                report = cj.job.run_dir / "report.html"
                print(
                    interrupted_message(cj.job.run_dir, report if report.exists() else None, outcome.status),
                    file=sys.stderr,
                )
        board.take_events()
        again = {f for f in pending if len(board.runs[futures[f].index].workers) > starts[futures[f].index]}
        client.cancel(list(again))
        pending -= again
    client.cancel(list(pending))
    for f in futures:
        index = futures[f].index
        if index not in out and board.runs[index].state in ("queued", "running"):
            board.finished(index, "not started" if board.runs[index].state == "queued" else "stopped", None, None)
    return out


def failure_message(cj: ClusterJob, outcome: RunOutcome) -> str:
    """A run that did not end "ok": where, why (its worker's last lines), how to rerun it here."""
    if outcome.status == "not started":
        return f"dlcp run: [{outcome.label}] not started (the series was stopped)"
    lines = [f"dlcp run: [{outcome.label}] {outcome.status} on worker {outcome.worker} ({outcome.host})"]
    if outcome.error:
        lines += ["  " + line for line in outcome.error.splitlines()]
    if cj.job.run_dir.exists():
        lines.append(f"  run directory: {cj.job.run_dir}")
    lines.append(f"  rerun it on this machine: {cj.rerun}")
    return "\n".join(lines)
