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

import itertools
import shlex
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
from dlcp.runs import naming, privilege, run_dir, signals
from dlcp.runs.cluster import ClusterOptions, check_options
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
    run_dir: str | None = None  # --run-dir: the one run's directory itself
    with_report: bool = True
    named: list[tuple[str, list[str]]] = field(default_factory=list)  # variants as named override bundles
    resume: str | None = None  # --resume: a series' directory to run what is missing in
    cluster: ClusterOptions = field(
        default_factory=ClusterOptions
    )  # where the runs go (cluster.py): this machine by default
    command: tuple[str, ...] = ()  # how the user started it (`dlcp run ...`), for the hint after a stop


@dataclass(frozen=True)
class PlannedRun:
    variant: str
    rep: int  # 0 = not repeated
    cfg: dict
    sets: tuple[str, ...] = ()  # the --set arguments that make this run from the config file
    dir: Path | None = None  # its directory when the series does not name it (a sweep's point)

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
        if run.dir is not None:
            return run.dir
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
    if request.named and varies:
        raise configmod.ConfigError("variants: named variants or --vary / --policies, not both")
    variants = (
        configmod.named_variants(raw, request.named)
        if request.named
        else configmod.variants(raw, varies, request.overrides)
    )
    names = naming.variant_names(
        [n for n, _ in variants] if varies or request.named else None,
        configmod.policy_of(base),
        request.overrides,
        request.name,
    )
    made_by = (
        [(*request.overrides, *o) for _, o in request.named]
        if request.named
        else variant_sets(request.overrides, varies)
    )
    sets = dict(zip(names, made_by))
    runs = [
        PlannedRun(v, rep, cfg, sets[v] + ((f"seed={cfg['seed']}",) if rep > 1 else ()))
        for v, rep, cfg in configmod.plan_runs([(n, cfg) for n, (_, cfg) in zip(names, variants)], request.repeat)
    ]
    if request.resume and request.run_dir:
        raise configmod.ConfigError("--resume: resumes a series' directory; not with --run-dir (one run)")
    if request.run_dir and len(runs) > 1:
        raise configmod.ConfigError("--run-dir: takes one run, not --policies / --vary / --repeat with several")
    mixed = sorted({r.cfg["backend"] for r in runs} - {base["backend"]})
    if mixed:
        raise configmod.ConfigError(
            f"backend: a series runs on one backend, not {base['backend']} and {', '.join(mixed)} (one dlcp run each)"
        )
    return Series(request, base, backends.get(base["backend"]), runs)


def variant_sets(overrides: list[str], varies: list[str]) -> list[tuple[str, ...]]:
    """Per variant of `varies` (in configmod.variants' order), the --set arguments that make it."""
    parsed = [configmod.parse_vary(v) for v in varies]
    return [
        (*overrides, *(f"{k}={v}" for (k, _), v in zip(parsed, combo)))
        for combo in itertools.product(*(values for _, values in parsed))
    ]


def run_config(backend: backends.Backend, cfg: dict) -> dict:
    """What the backend runs for `cfg`: on a wall clock the time-dilated system (rates / D, times x
    D), on a simulated clock the system itself (nothing has to keep up with a simulation)."""
    return dilationmod.emulated(cfg) if backend.capabilities.clock == "wall" else cfg


def dilation_of(backend: backends.Backend, cfg: dict) -> float:
    """How many times slower than the system the run goes (meta.json `dilation`)."""
    return dilationmod.dilation(cfg) if backend.capabilities.clock == "wall" else 1.0


def check(series: Series, runner: BackendRunner) -> None:
    """Everything that can be checked before anything starts: each run's topology and roles as the
    backend runs them, the backend's own checks, the compute (profiles, models), the cluster
    options, root (where the runs run on this machine: a cluster's workers have their own)."""
    from dlcp.workloads.profiled import check_workload

    for run in series.runs:
        topospec.from_config(run_config(series.backend, run.cfg))
        runner.check_config(run.cfg)
    try:
        for workload in configmod.Experiment.parse(series.base).workloads():  # every job's
            check_workload(workload)
    except ValueError as e:
        raise configmod.ConfigError(str(e)) from None
    check_options(series.request.cluster)
    why = series.backend.capabilities.root
    # a bad results root is named before root is asked for (sudo would not mend it); whether the
    # directory can be written is asked only of the user who will write it. On a cluster the
    # workers need root, not this machine.
    runs_as_is = not why or not series.request.cluster.local or privilege.privileged()
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


def cut_short_message(job: RunJob, progress: Progress, why: str, shown: Path | None = None) -> str:
    """`why` the run was cut short, then what it kept: the partial run (how far it got, which
    switches' counters it has) and its partial report (when reports are on); the run named by
    `shown`, where the user finds it (a cluster's run is written in staging: tasks.py)."""
    report = write_partial_report(job.run_dir, progress, why.splitlines()[0]) if job.with_report else None
    place = shown or job.run_dir
    lines = [
        why,
        "  everything it started was stopped and cleaned up",
        f"  partial run: {place} ({iterations_done(job.run_dir)}; {run_dir.counters_kept(job.run_dir)})",
    ]
    if report is not None:
        lines.append(f"  partial report: {place / report.name}")
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


def job_of(series: Series, run: PlannedRun) -> RunJob:
    # a sweep's point records the --set arguments that make it; a series' run those of the series
    overrides = list(run.sets) if run.dir is not None else list(series.request.overrides)
    return RunJob(
        series.backend,
        run,
        series.run_dir_of(run),
        overrides,
        series.request.with_report,
        figures=series.request.repeat == 1,
    )


def rerun_command(series: Series, run: PlannedRun) -> str:
    """The command that runs `run` alone on this machine (into a new results directory: a sweep's
    point directory holds the run that failed)."""
    out = ["--out", series.request.out_root] if series.request.out_root and run.dir is None else []
    return shlex.join(["dlcp", "run", series.request.config, *(a for s in run.sets for a in ("--set", s)), *out])


def run_here(series: Series, runner: BackendRunner, todo: list[PlannedRun], keep_going: bool) -> list[str]:
    """`todo` one after the other in this process (each forked when the backend asks for it)."""
    assert series.results is not None
    progress = Progress()
    session = None
    try:
        session = runner.open_session(series.base, series.results, progress)
        return run_all(series, session, progress, todo, keep_going)
    finally:
        if session is not None:
            with signals.deferred():  # the fork server stopped, whatever comes
                session.close()


def run_all(
    series: Series, session: Session, progress: Progress, runs: list[PlannedRun], keep_going: bool = False
) -> list[str]:
    """`runs` in order; each one's status. The first failure (unless `keep_going`) or stop ends
    the series."""
    caps = series.backend.capabilities
    fork = caps.forked_runs and len(runs) > 1  # a single run has its process to itself
    if fork and series.request.with_report:
        import dlcp.reporting  # noqa: F401 - the reports' modules (matplotlib, scipy), loaded once for every child
    statuses = []
    for i, run in enumerate(runs):
        signals.raise_pending()
        job = job_of(series, run)
        print(
            f"dlcp run: {series.base['name']} [{run.label}] ({i + 1}/{len(runs)}) on "
            f"{series.backend.name} -> {job.run_dir}",
            file=sys.stderr,
        )
        try:
            if fork:
                run_in_child(job, session, progress)
            else:
                run_and_report(job, session, progress)
        except RunFailed as e:
            if not keep_going:
                raise
            print(f"dlcp run: [{run.label}] failed: {e}", file=sys.stderr)
            statuses.append("error")
            continue
        statuses.append("ok")
    return statuses
