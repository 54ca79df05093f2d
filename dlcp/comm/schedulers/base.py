"""The communication scheduler interface: events in, operations out, no I/O and no clock.

A scheduler decides what gradient data to send, merged or split how, in which order and over
which collective primitive. It is driven like a sans-I/O protocol stack: the driver (the virtual
time `dlcp.comm.timeline`, later the emulated network or ns-3) tells it what happened and when,
and it answers with the operations to start now:

    on_ready(iteration, tensor, now)    backward produced this tensor's gradient
    on_complete(op_id, now)             an operation this scheduler started has finished
    on_forward(iteration, tensor, now)  the forward of `iteration` has reached `tensor` (it still
                                        waits until the tensor's parameters are final)

Each returns a list of `Op`s the driver must start, in that order. `units()` lists the data every
operation of an iteration carries (a group, a tensor, a partition), fixed when the scheduler is built: ranks name
operations by their unit (wire ids, dlcp/comm/wire_ids.py), so every op's segments are one unit. `now` is in seconds of the
driver's clock; schedulers use it only for bookkeeping, never to read time themselves.

An operation's data is final (the parameters of those elements can be updated) when an op of a
completing primitive carrying it finishes: allreduce, all_gather, pull. reduce_scatter and push
are intermediate stages. Every element of every tensor must be made final exactly once per
iteration; the timeline checks it.

**Registry.** Every scheduler registers itself in its own module of this package with
`@register_scheduler(name, description, options)`: the name `comm.scheduler` takes, one line for
the docs and CLIs, and the settings model of its `[comm.<name>]` keys (passed to the class as
keyword arguments), or none. `SCHEDULERS` imports every module of the package before its first
lookup, so a new scheduler is one new module here (docs/schedulers.md, "Adding a scheduler").
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from itertools import count
from typing import Any, TypeVar

from dlcp.comm.costmodel import PRIMITIVES
from dlcp.registry import Entry, Registry
from dlcp.workloads.profile import BYTES_PER_ELEMENT

FINAL_PRIMITIVES = frozenset({"allreduce", "all_gather", "pull"})


@dataclass(frozen=True)
class Segment:
    """Elements [start, stop) of tensor `tensor` (profile index, forward order)."""

    tensor: int
    start: int
    stop: int

    @property
    def elements(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class Op:
    """One collective operation. `segments` are the data it carries, concatenated in this order
    (several tensors when merged, part of one when partitioned). `priority`: smaller = more
    urgent (what a priority-aware network should serve first). `nbytes`: the full message size
    the cost model charges (fp32)."""

    op_id: int
    iteration: int
    primitive: str
    segments: tuple[Segment, ...]
    priority: int

    def __post_init__(self):
        if self.primitive not in PRIMITIVES:
            raise ValueError(f"op {self.op_id}: primitive {self.primitive!r} is not one of {', '.join(PRIMITIVES)}")
        if not self.segments:
            raise ValueError(f"op {self.op_id}: no segments")

    @property
    def nbytes(self) -> int:
        return BYTES_PER_ELEMENT * sum(s.elements for s in self.segments)

    @property
    def final(self) -> bool:
        return self.primitive in FINAL_PRIMITIVES

    @property
    def tensors(self) -> list[int]:
        return [s.tensor for s in self.segments]


class Scheduler(ABC):
    """Base of every scheduler. Subclasses implement the event methods; `register_scheduler` sets
    `name`.

    `describe()` returns its decisions as plain data (groups, partitions, ...) for `prediction_json`.
    """

    name = "scheduler"
    # Whether the order of released operations can depend on timing (which gradients happen to be
    # ready when an operation completes). The ranks of a job must run operations in one order, so
    # such a scheduler decides on one rank and the others follow (dlcp/comm/communicator.py).
    timing_dependent_order = False

    def __init__(self, sizes):
        self.sizes = [int(s) for s in sizes]
        self._op_ids = count()

    def new_op(self, iteration: int, primitive: str, segments, priority: int) -> Op:
        return Op(next(self._op_ids), iteration, primitive, tuple(segments), int(priority))

    def whole(self, tensor: int) -> Segment:
        return Segment(tensor, 0, self.sizes[tensor])

    @abstractmethod
    def on_ready(self, iteration: int, tensor: int, now: float) -> list[Op]:
        """The gradient of `tensor` for `iteration` is ready."""

    @abstractmethod
    def on_complete(self, op_id: int, now: float) -> list[Op]:
        """Operation `op_id` finished."""

    def on_forward(self, iteration: int, tensor: int, now: float) -> list[Op]:
        """The forward of `iteration` reached `tensor`. Most policies do nothing here."""
        return []

    def describe(self) -> dict:
        return {}

    def units(self) -> list[tuple[Segment, ...]]:
        """The segments of every operation an iteration can have, each list once. Policies that
        run on a network (through dlcp/comm/communicator.py) must say; the timeline does not need it."""
        raise NotImplementedError(f"scheduler {self.name!r} does not list its units: it can run on the timeline only")

    def ops_per_iteration(self) -> int:
        """Operations one iteration releases (one per unit unless the scheduler splits primitives)."""
        return len(self.units())


@dataclass(frozen=True, kw_only=True)
class SchedulerEntry(Entry):
    """A registered scheduler: its class, built as cls(profile, cost, workers, **options)."""

    cls: type[Scheduler]

    def kwargs(self, options: Any) -> dict:
        """The constructor's keyword options from a validated options object (None: none)."""
        return options.model_dump() if options is not None else {}

    def build(self, profile, cost, workers: int | None = None, **options) -> Scheduler:
        factory: Callable[..., Scheduler] = self.cls  # registered classes take (profile, cost, workers, **options)
        try:
            return factory(profile, cost, workers, **options)
        except TypeError as e:  # an option the scheduler does not have
            raise ValueError(f"scheduler {self.name!r}: {e}") from None


SCHEDULERS: Registry[SchedulerEntry] = Registry("scheduler", discover="dlcp.comm.schedulers")


S = TypeVar("S", bound=Scheduler)


def register_scheduler(name: str, description: str, options: Any = None) -> Callable[[type[S]], type[S]]:
    """Class decorator: registers the Scheduler subclass as `name` (and sets its `name`), with a
    one-line description and the settings model of its options (dlcp/settings.py), or None."""

    def register(cls: type[S]) -> type[S]:
        cls.name = name
        SCHEDULERS.register(SchedulerEntry(name=name, description=description, options=options, cls=cls))
        return cls

    return register


def make_scheduler(name: str, profile, cost, workers: int | None = None, **options) -> Scheduler:
    """A fresh scheduler `name` for `profile` (those that decide ahead do it here, with `cost` and
    `workers`)."""
    return SCHEDULERS.get(name).build(profile, cost, workers, **options)
