"""What the iteration cores ask their driver to do. Plain data; the cores never perform them.

A driver performs the actions an event returned in order, and the actions of an event it feeds
while performing one (a workload call's `work_done`, a blocking wait's result) before the rest:
depth first, as a call returns before the caller goes on.

Three kinds:
- the comm layer's: `BeginComm`, the hand-offs (`Push`, `Submit`, `SubmitParameters`; the driver
  reports `handed` after performing one), `BackwardDone`, `AwaitComm` (threaded: block for the
  iteration's result and feed `comm_done`; evented: the result comes as an event), `Resync`, and
  the PS's `AwaitPushes` and `Scatter`;
- the workload's (`WorkloadCall`: `run(workload)` is the call; the driver times it and feeds
  `work_done(now, cpu_s, result)`), and `Compute` (the driver runs the iteration's forward and
  backward its own way and feeds `gradient_ready` per message, then `compute_done`);
- the run's: `RecordIteration`, `RecordResync` (rows for the one record writer, dlcp/records.py),
  `ScheduleBudget` (a budget schedule's new budget for the transport, and its row), `Progress`,
  `NextIteration` (call `start` at `at_us`), `Finished`, `Failed`.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

import numpy as np

from dlcp.workloads.contract import Aggregate, GradMessage

# --- the comm layer ----------------------------------------------------------------------------------


@dataclass(slots=True)
class BeginComm:
    """A new iteration starts: older messages become stale at the comm layer."""

    iteration: int


class Handoff:
    """A message handed to the comm layer; the driver reports `handed(now)` once it is."""

    __slots__ = ()


@dataclass(slots=True)
class Push(Handoff):
    """PS mode: push this gradient message to the PS."""

    iteration: int
    message: GradMessage


@dataclass(slots=True)
class Submit(Handoff):
    """All-reduce: the gradient of this message is ready for the scheduler and collective."""

    iteration: int
    message: GradMessage


@dataclass(slots=True)
class SubmitParameters(Handoff):
    """DS-Sync parameter averaging: every message's parameters into the group's average (in
    message order), then `BackwardDone`. `params` None: sizes only."""

    iteration: int
    params: dict | None


@dataclass(slots=True)
class BackwardDone:
    """All-reduce: every message of the iteration has been submitted."""

    iteration: int


@dataclass(slots=True)
class AwaitComm:
    """The iteration's communication result is due: PS mode, the pulled parameters (pushes
    finished); all-reduce, the aggregates. Feed `comm_done` (or `comm_failed`)."""

    iteration: int


@dataclass(slots=True)
class Resync:
    """Re-sync to rank 0: rank 0 sends `params` to every rank, the others receive rank 0's. Feed
    `resynced(now, reference)`: rank 0's parameters (rank 0: its own `params`; None: sizes only)."""

    iteration: int
    params: dict | None


@dataclass(slots=True)
class AwaitPushes:
    """PS: every worker's push of every message of `iteration`, summed. Feed `gathered`."""

    iteration: int


@dataclass(slots=True)
class Scatter:
    """PS: send every worker each message's parameters (`params` None: sizes only). Feed
    `scattered` once every send finished."""

    iteration: int
    params: dict | None


# --- the workload ------------------------------------------------------------------------------------


@dataclass(slots=True)
class Compute:
    """Run the iteration's forward and backward: feed `gradient_ready` for every message as it
    becomes ready (backward order), then `compute_done`."""

    iteration: int


class WorkloadCall:
    """A call of the workload (dlcp/workloads/contract.py); `run` performs it and returns what
    `work_done` expects."""

    __slots__ = ()

    def run(self, workload):
        raise NotImplementedError


@dataclass(slots=True)
class LocalStep(WorkloadCall):
    """DS-Sync parameter averaging: the optimizer step with this worker's own gradients."""

    iteration: int
    gradients: list

    def run(self, workload) -> None:
        ones = {
            m.msg_id: Aggregate(m.msg_id, m.values, np.ones(m.layout.n_values, np.uint16), 1) for m in self.gradients
        }
        workload.apply_gradients(self.iteration, ones)


@dataclass(slots=True)
class ApplyGradients(WorkloadCall):
    """All-reduce: fill the aggregates' holes, then the optimizer step."""

    iteration: int
    aggregates: dict

    def run(self, workload) -> None:
        workload.apply_gradients(self.iteration, self.aggregates)


@dataclass(slots=True)
class ApplyParameters(WorkloadCall):
    """Install parameters (pulled, averaged or rank 0's), keeping the previous value where lost."""

    iteration: int
    chunks: dict

    def run(self, workload) -> None:
        for msg_id, chunk in self.chunks.items():
            workload.apply_parameters(self.iteration, msg_id, chunk)


@dataclass(slots=True)
class ReadParameters(WorkloadCall):
    """This replica's parameters of every message: {msg_id: values}."""

    msg_ids: tuple

    def run(self, workload) -> dict:
        return {m: workload.parameters(m) for m in self.msg_ids}


@dataclass(slots=True)
class Evaluate(WorkloadCall):
    """The iteration's metrics (train loss, lost values; test metrics at evaluation iterations)."""

    iteration: int

    def run(self, workload) -> dict:
        return workload.evaluate(self.iteration) or {}


@dataclass(slots=True)
class Update(WorkloadCall):
    """PS: fill the aggregates' holes, then the optimizer step on the authoritative parameters."""

    iteration: int
    aggregates: dict

    def run(self, workload) -> None:
        workload.update(self.iteration, self.aggregates)


# --- the run -----------------------------------------------------------------------------------------


@dataclass(slots=True)
class RecordIteration:
    """One row of records/hN-iterations.csv (dlcp.records.ITERATION_COLUMNS)."""

    row: dict


@dataclass(slots=True)
class RecordResync:
    """One row of records/hN-resync.csv (dlcp.records.RESYNC_COLUMNS)."""

    row: dict


@dataclass(slots=True)
class ScheduleBudget:
    """A budget schedule (dlcp/iteration/budget_schedule.py) changed the loss budget: the driver
    applies `budget` to its transport (`set_budget`: messages it sends, and a cap on what it
    receives) and keeps `row` for records/hN-budget.csv."""

    budget: float
    row: dict


@dataclass(slots=True)
class Progress:
    """`done` of `iterations` finished. A worker's first (`done == 1`) is what releases the
    background traffic once every worker reached it (docs/runs.md, `progress/background-go`)."""

    done: int
    iterations: int


@dataclass(slots=True)
class NextIteration:
    """Call `start` at `at_us` (the end of the iteration before)."""

    iteration: int
    at_us: int


@dataclass(slots=True)
class Finished:
    """Every iteration is done."""


@dataclass(slots=True)
class Failed:
    """The iteration cannot finish: stop with this one line."""

    iteration: int
    error: str

    @property
    def line(self) -> str:
        return f"iteration {self.iteration}: {self.error}"


def drive(actions, perform) -> None:
    """Perform `actions` in order, depth first: `perform(action)` does one and returns the actions
    it caused (the events it fed back), which run before the rest."""
    pending = collections.deque(actions)
    while pending:
        pending.extendleft(reversed(perform(pending.popleft())))
