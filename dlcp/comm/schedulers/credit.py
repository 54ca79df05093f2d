"""Executor for policies that split tensors into blocks with priorities and release them under a
credit (ByteScheduler's core loop [C: bytedance/byteps, branch bytescheduler,
bytescheduler/common/bytecore.py], which US-Byte's runtime reuses).

A tensor's blocks enter a priority queue when its gradient is ready. Whenever credit allows, the
most urgent ready block (smallest key) is released as one all-reduce; its bytes count against
the credit until it completes. Deviation from bytecore, on purpose: bytecore releases a block
whenever the remaining credit is > 0, so bytes in flight can exceed the credit by almost one
block; here a block is released only if it fits (bytes in flight + its bytes <= credit), and the
credit must be at least the largest block so the queue can always drain. `credit_bytes=None`
means one block in flight at a time.
"""

from __future__ import annotations

import heapq

from dlcp.comm.schedulers.base import Op, Scheduler, Segment
from dlcp.workloads.profile import BYTES_PER_ELEMENT


class CreditExecutor(Scheduler):
    """blocks[t]: list of (key, Segment) of tensor t; key: tuple, smaller = sent first."""

    name = "credit"
    timing_dependent_order = True  # what is released at a completion depends on what is ready then

    def __init__(self, sizes, blocks, credit_bytes: int | None):
        super().__init__(sizes)
        self.blocks = blocks
        largest = max(BYTES_PER_ELEMENT * seg.elements for bl in blocks for _, seg in bl)
        if credit_bytes is not None and (
            isinstance(credit_bytes, bool) or not isinstance(credit_bytes, int) or credit_bytes < largest
        ):
            raise ValueError(
                f"{self.name}: credit_bytes must be an integer >= the largest block "
                f"({largest} bytes), got {credit_bytes!r}"
            )
        self.credit_bytes = credit_bytes
        self._heap: list = []
        self._inflight: dict[int, int] = {}  # op id -> bytes
        self.inflight_bytes = 0
        self.max_inflight_bytes = 0

    def on_ready(self, iteration: int, tensor: int, now: float) -> list[Op]:
        for key, seg in self.blocks[tensor]:
            heapq.heappush(self._heap, ((iteration, *key), seg.tensor, seg.start, seg))
        return self._release()

    def on_complete(self, op_id: int, now: float) -> list[Op]:
        self.inflight_bytes -= self._inflight.pop(op_id)
        return self._release()

    def _fits(self, nbytes: int) -> bool:
        if self.credit_bytes is None:
            return not self._inflight
        return self.inflight_bytes + nbytes <= self.credit_bytes

    def _release(self) -> list[Op]:
        out = []
        while self._heap:
            (iteration, *key), _, _, seg = self._heap[0]
            nbytes = BYTES_PER_ELEMENT * seg.elements
            if not self._fits(nbytes):
                break  # the most urgent block waits for credit; nothing overtakes it (as bytecore)
            heapq.heappop(self._heap)
            op = self.new_op(iteration, "allreduce", [seg], self.priority_of(key, seg))
            self._inflight[op.op_id] = nbytes
            self.inflight_bytes += nbytes
            self.max_inflight_bytes = max(self.max_inflight_bytes, self.inflight_bytes)
            out.append(op)
        return out

    def priority_of(self, key, seg: Segment) -> int:
        return seg.tensor

    def units(self):
        return [(seg,) for bl in self.blocks for _, seg in bl]
