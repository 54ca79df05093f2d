"""The communication layer's interface: what a collective over a group of ranks offers, and the
handle that tells when one of its operations is done.

A `Collective` runs operations for one rank of a group: `all_reduce`, `reduce_scatter` and
`all_gather` (the halves DeAR runs apart), each on an `OpData` (this rank's contribution: a flat
fp32 buffer with the layer segments that tag its packets). Each call returns at once with a
`Handle`; the result arrives later, and `add_done_callback(fn)` runs `fn(handle)` once it does, in
the thread that completes it (a collective's worker thread, or the caller's if it completes at
once). Callbacks must not block: they record and start more work. `wait(timeout)` blocks for the
result (and raises the operation's error).

Results:
- `Reduced`: per value the sum over the ranks whose contribution arrived (`total`) and how many
  that is (`count`), over `world` ranks (the group's size for this operation; DS-Sync groups are
  smaller than the job). Lossless: count == world everywhere.
- `Partial`: what reduce-scatter leaves on a rank (the owned chunks reduced, the rest in flight);
  opaque to the caller, handed back to `all_gather` of the same operation.

PS push / pull (dlcp/comm/ps.py: PSClient, PSServer) return the same `Handle`s.
Implementations: `SteppedCollective` (ring, MultiTree, DS-Sync groups over the transport,
dlcp/comm/stepped.py), `InMemoryGroup` (in-process, dlcp/comm/inmemory.py), `TransportAllToAll`
and `GlooAllReduce` (the DDP hook's, dlcp/comm/alltoall.py).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dlcp.transport.api import TransportError
from dlcp.workloads.contract import MessageLayout


class Handle:
    """The completion of one operation (see the module docstring)."""

    def __init__(self, what: str):
        self.what = what
        self._lock = threading.Lock()
        self._event = threading.Event()
        self._callbacks: list[Callable[[Handle], None]] = []
        self.result: Any = None
        self.error: BaseException | None = None

    def done(self) -> bool:
        return self._event.is_set()

    def add_done_callback(self, fn: Callable[[Handle], None]) -> None:
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(fn)
                return
        fn(self)

    def set_result(self, result) -> None:
        self._finish(result, None)

    def set_error(self, error: BaseException) -> None:
        self._finish(None, error)

    def _finish(self, result, error) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self.result, self.error = result, error
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn(self)

    def wait(self, timeout: float | None = None):
        if not self._event.wait(timeout):
            raise TransportError(f"{self.what} not done after {timeout} s")
        if self.error is not None:
            raise self.error
        return self.result


def completed(what: str, result) -> Handle:
    h = Handle(what)
    h.set_result(result)
    return h


@dataclass
class OpData:
    """This rank's part of one operation. `slot` names the operation within its iteration (the
    wire ids derive from it: dlcp/comm/wire_ids.py); `layout` gives the layer segments of `values`
    (its msg_id is the slot) for tagging; `tags` may carry ready-made packet tags instead."""

    iteration: int
    slot: int
    values: np.ndarray | None  # flat float32 (None: sizes only); the collective reads it, never writes it
    layout: MessageLayout
    n_layers: int
    tags: Any = None  # dlcp.wire.tagging.Tags of the packets, when the caller tagged them
    label: int | None = None  # msg_id in the records (the workload message it starts with); None: slot

    @property
    def record_id(self) -> int:
        return self.slot if self.label is None else self.label

    @property
    def what(self) -> str:
        return f"operation {self.slot} of iteration {self.iteration}"


@dataclass
class Reduced:
    total: np.ndarray | None  # float32; None when the run carries sizes only (workload.payload = "sizes")
    count: np.ndarray | None  # uint16; None with sizes only
    world: int
    short: int | None = None  # sizes only: values holding fewer than `world` contributions


class Partial:
    """Reduce-scatter's state, for all_gather of the same operation (contents are the collective's)."""

    def __init__(self, state):
        self.state = state


class Collective(ABC):
    """One rank's side of a group's collectives (see the module docstring)."""

    rank: int  # this rank (group rank = worker rank)
    world: int  # ranks in the job

    def begin(self, iteration: int) -> None:  # noqa: B027
        """A new iteration starts (transports forget stale messages)."""

    @abstractmethod
    def all_reduce(self, op: OpData) -> Handle:
        """Handle of a `Reduced`."""

    def reduce_scatter(self, op: OpData) -> Handle:
        """Handle of a `Partial` (default: a whole all-reduce, kept for all_gather)."""
        h = Handle(op.what)
        inner = self.all_reduce(op)
        inner.add_done_callback(lambda d: h.set_error(d.error) if d.error else h.set_result(Partial(d.result)))
        return h

    def all_gather(self, op: OpData, partial: Partial) -> Handle:
        """Handle of a `Reduced`, from reduce_scatter's `partial` of the same operation."""
        return completed(op.what, partial.state)

    def group_size(self, iteration: int) -> int:
        """How many ranks an operation of `iteration` reduces over (the job's workers, or a group's)."""
        return self.world

    def close(self) -> None:  # noqa: B027
        pass
