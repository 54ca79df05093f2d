"""`dlcp run`: a series of runs of one experiment, on any backend (dlcp/backends.py), through the
backend contract (contract.py).

    plan: the variants of --vary / --policies, --repeat pairs, names -> every check before anything
    starts (config, the backend's view of it, compute, root) -> the backend's session (its tools,
    what its runs share) -> per run: run directory, config.toml, topology.json, runtime/,
    meta.json -> the backend runs it (in a process of its own where it asks for one) -> meta.json's
    end -> its report (a partial one when stopped) -> the comparison of the variants.

Results go to results/<UTC time>-<name>/<variant>/ (docs/runs.md); variants of `--vary key=a,b`
(and `--policies`, which varies dlcp.policy) share the topology and seed and are compared at the
end. With `--repeat N` the variants run as interleaved pairs a1 b1 a2 b2 ... (seed + i - 1 for pair
i, the same within a pair) into <variant>/rep<i>/, and the comparison is over pairs, with
confidence intervals (docs/reports.md). On a wall-clock backend `scale.dilation` D runs the network
and the agents D times slower than the config says (dlcp/experiment/dilation.py); config.toml
keeps what the user wrote.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import dlcp.backends as backends
from dlcp.exit_status import exit_text
from dlcp.experiment import config as configmod
from dlcp.experiment import dilation as dilationmod
from dlcp.experiment import run_inputs
from dlcp.network import topology as topospec
from dlcp.runs import machine_lock, naming, privilege, run_dir, signals
from dlcp.runs.contract import BackendRunner, RunContext, RunCutShort, RunFailed, Session
from dlcp.runs.forked import run_forked
from dlcp.runs.progress import Progress, iterations_done


class NeedsRoot(RuntimeError):
    """The backend needs root's powers and this process has not got them; one line."""


@dataclass(frozen=True)
class SeriesRequest:
    """What `dlcp run` was asked."""

    config: str
    overrides: list[str] = field(default_factory=list)  # --set KEY=VALUE
    policies: list[str] | None = None  # --policies P1,P2 = --vary dlcp.policy=P1,P2
    vary: list[str] = field(default_factory=list)  # --vary KEY=V1,V2
    repeat: int = 1
    name: str | None = None
    out_root: str | None = None  # --out; default: the config's output.dir
    run_dir: str | None = None  # --run-dir: the one run's directory itself (dlcp sweep)
    with_report: bool = True


@dataclass(frozen=True)
class PlannedRun:
    variant: str
    rep: int  # 0 = not repeated
    cfg: dict

    @property
    def label(self) -> str:
        return naming.run_label(self.variant, self.rep, self.cfg["seed"])


@dataclass
class Series:
    request: SeriesRequest
    base: dict  # the resolved config without --vary
    backend: backends.Backend
    runs: list[PlannedRun]
    results: Path | None = None  # the series' directory, once chosen

    def run_dir_of(self, run: PlannedRun) -> Path:
        assert self.results is not None
        return self.results if self.request.run_dir else naming.run_dir_of(self.results, run.variant, run.rep)

    @property
    def variants(self) -> list[str]:
        return list(dict.fromkeys(r.variant for r in self.runs))


# --- before anything starts ----------------------------------------------------------------------


def plan(request: SeriesRequest) -> Series:
    """The runs of a request, in the order they run, each config resolved and validated; ConfigError
    naming the key or option."""
    naming.check_name(request.name)
    raw = configmod.load_raw(request.config, request.overrides)
    base = configmod.validate(raw)
    varies = ([configmod.policies_vary(request.policies)] if request.policies else []) + list(request.vary)
    variants = configmod.variants(raw, varies, request.overrides)
    names = naming.variant_names(
        [n for n, _ in variants] if varies else None, base["dlcp"]["policy"], request.overrides, request.name
    )
    runs = [
        PlannedRun(v, rep, cfg)
        for v, rep, cfg in configmod.plan_runs([(n, cfg) for n, (_, cfg) in zip(names, variants)], request.repeat)
    ]
    if request.run_dir and len(runs) > 1:
        raise configmod.ConfigError("--run-dir: takes one run, not --policies / --vary / --repeat with several")
    mixed = sorted({r.cfg["backend"] for r in runs} - {base["backend"]})
    if mixed:
        raise configmod.ConfigError(
            f"backend: a series runs on one backend, not {base['backend']} and {', '.join(mixed)} (one dlcp run each)"
        )
    return Series(request, base, backends.get(base["backend"]), runs)


def run_config(backend: backends.Backend, cfg: dict) -> dict:
    """What the backend runs for `cfg`: on a wall clock the time-dilated system (rates / D, times x
    D), on a simulated clock the system itself (nothing has to keep up with a simulation)."""
    return dilationmod.emulated(cfg) if backend.capabilities.clock == "wall" else cfg


def dilation_of(backend: backends.Backend, cfg: dict) -> float:
    """How many times slower than the system the run goes (meta.json `dilation`)."""
    return dilationmod.dilation(cfg) if backend.capabilities.clock == "wall" else 1.0


def check(series: Series, runner: BackendRunner) -> None:
    """Everything that can be checked before anything starts: each run's topology and roles as the
    backend runs them, the backend's own checks, the compute (profiles, models), root."""
    from dlcp.workloads.profiled import check_workload

    for run in series.runs:
        topospec.from_config(run_config(series.backend, run.cfg))
        runner.check_config(run.cfg)
    try:
        check_workload(configmod.Experiment.parse(series.base).workload)
    except ValueError as e:
        raise configmod.ConfigError(str(e)) from None
    why = series.backend.capabilities.root
    # a bad results root is named before root is asked for (sudo would not mend it); whether the
    # directory can be written is asked only of the user who will write it
    runs_as_is = not why or privilege.privileged()
    run_inputs.check_run_inputs(
        [run.cfg for run in series.runs], series.request.out_root, series.request.run_dir, probe_write=runs_as_is
    )
    if not runs_as_is:
        raise NeedsRoot(f"needs root ({why}); run: sudo dlcp run ...")


# --- one run ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunJob:
    """One run and what it needs from its series: the per-run entry point's argument."""

    backend: backends.Backend
    run: PlannedRun
    run_dir: Path
    overrides: list[str]
    with_report: bool
    figures: bool  # a repeated series' figures are in its comparison


def run_one(job: RunJob, session: Session, progress: Progress) -> None:
    """One run into its run directory: what the runner writes first, the backend's run, meta.json's
    end whatever happens. Raises what the backend raised (RunFailed, a stop)."""
    cfg, backend = job.run.cfg, job.backend
    ran = run_config(backend, cfg)
    spec = topospec.from_config(ran)
    runtimes = spec.runtimes(ran)
    run_dir.create(job.run_dir)
    run_dir.write_inputs(job.run_dir, cfg, spec, runtimes)
    meta = run_dir.start_meta(
        cfg, job.run.variant, backend, session.tools, job.overrides, job.run.rep, dilation_of(backend, cfg)
    )
    run_dir.write_json(job.run_dir / "meta.json", meta)
    started = time.monotonic()
    status, error = "error", None
    try:
        session.run(RunContext(cfg, ran, spec, runtimes, job.run_dir, job.run.variant, meta, progress))
        status = "ok"
    except BaseException as e:
        if signals.is_stop(e):
            status = signals.status_of(e)
        elif isinstance(e, RunFailed):
            error = str(e)
        raise
    finally:
        with signals.deferred():
            run_dir.end_meta(meta, status, started, error)
            run_dir.write_json(job.run_dir / "meta.json", meta)


def run_and_report(job: RunJob, session: Session, progress: Progress) -> None:
    """`run_one`, then its report; stopped by a signal, its partial report and where both are, then
    the same stop again; cut short (a process died, the time ran out), its partial report and
    where both are, in the failure's message."""
    try:
        run_one(job, session, progress)
    except (KeyboardInterrupt, signals.Terminated) as e:
        signals.handled()  # it stops the series here
        signal_report(job, progress, e)
        raise
    except RunCutShort as e:
        raise RunCutShort(cut_short_message(job, progress, str(e))) from e
    if job.with_report:
        progress.phase("writing the report")
        progress.done()
        write_report(job.run_dir, job.figures)


def write_report(path: Path, figures: bool = True) -> None:
    from dlcp.reporting import report_run

    report_run(path, figures=figures)


def signal_report(job: RunJob, progress: Progress, exc: BaseException) -> None:
    """After Ctrl-C or SIGTERM stopped a run: its partial report (when reports are on), and where
    the partial run and report are."""
    signals.install()  # a second signal stops the report, too
    report = write_partial_report(job.run_dir, progress) if job.with_report else None
    print(interrupted_message(job.run_dir, report, signals.status_of(exc)), file=sys.stderr)


def write_partial_report(path: Path, progress: Progress, why: str | None = None) -> Path | None:
    """The report of a run stopped early: what was recorded, marked partial (meta.json status).
    None if even that fails; the records stay either way. `why` it stopped goes on the progress
    line at once (the report takes seconds)."""
    progress.phase(f"{why}; writing the partial report" if why else "writing the partial report")
    progress.done()
    try:
        write_report(path)
    except Exception as e:  # noqa: BLE001 (a report of a half-written run must not hide the interruption)
        print(f"dlcp run: the partial report could not be written: {e}", file=sys.stderr)
        return None
    return path / "report.html"


def cut_short_message(job: RunJob, progress: Progress, why: str) -> str:
    """`why` the run was cut short, then what it kept: the partial run (how far it got, which
    switches' counters it has) and its partial report (when reports are on)."""
    report = write_partial_report(job.run_dir, progress, why.splitlines()[0]) if job.with_report else None
    lines = [
        why,
        "  everything it started was stopped and cleaned up",
        f"  partial run: {job.run_dir} ({iterations_done(job.run_dir)}; {run_dir.counters_kept(job.run_dir)})",
    ]
    if report is not None:
        lines.append(f"  partial report: {report}")
    return "\n".join(lines)


def interrupted_message(path: Path, report: Path | None, status: str) -> str:
    what = "interrupted (Ctrl-C)" if status == "interrupted" else "terminated (SIGTERM)"
    lines = [
        f"dlcp run: {what}; everything it started was stopped and cleaned up",
        f"  partial run: {path} ({iterations_done(path)})",
    ]
    if report is not None:
        lines.append(f"  partial report: {report}")
    return "\n".join(lines)


def run_in_child(job: RunJob, session: Session, progress: Progress) -> None:
    """`run_and_report` in a forked process (backends whose runs each need one); the parent raises
    what ended the child: a stop, or RunFailed."""

    def child() -> int:
        try:
            run_and_report(job, session, progress)
        except RunFailed as e:
            print(f"dlcp run: failed: {e}", file=sys.stderr)
            return 1
        except (KeyboardInterrupt, signals.Terminated) as e:
            return signals.exit_code(e)
        return 0

    pids: list[int] = []
    code = run_forked(child, pids.append)
    if code in (signals.exit_code(KeyboardInterrupt()), signals.exit_code(signals.Terminated())):
        raise signals.stop_for(code)
    if code < 0:  # killed: the child could write neither meta.json's end nor its report
        why = f"the process of run {job.run.label} (pid {pids[0]}) {exit_text(code)}"
        run_dir.end_meta_for(job.run_dir, why)
        raise RunCutShort(cut_short_message(job, progress, why))
    if code:
        raise RunFailed(f"{job.run.label} failed (see above)" if code == 1 else f"{job.run.label} {exit_text(code)}")


# --- the series ------------------------------------------------------------------------------------


def run_series(request: SeriesRequest) -> Path:
    """Run the series `request` asks for; returns its results directory. Raises ConfigError (before
    anything starts), NeedsRoot, RunFailed, KeyboardInterrupt or signals.Terminated."""
    series = plan(request)
    runner: BackendRunner = backends.implementation(series.backend.name)
    check(series, runner)
    with signals.installed(), machine_lock.claim(series.backend) as lock:  # MachineBusy: nothing started
        series.results, created = run_dir.new_results(
            request.run_dir, request.out_root or series.base["output"]["dir"], series.base["name"]
        )
        if lock is not None:
            lock.note_results(series.results)
        progress = Progress()
        session, stop = None, None
        try:
            session = runner.open_session(series.base, series.results, progress)
            run_all(series, session, progress)
        except (KeyboardInterrupt, signals.Terminated) as e:
            stop = e
            raise
        finally:
            with signals.deferred():  # the fork server stopped, the results handed over, whatever comes
                if session is not None:
                    session.close()
                leave_results(series.results, created, stop)
    return series.results


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


def run_all(series: Series, session: Session, progress: Progress) -> None:
    """Every planned run in order, then the comparison of the variants; the first failure or stop
    ends the series."""
    caps = series.backend.capabilities
    fork = caps.forked_runs and len(series.runs) > 1  # a single run has its process to itself
    if fork and series.request.with_report:
        import dlcp.reporting  # noqa: F401 - the reports' modules (matplotlib, scipy), loaded once for every child
    for i, run in enumerate(series.runs):
        job = RunJob(
            series.backend,
            run,
            series.run_dir_of(run),
            list(series.request.overrides),
            series.request.with_report,
            figures=series.request.repeat == 1,
        )
        print(
            f"dlcp run: {series.base['name']} [{run.label}] ({i + 1}/{len(series.runs)}) on "
            f"{series.backend.name} -> {job.run_dir}",
            file=sys.stderr,
        )
        if fork:
            run_in_child(job, session, progress)
        else:
            run_and_report(job, session, progress)
    if series.request.with_report and len(series.variants) > 1:
        from dlcp.reporting import compare_runs

        assert series.results is not None
        compare_runs([series.results / v for v in series.variants], series.results, echo=True)
