"""The communication layer between a worker's trainer and its collective: gradient-ready events in,
a scheduler's operations through a `Collective`, per-message aggregates out.

    comm.begin(it)
    for msg in workload.compute(it):     # backward order, as gradients become ready
        comm.submit(it, msg)           # a ready event: (tensor, size, time)
    aggregates = comm.wait(it)         # {msg_id: Aggregate}, as RingAllReduce gave them

**Tensors.** The scheduler's tensors are the workload's messages in forward order (index 0 = the
input side), so a profile's tensor i and message i line up when messages are layers.

**Events.** `submit` is `on_ready(iteration, tensor, now)`; a finished operation is
`on_complete`; `forward_reached(it, tensor)` is `on_forward` (DeAR starts its next all-gather
there). Until the trainer reports its forward layer by layer, `wait(it)` reports the forward of
it + 1 reaching every tensor: with this blocking contract the next forward cannot start before
every parameter is final anyway, so DeAR's all-gathers then run back to back.

**The channel.** Released operations run one at a time, in release order (FIFO), as on the
timeline's channel (dlcp/comm/timeline.py): the send order the timeline predicts is the order the
network sees. An operation starts once the one before it is done and its data is here.

**One order on every rank.** Every rank must run the same operations in the same order (a ring
step waits for its neighbour's). Grouped schedulers and DeAR release in an order fixed when they are built;
policies whose order depends on timing (ByteScheduler's and US-Byte's credit loop:
`Scheduler.timing_dependent_order`) run on rank 0 only, which announces each operation it
releases (`OrderChannel`: its slot and primitive, in release order); the other ranks run the
announced operations in that order, each once its data is ready here (`announced`, called by a
reader thread per iteration, or by an event-driven host as announcements arrive, in any order). That is Horovod's
coordinator, with rank 0 deciding from its own readiness [D].

**Results.** Final operations (all-reduce, all-gather) scatter their sums and counts back into
per-tensor buffers; a reduce-scatter's `Partial` waits for the all-gather of the same unit. When
every element of a tensor is final, `on_final(iteration, msg_id, Aggregate)` runs (for a per-layer
parameter gate), and `wait` returns once every tensor is. Without threads (the simulated hosts,
dlcp/comm/evented.py): `backward_done(it)` after the last submit, `on_done(it)` when the iteration
is over, then `collect(it)`; the scheduler's `now` comes from the `clock` the communicator is given.
"""

from __future__ import annotations

import collections
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import cast

import numpy as np

from dlcp.comm.api import Collective, Handle, OpData, Partial
from dlcp.comm.packets import sub_layers
from dlcp.comm.schedulers.base import Op, Scheduler, Segment
from dlcp.transport.api import TransportError
from dlcp.workloads.contract import Aggregate, GradMessage, MessageLayout, ParamChunk

PRIMITIVE_CODES = {"allreduce": 0, "reduce_scatter": 1, "all_gather": 2}
PRIMITIVE_NAMES = {v: k for k, v in PRIMITIVE_CODES.items()}


def forward_order(layouts: list[MessageLayout]) -> list[MessageLayout]:
    """The workload's messages as the scheduler's tensors: forward order, input side first."""
    return sorted(layouts, key=lambda lay: (lay.layer_first, lay.layer_last, lay.msg_id))


def param_means(aggs: dict[int, Aggregate]) -> dict[int, ParamChunk]:
    """DS-Sync's averaged parameters: each message's sum divided by how many ranks' values arrived;
    where none did (count 0) the chunk is marked lost (the rank keeps its own)."""
    out = {}
    for msg_id, agg in aggs.items():
        lost = agg.count == 0
        mean = np.where(lost, np.float32(0), agg.total / np.maximum(agg.count, 1)).astype(np.float32)
        out[msg_id] = ParamChunk(mean, lost)
    return out


class OrderChannel(ABC):
    """Rank 0's release order, told to the other ranks (see the module docstring). A channel that
    `pushes` delivers announcements by calling `Communicator.announced` itself (an event-driven
    host); otherwise the communicator reads them with `receive` in a thread per iteration."""

    pushes = False

    @abstractmethod
    def announce(self, iteration: int, seq: int, slot: int, primitive: str) -> None:
        """Leader: the seq-th operation of `iteration` is `primitive` on unit `slot`."""

    @abstractmethod
    def receive(self, iteration: int, seq: int, timeout_s: float) -> tuple[int, str]:
        """Follower: (slot, primitive) of the seq-th operation of `iteration` (blocks)."""


class _Iteration:
    def __init__(self, tensors: list[MessageLayout], sizes_only: bool = False):
        self.values: dict[int, np.ndarray | None] = {}
        # sizes only: no per-value sums or counts, only how many values fell short
        self.total = [] if sizes_only else [np.zeros(t.n_values, np.float32) for t in tensors]
        self.count = [] if sizes_only else [np.zeros(t.n_values, np.uint16) for t in tensors]
        self.short = 0
        self.final = [0] * len(tensors)  # elements made final, per tensor
        self.n_final = 0  # tensors complete
        self.partial: dict[int, Partial] = {}  # slot -> reduce-scatter state
        self.released = 0  # operations released (leader) or announced (follower)
        self.announced: dict[int, tuple[int, str]] = {}  # follower: seq -> (slot, primitive), not queued yet
        self.forward_told = False
        self.follower: threading.Thread | None = None
        self.done = threading.Event()
        self.error: BaseException | None = None


class Communicator:
    """One worker's communication layer (see the module docstring).

    scheduler: its tensors are `forward_order(layouts)`; collective: this rank's; order: needed
    when the scheduler's order depends on timing and the job has more than one rank; on_final:
    called with (iteration, msg_id, Aggregate) as each message's data becomes final; on_done:
    called with the iteration once every message is final or the iteration failed (then `collect`
    has its aggregates without blocking); clock: the scheduler's `now` (simulated time on ns-3);
    sizes_only: messages carry no values (workload.payload = "sizes"), aggregates are None."""

    # (rank, iteration, slot, primitive) of every operation as it starts, when set (tests, diagnostics)
    on_start: Callable[[int, int, int, str], None] | None = None

    def __init__(
        self,
        scheduler: Scheduler,
        collective: Collective,
        layouts: list[MessageLayout],
        n_layers: int,
        *,
        order: OrderChannel | None = None,
        timeout_s: float = 60.0,
        on_final: Callable[[int, int, Aggregate], None] | None = None,
        on_done: Callable[[int], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sizes_only: bool = False,
    ):
        self.sched, self.coll = scheduler, collective
        self.tensors = forward_order(layouts)
        if [t.n_values for t in self.tensors] != list(scheduler.sizes):
            raise ValueError(
                f"scheduler {scheduler.name!r} plans {len(scheduler.sizes)} tensors of sizes that do not "
                f"match the workload's {len(self.tensors)} messages"
            )
        self.index = {t.msg_id: i for i, t in enumerate(self.tensors)}
        self.n_layers, self.timeout_s, self.on_final, self.on_done = n_layers, timeout_s, on_final, on_done
        self.clock, self.sizes_only = clock, sizes_only
        self.units = scheduler.units()
        self.slot_of = {(u[0].tensor, u[0].start): s for s, u in enumerate(self.units)}
        self.unit_layouts = [self._unit_layout(s, u) for s, u in enumerate(self.units)]
        self.follower = scheduler.timing_dependent_order and collective.world > 1 and collective.rank != 0
        self.leader = scheduler.timing_dependent_order and collective.world > 1 and collective.rank == 0
        if (self.follower or self.leader) and order is None:
            raise ValueError(
                f"scheduler {scheduler.name!r} decides its order at run time: the ranks need an order channel"
            )
        self.order = order
        self._lock = threading.Lock()
        self._iters: dict[int, _Iteration] = {}
        self._queue: collections.deque[Op] = collections.deque()
        self._running: Op | None = None
        self._follow_ids = iter(range(-1, -(1 << 62), -1))  # op ids of announced operations (followers)
        self.ops_run = 0

    # --- the trainer's side ----------------------------------------------------------------------

    def begin(self, iteration: int) -> None:
        self.coll.begin(iteration)

    def submit(self, iteration: int, msg: GradMessage) -> None:
        """The gradient of message `msg` is ready (its values stay valid until `wait` returns)."""
        t = self.index.get(msg.msg_id)
        size = self.tensors[t].n_values if self.sizes_only and t is not None else getattr(msg.values, "size", -1)
        if t is None or size != self.tensors[t].n_values:
            raise ValueError(f"message {msg.msg_id} of {size} values is not one of the planned messages")
        with self._lock:
            st = self._iter(iteration)
            if t in st.values:
                raise ValueError(f"message {msg.msg_id} of iteration {iteration} submitted twice")
            st.values[t] = None if self.sizes_only else np.ascontiguousarray(msg.values, dtype=np.float32).reshape(-1)
            if self.follower:
                self._follow(iteration, st)
            else:
                self._release(self.sched.on_ready(iteration, t, self.clock()))
            start = self._next()
        self._start(start)

    def forward_reached(self, iteration: int, tensor: int) -> None:
        """The forward of `iteration` reached `tensor` (forward order)."""
        if self.follower:
            return
        with self._lock:
            self._release(self.sched.on_forward(iteration, tensor, self.clock()))
            start = self._next()
        self._start(start)

    def wait(self, iteration: int) -> dict[int, Aggregate]:
        """Every message's aggregate of `iteration` (every message must have been submitted)."""
        st = self.backward_done(iteration)
        limit = self.timeout_s * max(4, 2 * self.sched.ops_per_iteration())
        if not st.done.wait(limit):
            raise TransportError(
                f"communication of iteration {iteration} not done after {limit:g} s "
                f"({st.n_final} of {len(self.tensors)} messages final)"
            )
        # values mode: every aggregate is there (sizes only, read with collect, has None per message)
        return cast(dict[int, Aggregate], self.collect(iteration))

    def backward_done(self, iteration: int) -> _Iteration:
        """Every message of `iteration` has been submitted: report the next forward reaching every
        tensor (see the module docstring), once."""
        with self._lock:
            st = self._iter(iteration)
            tell = not st.forward_told
            st.forward_told = True
        if tell:
            for t in range(len(self.tensors)):
                self.forward_reached(iteration + 1, t)
        return st

    def collect(self, iteration: int) -> dict[int, Aggregate | None]:
        """The aggregates of a finished iteration (after `on_done`, or `wait`), and forget it;
        None per message when sizes only."""
        with self._lock:
            st = self._iters.pop(iteration)
        if st.error is not None:
            raise TransportError(f"communication of iteration {iteration} failed: {st.error}") from st.error
        if self.sizes_only:
            return {lay.msg_id: None for lay in self.tensors}
        world = self.coll.group_size(iteration)
        return {
            lay.msg_id: Aggregate(lay.msg_id, st.total[i], st.count[i], world) for i, lay in enumerate(self.tensors)
        }

    def short_values(self, iteration: int) -> int:
        """Sizes only: values of `iteration` holding fewer contributions than the group (before collect)."""
        return self._iters[iteration].short

    def average(self, iteration: int, params: dict[int, np.ndarray]) -> dict[int, ParamChunk]:
        """DS-Sync's parameter averaging: every message's parameters through the collective (in
        message order), divided by how many ranks' values arrived; where none did (count 0), the
        chunk is marked lost and the rank keeps its own."""
        self.submit_parameters(iteration, params)
        return param_means(self.wait(iteration))

    def submit_parameters(self, iteration: int, params: dict[int, np.ndarray] | None) -> None:
        """Every message's parameters into the collective, in message order, then `backward_done`
        (DS-Sync's averaging; `param_means` of the aggregates is the average). None: sizes only."""
        for lay in sorted(self.tensors, key=lambda lay: lay.msg_id):
            values = None if params is None else np.asarray(params[lay.msg_id], np.float32)
            self.submit(iteration, GradMessage(lay, values, self.n_layers))
        self.backward_done(iteration)

    def close(self) -> None:
        self.coll.close()

    # --- operations ------------------------------------------------------------------------------

    def _iter(self, iteration: int) -> _Iteration:
        if iteration not in self._iters:
            self._iters[iteration] = _Iteration(self.tensors, self.sizes_only)
        return self._iters[iteration]

    def _slot(self, op: Op) -> int:
        s = op.segments[0]
        slot = self.slot_of.get((s.tensor, s.start))
        if slot is None or tuple(op.segments) != self.units[slot]:
            raise ValueError(
                f"scheduler {self.sched.name!r}: op {op.op_id} carries {op.segments}, not one of its units"
            )
        return slot

    def _release(self, ops: list[Op]) -> None:
        """Queue ops (lock held); the leader announces them in this order."""
        for op in ops:
            slot = self._slot(op)
            if self.leader:
                assert self.order is not None  # a leader has one (checked in __init__)
                st = self._iter(op.iteration)
                self.order.announce(op.iteration, st.released, slot, op.primitive)
                st.released += 1
            self._queue.append(op)

    def _follow(self, iteration: int, st: _Iteration) -> None:
        """Start this iteration's announcement reader (follower; lock held)."""
        assert self.order is not None  # a follower has one (checked in __init__)
        if st.follower is None and not self.order.pushes:
            st.follower = threading.Thread(
                target=self._read_order, args=(iteration, st), daemon=True, name=f"order-{self.coll.rank}-{iteration}"
            )
            st.follower.start()

    def _read_order(self, iteration: int, st: _Iteration) -> None:
        assert self.order is not None  # a follower has one (checked in __init__)
        try:
            for seq in range(self.sched.ops_per_iteration()):
                slot, primitive = self.order.receive(iteration, seq, self.timeout_s * 4)
                self.announced(iteration, seq, slot, primitive)
        except BaseException as e:  # noqa: BLE001 (the iteration cannot finish: tell wait())
            self._fail(st, e)

    def announced(self, iteration: int, seq: int, slot: int, primitive: str) -> None:
        """Follower: the leader's seq-th operation of `iteration` (announcements may come in any
        order and before this rank's own data; they are queued in seq order)."""
        if not 0 <= slot < len(self.units):
            raise ValueError(f"announced unit {slot} outside 0..{len(self.units) - 1}")
        if primitive not in PRIMITIVE_CODES:
            raise ValueError(f"announced primitive {primitive!r} is not one of {', '.join(PRIMITIVE_CODES)}")
        with self._lock:
            st = self._iter(iteration)
            st.announced[seq] = (slot, primitive)
            while st.released in st.announced:
                slot, primitive = st.announced.pop(st.released)
                st.released += 1
                self._queue.append(Op(next(self._follow_ids), iteration, primitive, self.units[slot], 0))
            start = self._next()
        self._start(start)

    def _ready(self, op: Op) -> bool:
        st = self._iters.get(op.iteration)
        if st is None:
            return False
        if op.primitive == "all_gather":
            return self._slot(op) in st.partial
        return all(s.tensor in st.values for s in op.segments)

    def _next(self) -> tuple[Op, OpData, _Iteration] | None:
        """The operation to start now, if the channel is free and its data is here (lock held)."""
        if self._running is not None or not self._queue or not self._ready(self._queue[0]):
            return None
        op = self._queue.popleft()
        self._running = op
        st = self._iters[op.iteration]
        slot = self._slot(op)
        if op.primitive == "all_gather":
            values = np.zeros(0, np.float32)
        elif self.sizes_only:
            values = None
        else:
            given = cast(dict[int, np.ndarray], st.values)  # values mode: no None
            values = np.concatenate([given[s.tensor][s.start : s.stop] for s in op.segments])
        label = self.tensors[op.segments[0].tensor].msg_id
        return op, OpData(op.iteration, slot, values, self.unit_layouts[slot], self.n_layers, label=label), st

    def _start(self, what) -> None:
        """Start an operation (lock not held: a collective may complete it at once)."""
        if what is None:
            return
        op, data, st = what
        self.ops_run += 1
        if self.on_start is not None:
            self.on_start(self.coll.rank, op.iteration, data.slot, op.primitive)
        try:
            if op.primitive == "allreduce":
                h = self.coll.all_reduce(data)
            elif op.primitive == "reduce_scatter":
                h = self.coll.reduce_scatter(data)
            elif op.primitive == "all_gather":
                with self._lock:
                    partial = st.partial.pop(data.slot)
                h = self.coll.all_gather(data, partial)
            else:
                raise ValueError(f"scheduler {self.sched.name!r}: primitive {op.primitive!r} needs a parameter server")
        except BaseException as e:  # noqa: BLE001
            self._fail(st, e)
            return
        h.add_done_callback(lambda done: self._on_done(op, st, done))

    def _on_done(self, op: Op, st: _Iteration, h: Handle) -> None:
        if h.error is not None:
            self._fail(st, h.error)
            return
        finals = []
        try:
            with self._lock:
                if op.primitive == "reduce_scatter":
                    st.partial[self._slot(op)] = h.result
                else:
                    finals = self._scatter(op, st, h.result)
                self._running = None
                if not self.follower:
                    self._release(self.sched.on_complete(op.op_id, self.clock()))
                start = self._next()
                done = st.n_final == len(self.tensors)
        except BaseException as e:  # noqa: BLE001 (a scheduler or collective bug: the iteration cannot finish)
            self._fail(st, e)
            return
        self._start(start)
        if self.on_final is not None and not self.sizes_only:
            for t in finals:
                lay = self.tensors[t]
                self.on_final(
                    op.iteration,
                    lay.msg_id,
                    Aggregate(lay.msg_id, st.total[t], st.count[t], self.coll.group_size(op.iteration)),
                )
        if done:
            self._finished(op.iteration, st)

    def _scatter(self, op: Op, st: _Iteration, res) -> list[int]:
        """Put a final result back into its tensors; the tensors it completed (lock held)."""
        offset, finished = 0, []
        if self.sizes_only:
            st.short += res.short
        for s in op.segments:
            n = s.elements
            if not self.sizes_only:
                st.total[s.tensor][s.start : s.stop] = res.total[offset : offset + n]
                st.count[s.tensor][s.start : s.stop] = res.count[offset : offset + n]
            offset += n
            st.final[s.tensor] += n
            if st.final[s.tensor] > self.tensors[s.tensor].n_values:
                raise ValueError(f"scheduler {self.sched.name!r}: elements of tensor {s.tensor} made final twice")
            if st.final[s.tensor] == self.tensors[s.tensor].n_values:
                st.n_final += 1
                finished.append(s.tensor)
        return finished

    def _fail(self, st: _Iteration, error: BaseException) -> None:
        with self._lock:
            first = st.error is None and not st.done.is_set()
            if st.error is None:
                st.error = error
            iteration = next((k for k, v in self._iters.items() if v is st), None)
        if first and iteration is not None:
            self._finished(iteration, st)
        else:
            st.done.set()

    def _finished(self, iteration: int, st: _Iteration) -> None:
        st.done.set()
        if self.on_done is not None:
            self.on_done(iteration)

    def _unit_layout(self, slot: int, unit: tuple[Segment, ...]) -> MessageLayout:
        """The layer segments of a unit's buffer (its segments concatenated), for tagging."""
        starts: list[int] = []
        ids: list[int] = []
        offset = 0
        for s in unit:
            seg_starts, seg_ids = sub_layers(self.tensors[s.tensor], s.start, s.stop)
            for a, lid in zip(seg_starts, seg_ids):
                if ids and ids[-1] == lid:
                    continue
                starts.append(offset + a)
                ids.append(lid)
            offset += s.elements
        return MessageLayout(slot, offset, tuple(starts), tuple(ids))
