"""A discrete-event, virtual-time timeline of one worker's training iterations (seeds-brief §1).

It drives a `Scheduler` with the events of the §1 model and charges every operation the alpha-beta
cost, so any scheduler's iteration time can be predicted without a network.

The model:
* Compute is sequential on one device. Iteration k runs its forward layer by layer (tensor 0
  first), then its backward from tensor L-1 down to 0; tensor l's gradient is ready when its
  backward ends: r[l] = backward start + sum(backward_s[l:]). The next forward starts when the
  backward of tensor 0 ends.
* Forward of tensor l in iteration k+1 starts at max(end of the forward of tensor l-1, the time
  the scheduler has made all of tensor l's elements of iteration k final). Iteration 0 starts
  from given parameters and waits for nothing. Just before that wait, the scheduler hears
  `on_forward` (DeAR issues its next all-gather there).
* One communication channel: operations run one at a time, never overlapping, in the order the
  scheduler released them (FIFO); an operation released at t starts at max(t, channel free) and
  lasts `cost.op_s(primitive, nbytes)`. This is the one-collective-at-a-time channel the papers
  plan with (MG-WFBP, US-Byte, DeAR); concurrent collectives sharing bandwidth are not modelled.
* Events at the same instant: compute events (gradient ready, forward reached) are handled
  before operation completions, so a scheduler choosing what to send at a completion already
  sees every gradient ready at that instant.

Iteration time: the period between the starts of two consecutive backward passes, i.e. from the
start of iteration k's backward to the end of iteration k+1's forward (which is where iteration
k+1's backward starts). `simulate` runs `iterations` of them and reports each period; with
schedulers that keep no state across iterations (all of ours) every period is the same, because
each iteration's communication is over before the next backward starts, so the last period is
the steady state. It is at least the compute time, sum(forward_s) + sum(backward_s); the excess is
communication the scheduler failed to hide.
"""

from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass, field

from dlcp.comm.costmodel import CostModel
from dlcp.comm.schedulers.base import Op, Scheduler
from dlcp.workloads.profile import Profile

# event kinds; the rank orders simultaneous events: compute first, then completions
_FWD_END, _BWD_END, _OP_END = "fwd_end", "bwd_end", "op_end"
_RANK = {_FWD_END: 0, _BWD_END: 0, _OP_END: 1}


def ready_times(backward_s) -> list[float]:
    """r[l]: when tensor l's gradient is ready, seconds after the backward pass starts."""
    r = [0.0] * len(backward_s)
    t = 0.0
    for l in range(len(backward_s) - 1, -1, -1):
        t += backward_s[l]
        r[l] = t
    return r


@dataclass(frozen=True)
class OpRecord:
    op: Op
    released_s: float
    start_s: float
    end_s: float


@dataclass
class Timeline:
    """What happened. Times in seconds from the start of iteration 0's forward."""

    scheduler: str
    iterations: int
    compute_s: float
    backward_start_s: list[float]  # iterations + 1 entries; the last = end of the final forward
    forward_start_s: list[list[float]]  # per iteration 0..iterations, per tensor
    ops: list[OpRecord] = field(default_factory=list)  # in completion order

    @property
    def periods(self) -> list[float]:
        b = self.backward_start_s
        return [b[k + 1] - b[k] for k in range(self.iterations)]

    @property
    def iteration_s(self) -> float:
        """The steady-state iteration time (see module docstring)."""
        return self.periods[-1]

    def ops_of(self, iteration: int) -> list[OpRecord]:
        return sorted((r for r in self.ops if r.op.iteration == iteration), key=lambda r: r.start_s)


class _Coverage:
    """Which elements of each (iteration, tensor) are final; refuses any element twice."""

    def __init__(self, sizes, scheduler_name):
        self.sizes, self.name = sizes, scheduler_name
        self.intervals: dict[tuple[int, int], list[tuple[int, int]]] = {}
        self.count: dict[tuple[int, int], int] = {}

    def add(self, iteration: int, tensor: int, start: int, stop: int) -> None:
        key = (iteration, tensor)
        ivs = self.intervals.setdefault(key, [])
        i = bisect.bisect_left(ivs, (start, stop))
        if (i > 0 and ivs[i - 1][1] > start) or (i < len(ivs) and ivs[i][0] < stop):
            raise ValueError(
                f"scheduler {self.name!r}: elements [{start}, {stop}) of tensor {tensor} "
                f"(iteration {iteration}) made final twice"
            )
        ivs.insert(i, (start, stop))
        self.count[key] = self.count.get(key, 0) + stop - start

    def complete(self, iteration: int, tensor: int) -> bool:
        return self.count.get((iteration, tensor), 0) == self.sizes[tensor]


def simulate(profile: Profile, scheduler: Scheduler, cost: CostModel, iterations: int = 2) -> Timeline:
    """Run `iterations` training iterations (plus the forward that closes the last one)."""
    if not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"timeline: iterations must be an integer >= 1, got {iterations!r}")
    L, sizes, tf, tb = len(profile), profile.sizes, profile.forward_s, profile.backward_s
    name = getattr(scheduler, "name", type(scheduler).__name__)
    tl = Timeline(
        name,
        iterations,
        profile.compute_s,
        [math.nan] * (iterations + 1),
        [[math.nan] * L for _ in range(iterations + 1)],
    )
    coverage = _Coverage(sizes, name)
    ready = [0] * (iterations + 1)  # per iteration: gradients ready so far (L-1 down)
    events: list = []
    seq = 0
    queue: list[tuple[Op, float]] = []  # released, not started (FIFO)
    qhead = 0
    running: dict[int, tuple[Op, float, float]] = {}
    seen_ids: set[int] = set()
    channel_busy = False
    waiting: tuple[int, int] | None = None  # (iteration, tensor) whose forward waits for its parameters
    now = 0.0

    def push(t, kind, a, b=0):
        nonlocal seq
        heapq.heappush(events, (t, _RANK[kind], seq, kind, a, b))
        seq += 1

    def check(op: Op):
        if op.op_id in seen_ids:
            raise ValueError(f"scheduler {name!r}: op id {op.op_id} used twice")
        seen_ids.add(op.op_id)
        if not 0 <= op.iteration < iterations:
            raise ValueError(
                f"scheduler {name!r}: op {op.op_id} is for iteration {op.iteration}, outside 0..{iterations - 1}"
            )
        for s in op.segments:
            if not 0 <= s.tensor < L or not 0 <= s.start < s.stop <= sizes[s.tensor]:
                raise ValueError(f"scheduler {name!r}: op {op.op_id} segment {s} is outside the tensor")
            # tensors become ready from L-1 down: tensor l is ready once L - l of them are
            if ready[op.iteration] < L - s.tensor:
                raise ValueError(
                    f"scheduler {name!r}: op {op.op_id} sends tensor {s.tensor} of "
                    f"iteration {op.iteration} before its gradient is ready"
                )

    def release(ops):
        for op in ops:
            check(op)
            queue.append((op, now))
        start_channel()

    def start_channel():
        nonlocal channel_busy, qhead
        if channel_busy or qhead == len(queue):
            return
        op, released = queue[qhead]
        qhead += 1
        channel_busy = True
        end = now + cost.op_s(op.primitive, op.nbytes)
        running[op.op_id] = (op, released, now)
        push(end, _OP_END, op.op_id)

    def gate_open(it, l):
        return it == 0 or coverage.complete(it - 1, l)

    def reach(it, l):
        """The forward of iteration `it` arrives at tensor l."""
        nonlocal waiting
        release(scheduler.on_forward(it, l, now))
        if gate_open(it, l):
            start_forward(it, l)
        else:
            waiting = (it, l)

    def start_forward(it, l):
        tl.forward_start_s[it][l] = now
        push(now + tf[l], _FWD_END, it, l)

    reach(0, 0)
    done = False
    while events:
        now, _, _, kind, a, b = heapq.heappop(events)
        if kind == _FWD_END:
            it, l = a, b
            if l + 1 < L:
                reach(it, l + 1)
            else:
                tl.backward_start_s[it] = now
                if it == iterations:
                    done = True
                    break
                push(now + tb[L - 1], _BWD_END, it, L - 1)
        elif kind == _BWD_END:
            it, l = a, b
            ready[it] += 1
            release(scheduler.on_ready(it, l, now))
            if l > 0:
                push(now + tb[l - 1], _BWD_END, it, l - 1)
            else:
                reach(it + 1, 0)
        else:
            op, released, started = running.pop(a)
            channel_busy = False
            tl.ops.append(OpRecord(op, released, started, now))
            if op.final:
                for s in op.segments:
                    coverage.add(op.iteration, s.tensor, s.start, s.stop)
            release(scheduler.on_complete(op.op_id, now))
            start_channel()
            if waiting is not None and gate_open(*waiting):
                it, l = waiting
                waiting = None
                start_forward(it, l)
    if not done:
        it, l = waiting if waiting else (None, None)
        raise RuntimeError(
            f"scheduler {name!r} stalled: the forward of iteration {it} waits for "
            f"tensor {l}, which no pending operation will make final"
        )
    return tl
