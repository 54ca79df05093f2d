"""A worker's training iterations without I/O (docs/runs.md, "The iteration core").

One iteration, as `WorkerCore` orders it (times are integer microseconds of the driver's clock:
wall clock in the agents, simulated time on ns-3):

    start(now)                  -> BeginComm, Compute              the iteration starts at `now`
    gradient_ready(now, msg)    -> Push (PS) | Submit (all-reduce) | nothing (DS-Sync parameter
                                   averaging keeps its own gradients for the local step)
    handed(now)                    the driver handed a message over (the first one starts `comm_us`)
    compute_done(now)           -> AwaitComm (PS) | BackwardDone, AwaitComm (all-reduce)
                                 | LocalStep, ReadParameters, SubmitParameters, AwaitComm (DS-Sync
                                   parameter averaging: local SGD step, then the group's average)
    comm_done(now, result)      -> ApplyParameters (PS: the pulled chunks; DS-Sync: the group's
                                   mean) | ApplyGradients (all-reduce; after ScheduleBudget when a
                                   budget schedule detects a new phase)
    (every `resync_every` iterations of ring or MultiTree all-reduce: ReadParameters, Resync,
     `resynced(now, rank 0's parameters)`, ApplyParameters (ranks other than 0), RecordResync)
    work_done(...)              -> Evaluate                        the iteration ends here
    work_done(now, metrics)     -> RecordIteration, Progress, NextIteration(at end) | Finished

A workload call (`WorkloadCall`) is answered with `work_done(now, cpu_s, result)`: the driver's
measure of the compute it did (`compute_us` adds the forward and backward, `compute_done`'s and
`gradient_ready`'s `compute_s`, and the applying calls; ns-3 passes the simulated compute once, at
`compute_done`). A comm result may come before the compute is over (a group of one rank finishes
at the submit): it is applied at `compute_done`. The iteration cannot end before its compute did:
`end_us` is the later of the evaluation's event and `compute_done`'s time.

Records: the iteration row (dlcp.records.ITERATION_COLUMNS) is the one both backends write; the
workload's `evaluate` decides the metrics (test metrics at its evaluation iterations) and may
override `lost_values` with what its fill rule filled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dlcp.comm.communicator import param_means
from dlcp.comm.resync import drift
from dlcp.iteration.actions import (
    ApplyGradients,
    ApplyParameters,
    AwaitComm,
    BackwardDone,
    BeginComm,
    Compute,
    Evaluate,
    Failed,
    Finished,
    LocalStep,
    NextIteration,
    Progress,
    Push,
    ReadParameters,
    RecordIteration,
    RecordResync,
    Resync,
    ScheduleBudget,
    Submit,
    SubmitParameters,
)
from dlcp.iteration.budget_schedule import BudgetScheduleSettings, PhaseBudget, phase_budget
from dlcp.workloads.contract import Aggregate, GradMessage, ParamChunk


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker's iterations depend on. `msg_ids`: the workload's messages (its layouts'
    order); `average_parameters`: DS-Sync's local step and parameter averaging instead of a gradient
    all-reduce; `resync_every`: re-sync to rank 0 after every so many iterations (0 = never);
    `sizes_only`: messages carry no values (workload.payload = "sizes"); `budget`: a budget
    schedule this rank runs on its aggregates (all-reduce; None: a fixed budget)."""

    host: str
    rank: int
    world: int
    mode: str  # "ps" | "allreduce"
    iterations: int
    msg_ids: tuple[int, ...]
    average_parameters: bool = False
    resync_every: int = 0
    sizes_only: bool = False
    budget: BudgetScheduleSettings | None = None

    def __post_init__(self):
        if self.mode not in ("ps", "allreduce"):
            raise ValueError(f"worker mode {self.mode!r} is not 'ps' or 'allreduce'")
        if self.iterations < 1 or not self.msg_ids:
            raise ValueError(f"a worker needs iterations ({self.iterations}) and messages ({len(self.msg_ids)})")


def worker_spec(acfg, workload, sizes_only: bool = False) -> WorkerSpec:
    """The spec of a worker from its agent configuration (dlcp/experiment/agent_config.py) and its
    workload: a collective that averages parameters (DS-Sync with `average = "parameters"`) does so;
    re-sync runs in all-reduce of more than one rank over a collective that takes rank 0's re-sync
    (the collective registry says which: not DS-Sync, which reaches consensus by shuffling its
    groups) and needs the workload's `parameters` (unless sizes only)."""
    comm = acfg.comm
    allreduce = acfg.mode == "allreduce"
    average = allreduce and comm.averages_parameters()
    can_resync = sizes_only or hasattr(workload, "parameters")
    resync = allreduce and acfg.world > 1 and comm.resyncs() and can_resync
    return WorkerSpec(
        host=acfg.host,
        rank=acfg.rank,
        world=acfg.world,
        mode=acfg.mode,
        iterations=acfg.workload.iterations,
        msg_ids=tuple(lay.msg_id for lay in workload.layouts()),
        average_parameters=average,
        resync_every=acfg.dlcp.resync_every if resync else 0,
        sizes_only=sizes_only,
        budget=(
            acfg.dlcp.project(BudgetScheduleSettings)
            if allreduce and not average and not sizes_only and acfg.dlcp.budget_schedule != "fixed"
            else None
        ),
    )


def lost_in_chunks(chunks: dict[int, ParamChunk]) -> int:
    """Parameter values marked lost."""
    return int(sum(int(c.lost.sum()) for c in chunks.values()))


def short_in_aggregates(aggregates: dict[int, Aggregate]) -> int:
    """Aggregated values holding fewer contributions than the group."""
    return int(sum(int((a.count < a.world).sum()) for a in aggregates.values()))


# phases of the iteration in progress
IDLE, COMPUTING, COMMUNICATING, WORKING, RESYNCING, DONE, FAILED = (
    "idle",
    "computing",
    "communicating",
    "working",
    "resyncing",
    "done",
    "failed",
)
# what a WORKING worker waits for
LOCAL_STEP, AVERAGE_PARAMS, APPLY, RESYNC_PARAMS, RESYNC_APPLY, EVALUATE = (
    "local step",
    "parameters to average",
    "apply",
    "parameters to re-sync",
    "re-sync apply",
    "evaluate",
)


class WorkerCore:
    """One worker's iterations (see the module docstring). Each event returns the actions it
    causes; an event the current phase does not expect is a driver bug (RuntimeError)."""

    def __init__(self, spec: WorkerSpec):
        self.spec = spec
        self.iteration = -1
        self.done = 0  # iterations finished
        self.phase = IDLE
        self._work: str | None = None
        self._new_iteration(0)
        self.schedule: PhaseBudget | None = (
            None if spec.budget is None else phase_budget(spec.budget, spec.host, spec.rank)
        )

    def _new_iteration(self, now: int) -> None:
        self.start_us = now
        self.first_send_us: int | None = None  # none handed over yet
        self.comm_end_us = now  # each set by its event before the iteration ends
        self.compute_end_us = now
        self.end_us = now
        self.compute_s = 0.0
        self.lost = 0
        self._own: list[GradMessage] = []
        self._result: dict | None = None
        self._short = 0
        self._resync_params: dict | None = None
        self._resync_row: dict | None = None

    # --- events ----------------------------------------------------------------------------------

    def start(self, now: int) -> list:
        """The next iteration starts."""
        self._expect("start", IDLE)  # not after the last iteration (DONE)
        self.iteration += 1
        self._new_iteration(now)
        self.phase = COMPUTING
        first = [ScheduleBudget(*self.schedule.start())] if self.schedule is not None and self.iteration == 0 else []
        return [*first, BeginComm(self.iteration), Compute(self.iteration)]

    def gradient_ready(self, now: int, message: GradMessage, compute_s: float = 0.0) -> list:
        """Backward produced `message` (after `compute_s` more seconds of compute)."""
        self._expect("gradient_ready", COMPUTING)
        self.compute_s += compute_s
        if self.spec.mode == "ps":
            return [Push(self.iteration, message)]
        if self.spec.average_parameters:
            self._own.append(message)
            return []
        return [Submit(self.iteration, message)]

    def handed(self, now: int) -> None:
        """The driver handed a message to the comm layer."""
        if self.first_send_us is None:
            self.first_send_us = now

    def compute_done(self, now: int, compute_s: float = 0.0) -> list:
        """The iteration's compute is over (backward reached layer 0) at `now`."""
        self._expect("compute_done", COMPUTING)
        self.compute_s += compute_s
        self.compute_end_us = now
        if self.spec.average_parameters:
            return self._working(LOCAL_STEP, LocalStep(self.iteration, self._own))
        out = [] if self.spec.mode == "ps" else [BackwardDone(self.iteration)]
        return out + self._communicating()

    def comm_done(self, now: int, result: dict, short_values: int = 0) -> list:
        """The iteration's communication is over: PS mode, {msg_id: ParamChunk} pulled; all-reduce,
        {msg_id: Aggregate} (None per message when sizes only, with `short_values` the values
        that fell short of the group)."""
        self._expect("comm_done", COMPUTING, COMMUNICATING)
        if self._result is not None:
            raise RuntimeError(f"worker {self.spec.host}: iteration {self.iteration} communicated twice")
        self.comm_end_us, self._result, self._short = now, result, short_values
        return self._apply() if self.phase == COMMUNICATING else []

    def comm_failed(self, now: int, error: str) -> list:
        """The iteration's communication failed: the iteration cannot finish."""
        self.phase = FAILED
        return [Failed(self.iteration, error)]

    def resynced(self, now: int, reference: dict | None) -> list:
        """Rank 0's parameters arrived (rank 0: its own were sent); None when sizes only."""
        self._expect("resynced", RESYNCING)
        params = self._resync_params
        if reference is None or params is None:  # sizes only: the traffic, nothing to compare or adopt
            return self._evaluate(now)
        row = {"host": self.spec.host, "rank": self.spec.rank, "iter": self.iteration, **drift(params, reference)}
        if self.spec.rank == 0:
            return [RecordResync(row), *self._evaluate(now)]
        self._resync_row = row
        chunks = {m: ParamChunk(values, np.zeros(values.size, bool)) for m, values in reference.items()}
        return self._working(RESYNC_APPLY, ApplyParameters(self.iteration, chunks))

    def work_done(self, now: int, cpu_s: float = 0.0, result=None) -> list:
        """The workload call the core asked for returned `result` after `cpu_s` seconds."""
        self._expect("work_done", WORKING)
        work, self._work = self._work, None
        if work == LOCAL_STEP:
            self.compute_s += cpu_s
            if self.spec.sizes_only:  # no parameters to read
                return self._submit_parameters(None)
            return self._working(AVERAGE_PARAMS, ReadParameters(self.spec.msg_ids))
        if work == AVERAGE_PARAMS:
            self.compute_s += cpu_s
            return self._submit_parameters(result)
        if work == APPLY:
            self.compute_s += cpu_s
            return self._after_apply(now)
        if work == RESYNC_PARAMS:
            return self._resync(result)
        if work == RESYNC_APPLY and self._resync_row is not None:
            row, self._resync_row = self._resync_row, None
            return [RecordResync(row), *self._evaluate(now)]
        if work == EVALUATE:
            return self._record(result)
        raise RuntimeError(f"worker {self.spec.host}: work_done with nothing asked ({work})")

    # --- steps -------------------------------------------------------------------------------------

    def _expect(self, event: str, *phases: str) -> None:
        if self.phase not in phases:
            raise RuntimeError(
                f"worker {self.spec.host}: {event} in iteration {self.iteration} while {self.phase}"
                + (f" ({self._work})" if self._work else "")
            )

    def _working(self, work: str, call) -> list:
        self.phase, self._work = WORKING, work
        return [call]

    def _communicating(self) -> list:
        self.phase = COMMUNICATING
        out = [AwaitComm(self.iteration)]
        return out + (self._apply() if self._result is not None else [])

    def _submit_parameters(self, params: dict | None) -> list:
        return [SubmitParameters(self.iteration, params), *self._communicating()]

    def _apply(self) -> list:
        """Apply the communication's result; count the values it lost."""
        spec, result, it = self.spec, self._result, self.iteration
        if result is None:
            raise RuntimeError(f"worker {spec.host}: iteration {it} applies before its communication is done")
        if spec.mode == "ps":
            self.lost = lost_in_chunks(result)
            return self._working(APPLY, ApplyParameters(it, result))
        if spec.average_parameters:
            means = {} if spec.sizes_only else param_means(result)  # sizes only: no parameters to average
            self.lost = self._short if spec.sizes_only else lost_in_chunks(means)
            return self._working(APPLY, ApplyParameters(it, means))
        self.lost = self._short if spec.sizes_only else short_in_aggregates(result)
        changed = self.schedule.observe(it, result) if self.schedule is not None else None
        return ([ScheduleBudget(*changed)] if changed else []) + self._working(APPLY, ApplyGradients(it, result))

    def _after_apply(self, now: int) -> list:
        every = self.spec.resync_every
        if not (every and (self.iteration + 1) % every == 0):
            return self._evaluate(now)
        if self.spec.sizes_only:
            return self._resync(None)
        return self._working(RESYNC_PARAMS, ReadParameters(self.spec.msg_ids))

    def _resync(self, params: dict | None) -> list:
        self.phase, self._resync_params = RESYNCING, params
        return [Resync(self.iteration, params)]

    def _evaluate(self, now: int) -> list:
        """The iteration is over (evaluation is the observer's work, not the training's)."""
        self.end_us = max(now, self.compute_end_us)
        return self._working(EVALUATE, Evaluate(self.iteration))

    def _record(self, metrics: dict) -> list:
        it, spec = self.iteration, self.spec
        first = self.comm_end_us if self.first_send_us is None else self.first_send_us
        row = {
            "host": spec.host,
            "rank": spec.rank,
            "iter": it,
            "start_us": self.start_us,
            "end_us": self.end_us,
            "iteration_us": self.end_us - self.start_us,
            "compute_us": round(self.compute_s * 1e6),
            "comm_us": self.comm_end_us - first,
            "lost_values": metrics.get("lost_values", self.lost),
            "train_loss": metrics.get("train_loss"),
            "test_loss": metrics.get("test_loss"),
            "test_accuracy": metrics.get("test_accuracy"),
        }
        self.done = it + 1
        out = [RecordIteration(row), Progress(self.done, spec.iterations)]
        if self.done == spec.iterations:
            self.phase = DONE
            return out + [Finished()]
        self.phase = IDLE
        return out + [NextIteration(it + 1, self.end_us)]
