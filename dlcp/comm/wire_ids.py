"""The one allocator of wire message ids: the 16-bit `msg_id` of the DLCP header.

The transport tells messages apart by (source, destination, iteration mod 2^16, phase, msg_id),
so an id only has to be unique among the messages one rank sends to another in one iteration and
phase. Every rank computes the ids from the plan alone (no negotiation), so both ends of a
message agree:

- an operation's **slot** is its place in the plan's list of data units (a group of merged
  tensors, a tensor, a partition, a US-Byte block: `Scheduler.units()`, sorted by first tensor
  and element), or the message index where there is no scheduler (PS, the DDP hook's buckets);
- **steps of a collective** (ring steps, MultiTree tree transfers, a DS-Sync group's ring): the
  transfers of one operation between one (src, dst) pair in one phase are numbered 0, 1, ... in
  (step, chunk) order (`transfer_ids`); `stride` is the most any pair needs (ring: P-1; MultiTree:
  the most tree transfers one link carries in a phase; DS-Sync: the largest group's size - 1).
  A step's msg_id is `slot * stride + local`, in phase RS (reduce transfers) or AG (copies). A
  reduce-scatter and the all-gather of the same slot (DeAR) are therefore apart by phase;
- **PS** push and pull and the DDP hook's all-to-all: `slot` (phases PUSH, PULL, P2P);
- **P2P control** of an all-reduce worker (which has no hook buckets): the leader's order
  announcements take `0 .. A - 1` (A = operations per iteration: one per unit, two with DeAR's
  reduce-scatter and all-gather), re-sync of workload message m takes `A + m`;
- **groups** (DS-Sync): a rank is in one group per iteration and the iteration is in the header,
  so groups need no ids of their own.

Within an iteration no two of these collide: different slots cover disjoint id ranges of a phase,
different transfers of one slot and pair get different locals, and the P2P users own disjoint
ranges. Construction fails with one line when an iteration needs more than 65,536 ids in a phase.
"""

from __future__ import annotations

from collections import defaultdict

from dlcp.wire.header import PHASE_AG, PHASE_RS

MSG_ID_SPACE = 1 << 16


class WireIdError(ValueError):
    pass


class WireIds:
    """Ids of one plan (see the module docstring). `what` names the plan in errors."""

    def __init__(self, slots: int, stride: int = 1, announcements: int = 0, messages: int = 0, what: str = "plan"):
        if slots < 1 or stride < 1 or messages < 0 or announcements < 0:
            raise WireIdError(
                f"wire msg_id: {what}: slots {slots}, stride {stride}, announcements {announcements} "
                f"and messages {messages} must be positive"
            )
        if slots * stride > MSG_ID_SPACE:
            raise WireIdError(
                f"wire msg_id: {what} needs {slots} operations x {stride} step ids = "
                f"{slots * stride} ids per iteration and phase; the 16-bit msg_id holds {MSG_ID_SPACE}"
            )
        if announcements + messages > MSG_ID_SPACE:
            raise WireIdError(
                f"wire msg_id: {what} needs {announcements + messages} control ids per iteration; "
                f"the 16-bit msg_id holds {MSG_ID_SPACE}"
            )
        self.slots, self.stride, self.what = slots, stride, what
        self.announcements, self.messages = announcements, messages

    def _slot(self, slot: int) -> int:
        if not 0 <= slot < self.slots:
            raise WireIdError(f"wire msg_id: {self.what}: slot {slot} outside 0..{self.slots - 1}")
        return slot

    def step(self, slot: int, local: int) -> int:
        """msg_id of transfer `local` (transfer_ids) of operation `slot` between one pair."""
        if not 0 <= local < self.stride:
            raise WireIdError(f"wire msg_id: {self.what}: step id {local} outside 0..{self.stride - 1}")
        return self._slot(slot) * self.stride + local

    def message(self, slot: int) -> int:
        """msg_id of a one-message operation (PS push / pull, an all-to-all bucket)."""
        return self._slot(slot)

    def announcement(self, seq: int) -> int:
        """P2P msg_id of the leader's seq-th order announcement of an iteration."""
        if not 0 <= seq < self.announcements:
            raise WireIdError(f"wire msg_id: {self.what}: announcement {seq} outside 0..{self.announcements - 1}")
        return seq

    def resync(self, message: int) -> int:
        """P2P msg_id of the re-sync of workload message `message`."""
        if not 0 <= message < self.messages:
            raise WireIdError(f"wire msg_id: {self.what}: re-sync of message {message} outside 0..{self.messages - 1}")
        return self.announcements + message


def phase_of(op: str) -> int:
    """Wire phase of a plan transfer: reduce transfers travel as RS, copies as AG."""
    return PHASE_RS if op == "reduce" else PHASE_AG


def transfer_ids(schedule) -> tuple[dict[tuple[int, int], int], int]:
    """({(step, index in step): local id}, stride) of a plans.Schedule: transfers of one
    (src, dst, phase) numbered 0, 1, ... in (step, chunk) order; stride = the most of any triple."""
    counter: dict = defaultdict(int)
    out = {}
    for s, step in enumerate(schedule.steps):
        for i in sorted(range(len(step)), key=lambda i: step[i].chunk):
            t = step[i]
            key = (t.src, t.dst, phase_of(t.op))
            out[(s, i)] = counter[key]
            counter[key] += 1
    return out, max(counter.values(), default=1)
