"""What a collective is to the rest of the system: a `StepPlan` (the schedule each iteration's
operations run, dlcp/comm/stepped.py runs it over the transport) and a registry entry.

**Registry.** Every all-reduce collective registers itself in its own module of this package with
`register_collective(CollectiveEntry(...))`: the name `comm.collective` takes, one line for the docs
and CLIs, the settings model of its `[comm.<name>]` keys (or None), how to plan it for a job
(`plan`), what `dlcp schedule --collective` prints (`describe`), and the checks and traits the
framework needs (`check`, `link_cost`, `averages_parameters`, `resyncs`). `COLLECTIVES` imports
every module of the package before its first lookup, so a new collective is one new module here
(docs/collectives.md, "Adding a collective"). The parameter server is not one of them: it is
`workload.mode = "ps"` (dlcp/comm/ps.py).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from dlcp.comm.plans.paths import rank_hosts
from dlcp.comm.plans.schedule import Schedule
from dlcp.comm.wire_ids import transfer_ids
from dlcp.network import topology as topospec
from dlcp.network.topology import TopologySpec
from dlcp.registry import Entry, Registry


class StepPlan(ABC):
    """The schedule an operation of an iteration runs; ranks 0..workers-1 are worker ranks."""

    collective = "steps"

    def __init__(self, workers: int):
        self.workers = workers

    @abstractmethod
    def schedule(self, iteration: int) -> Schedule: ...

    @cached_property
    def stride(self) -> int:
        """Step ids per operation (wire_ids.transfer_ids), the most any iteration needs."""
        return max(transfer_ids(self.schedule(k))[1] for k in range(self.period))

    period = 1  # iterations after which the schedules repeat

    def groups(self, iteration: int) -> list[list[int]]:
        """The ranks that reduce together in `iteration` (every rank, unless the plan groups them)."""
        return [list(range(self.workers))]

    def group_size(self, iteration: int, rank: int) -> int:
        return self.workers


def spec_for(workers: int, spec: TopologySpec | None) -> TopologySpec:
    """The topology whose paths a plan names (the switches route by destination anyway); without
    one, a star of `workers` hosts."""
    return spec if spec is not None else topospec.star(workers, 50.0)


def worker_hosts(spec: TopologySpec, workers: int) -> list[str]:
    """The hosts of ranks 0..workers-1 on `spec`."""
    hosts = rank_hosts(spec)
    if len(hosts) < workers:
        raise ValueError(f"topology {spec.kind} has {len(hosts)} worker hosts, the job {workers} workers")
    return hosts[:workers]


class FixedSchedule(StepPlan):
    """One schedule for every iteration (ring, MultiTree)."""

    def __init__(self, collective: str, sched: Schedule):
        super().__init__(sched.ranks)
        self.collective, self._schedule = collective, sched

    def schedule(self, iteration: int) -> Schedule:
        return self._schedule


def _no_check(options: Any, scheduler: str, workers: int | None) -> None:
    return None


def _never(options: Any) -> bool:
    return False


def allreduce_bus_factor(options: Any, workers: int) -> float:
    """nccl-tests' bus-bandwidth factor of an all-reduce over `workers` ranks, 2(n - 1)/n: what
    each rank sends (and receives) over the message size in a ring, the least any all-reduce moves
    (dlcp/comm/busbw.py)."""
    return 2 * (workers - 1) / workers


def steps_line(described: dict) -> list[str]:
    """The summary `dlcp schedule` prints above a collective's JSON: where, and steps per phase."""
    return [
        f"{described['collective']} on {described.get('topology', '')}: {described['steps_per_phase']} steps per phase"
    ]


@dataclass(frozen=True, kw_only=True)
class CollectiveEntry(Entry):
    """A registered all-reduce collective (see the module docstring). `options` below is the
    validated `[comm.<name>]` object (None when the collective declares no options model)."""

    plan: Callable[[Any, int, TopologySpec | None], StepPlan]
    """plan(options, workers, spec): the job's StepPlan (spec None: a star of `workers` hosts)."""
    describe: Callable[[Any, int, TopologySpec | None], dict]
    """describe(options, workers, spec): `dlcp schedule --collective`'s JSON (spec as for plan)."""
    summary: Callable[[dict], list[str]] = steps_line
    """summary(described): the lines `dlcp schedule` prints above that JSON."""
    check: Callable[[Any, str, int | None], None] = _no_check
    """check(options, scheduler, workers): raise dlcp.settings.BadValue (its key relative to
    `[comm]`) where this collective cannot run with that scheduler or that many workers (None:
    not known yet)."""
    link_cost: bool = False
    """The schedulers plan with CostModel.from_link's ring over the host links; otherwise with this
    collective's own schedule priced on the topology (dlcp/comm/assemble.py cost_model)."""
    averages_parameters: Callable[[Any], bool] = _never
    """Whether ranks average parameters after a local step instead of all-reducing gradients."""
    resyncs: bool = True
    """Whether rank 0's periodic re-sync applies (`dlcp.resync_every`): replicas are meant to agree."""
    bus_factor: Callable[[Any, int], float] = allreduce_bus_factor
    """bus_factor(options, workers): nccl-tests' bus-bandwidth factor of one operation, which makes
    its algorithm bandwidth comparable with a link's rate (`dlcp bench collectives`)."""


COLLECTIVES: Registry[CollectiveEntry] = Registry("collective", discover="dlcp.comm.plans")


def register_collective(entry: CollectiveEntry) -> CollectiveEntry:
    return COLLECTIVES.register(entry)
