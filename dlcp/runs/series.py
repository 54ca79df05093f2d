"""`dlcp run` and `dlcp sweep`: a series from its request to its comparison, on this machine or a
Dask cluster (docs/runs.md).

    plan and check (series_runner.py) -> the series' directory: new, or the one --resume names ->
    the runs still to do there (resume.py: a run found finished is not run again) -> on a cluster
    (cluster_series.py: with --cluster, or when two or more runs can run at once here) or one
    after the other in this process (series_runner.run_all) -> the comparison of the variants.
"""

from __future__ import annotations

import dataclasses
import shlex
import sys
from pathlib import Path

import dlcp.backends as backends
from dlcp.experiment import config as configmod
from dlcp.runs import machine_lock, privilege, resume, run_dir, signals, transfer
from dlcp.runs.contract import BackendRunner, RunFailed
from dlcp.runs.series_runner import (
    PlannedRun,
    Series,
    SeriesRequest,
    check,
    job_of,
    plan,
    rerun_command,
    run_here,
)


def run_series(request: SeriesRequest) -> Path:
    """Run the series `request` asks for; returns its results directory. Raises ConfigError (before
    anything starts), NeedsRoot, MachineBusy, ClusterError, RunFailed, KeyboardInterrupt or
    signals.Terminated."""
    series = plan(request)
    runner: BackendRunner = backends.implementation(series.backend.name)
    check(series, runner)
    created: list[Path] = []
    if request.resume:
        results = series.results = resumed_results(request.resume)
    with signals.installed():
        if not request.resume:
            results, created = run_dir.new_results(
                request.run_dir, request.out_root or series.base["output"]["dir"], series.base["name"]
            )
            series.results = results
        stop = None
        try:
            outcomes = execute(series, runner, runs_to_do(series))
            signals.raise_pending()  # a stop swallowed after the last run's own checks
        except (KeyboardInterrupt, signals.Terminated) as e:
            stop = e
            if request.command and len(series.runs) > 1 and run_dir.holds_runs(results):
                again = [*request.command, *([] if request.resume else ["--resume", str(results)])]
                print(f"dlcp run: to run what is missing: {shlex.join(again)}", file=sys.stderr)
            raise
        finally:
            with signals.deferred():  # the results handed over (or removed when no run began), whatever comes
                leave_results(results, created, stop)
    failed = [o for o in outcomes if o != "ok"]
    if failed:
        raise RunFailed(
            f"{len(failed)} of {len(outcomes)} runs did not finish (see above); rerun them with --resume {results}"
        )
    if series.request.with_report and len(series.variants) > 1:
        from dlcp.reporting import compare_runs

        compare_runs([results / v for v in series.variants], results, echo=True)
        privilege.hand_over_to_sudo_user(results, created)  # the comparison, written after the runs' hand-over
    return results


def leave_results(results: Path, created: list[Path], stop: BaseException | None) -> None:
    """A series' directory as it ends: handed to the user behind sudo; removed when no run started
    in it (a stop or a failure before the first run), saying so after a stop (a run that started
    says where it stopped itself)."""
    if run_dir.holds_runs(results):
        privilege.hand_over_to_sudo_user(results, created)
        return
    removed = run_dir.remove_unused(results, created)
    if not removed:
        privilege.hand_over_to_sudo_user(results, created)
    if stop is not None:
        what = "interrupted (Ctrl-C)" if signals.status_of(stop) == "interrupted" else "terminated (SIGTERM)"
        print(
            f"dlcp run: {what} before its first run started; everything it started was stopped"
            + (f" and nothing was kept ({results} removed)" if removed else ""),
            file=sys.stderr,
        )


def resumed_results(path: str) -> Path:
    """--resume DIR: a series' directory; ConfigError naming the option otherwise."""
    if not Path(path).is_dir():
        raise configmod.ConfigError(f"--resume {path}: no such directory (a series' results directory)", "--resume")
    return Path(path)


def runs_to_do(series: Series) -> list[PlannedRun]:
    """The runs whose directories do not hold them finished (all of a new series); ConfigError when
    one holds another run (resume.py)."""
    report = series.request.with_report
    return [run for run in series.runs if resume.state(series.run_dir_of(run), run.cfg, report) == "todo"]


def on_cluster(series: Series, todo: list[PlannedRun]) -> bool:
    """Whether the runs go to a Dask cluster: always with --cluster; on this machine when two or
    more can run at once (an emulated run has the machine to itself: its series runs here, one
    run after the other, in this process)."""
    return not series.request.cluster.local or (len(todo) > 1 and series.backend.capabilities.parallel_runs)


def execute(series: Series, runner: BackendRunner, todo: list[PlannedRun], keep_going: bool = False) -> list[str]:
    """Run `todo` of `series` into `series.results` (which exists), on a cluster or here; each
    run's status ("ok" or why not), in order. Here the machine is claimed first for a backend whose
    runs collide (machine_lock.py: MachineBusy), and the first failure ends the series (RunFailed)
    unless `keep_going`; on a cluster every run runs. The caller installs the signal handlers."""
    assert series.results is not None
    skipped = [run.label for run in series.runs if run not in todo]
    if skipped:
        print(
            f"dlcp run: {len(skipped)} of {len(series.runs)} runs are done in {series.results}; running the "
            f"{len(todo)} missing",
            file=sys.stderr,
        )
    if not todo:
        return []
    if on_cluster(series, todo):
        return run_on_cluster(series, todo)
    with machine_lock.claim(series.backend) as lock:
        if lock is not None:
            lock.note_results(series.results)
        for run in todo:  # a resumed series' unfinished run: run again from nothing
            if series.run_dir_of(run).exists():
                transfer.discard(series.run_dir_of(run), series.results)
        transfer.remove_staging(series.results)
        return run_here(series, runner, todo, keep_going)


def run_on_cluster(series: Series, todo: list[PlannedRun]) -> list[str]:
    """`todo` as tasks on the cluster the request names (a local one by default)."""
    from dlcp.runs import cluster
    from dlcp.runs.cluster_series import ClusterJob, run_jobs

    assert series.results is not None
    results = series.results = series.results.absolute()  # the workers' paths, whatever their directory
    jobs = [
        ClusterJob(i, dataclasses.replace(job, run_dir=job.run_dir.absolute()), rerun_command(series, run))
        for i, run in enumerate(series.runs)
        if any(run is t for t in todo)
        for job in [job_of(series, run)]
    ]
    with cluster.connect(series.request.cluster, series.backend, len(todo)) as engine:
        results.mkdir(parents=True, exist_ok=True)
        try:
            labels = [run.label for run in series.runs]
            outcomes = run_jobs(engine, series.backend, jobs, results, series.base["name"], labels)
        finally:
            transfer.remove_staging(results)
    return [o.status for o in outcomes]
