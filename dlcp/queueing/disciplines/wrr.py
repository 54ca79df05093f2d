"""Weighted round robin, as deficit round robin over a port's queues (docs/pipeline.md, "Queue
disciplines"): each queue q has a weight w_q and a quantum of w_q x QUANTUM_BYTES. The scheduler
visits the queues in the order 7, 6, ..., 0, 7, ... (it starts at 7). A visit to an empty queue
sets its deficit to 0 and moves on. The first time a visit looks at a non-empty queue it adds the
quantum to the queue's deficit; the queue then sends its head packets while the head's frame fits
in the deficit (each one subtracts its frame bytes). When the head does not fit the visit ends and
the deficit stays; when the queue empties its deficit goes to 0 and the visit ends. So over a busy
period each backlogged queue sends bytes in proportion to its weight, an empty queue costs nothing
(work-conserving), and a queue never sends more than its deficit allows on one visit.

The C statement is the QDISC_WRR case of sw_qdisc_pick (dlcp/switch/c/switch_core.h): the same
integer arithmetic, the same order of visits."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any

from pydantic import Field

from dlcp.queueing.registry import N_QUEUES, QUANTUM_BYTES, Discipline, register_discipline
from dlcp.settings import Settings

MAX_WEIGHT = 1000  # quanta stay far below 2^32 bytes
DEFAULT_WEIGHTS = [q + 1 for q in range(N_QUEUES)]  # each priority a larger share, none starved


class WrrOptions(Settings):
    weights: list[Annotated[int, Field(ge=1, le=MAX_WEIGHT)]] = Field(
        DEFAULT_WEIGHTS,
        min_length=N_QUEUES,
        max_length=N_QUEUES,
        description=f"{N_QUEUES} weights 1..{MAX_WEIGHT}, queue 0 first: a backlogged queue q sends "
        f"weight_q x {QUANTUM_BYTES} bytes per round",
    )


class Wrr:
    def __init__(self, options: WrrOptions):
        self.quantum = [w * QUANTUM_BYTES for w in options.weights]
        self.deficit = [0] * N_QUEUES
        self.cur = N_QUEUES - 1  # the queue being visited
        self.fresh = True  # its quantum not yet added on this visit

    def _next(self) -> None:
        self.cur = (self.cur - 1) % N_QUEUES
        self.fresh = True

    def pick(self, queues: Sequence[Sequence[Any]], size_of: Callable[[Any], int]) -> int:
        if not any(queues):
            return -1
        while True:
            q = self.cur
            queue = queues[q]
            if not queue:
                self.deficit[q] = 0
                self._next()
                continue
            if self.fresh:
                self.deficit[q] += self.quantum[q]
                self.fresh = False
            size = size_of(queue[0])
            if size <= self.deficit[q]:
                self.deficit[q] -= size
                if len(queue) == 1:  # it empties: no credit kept for later
                    self.deficit[q] = 0
                    self._next()
                return q
            self._next()


def _c_params(options: WrrOptions) -> list[int]:
    return list(options.weights)


WRR = register_discipline(
    Discipline(
        name="wrr",
        description="weighted round robin: deficit round robin over the queues by [switch.wrr] weights",
        c_id=1,
        reference=Wrr,
        options=WrrOptions,
        c_params=_c_params,
    )
)
