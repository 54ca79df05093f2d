"""Executor for policies that merge whole tensors into groups: one all-reduce per group,
released the moment the group's last gradient is ready (its lowest tensor index, since backward
runs from the output side), FIFO. WFBP, MG-WFBP and OASR-WFBP differ only in the grouping."""

from __future__ import annotations

from dlcp.comm.schedulers.base import Op, Scheduler


def check_groups(groups, n: int, who: str) -> list[list[int]]:
    """`groups` must put every tensor 0..n-1 in exactly one group; returns them sorted, each group
    ascending, groups in forward order."""
    out = sorted(sorted(int(t) for t in g) for g in groups if len(g))
    flat = [t for g in out for t in g]
    if sorted(flat) != list(range(n)):
        raise ValueError(f"{who}: groups must cover tensors 0..{n - 1} exactly once, got {groups!r}")
    return out


def collapse_notes(name: str, tensors: int, groups) -> list[str]:
    """What a plan should say when a merging scheduler put every tensor into one group: its one
    all-reduce starts when the whole backward is over, so nothing overlaps the backward, and a
    comparison against it is a comparison against no overlap at all."""
    if tensors > 1 and len(groups) == 1:
        return [
            f"{name} merged all {tensors} tensors into one group: one all-reduce after the whole "
            "backward, no overlap with it (a comparison against it is one against no overlap)"
        ]
    return []


class GroupedAllReduce(Scheduler):
    """One all-reduce per group of whole tensors, issued when the whole group is ready."""

    name = "grouped"

    def __init__(self, sizes, groups):
        super().__init__(sizes)
        self.groups = check_groups(groups, len(self.sizes), self.name)
        self.group_of = {t: g for g, members in enumerate(self.groups) for t in members}
        self._waiting: dict[tuple[int, int], int] = {}  # (iteration, group) -> gradients still missing

    def on_ready(self, iteration: int, tensor: int, now: float) -> list[Op]:
        g = self.group_of[tensor]
        key = (iteration, g)
        left = self._waiting.get(key, len(self.groups[g])) - 1
        if left:
            self._waiting[key] = left
            return []
        self._waiting.pop(key, None)
        members = self.groups[g]
        return [self.new_op(iteration, "allreduce", [self.whole(t) for t in members], members[0])]

    def on_complete(self, op_id: int, now: float) -> list[Op]:
        return []

    def describe(self) -> dict:
        notes = collapse_notes(self.name, len(self.sizes), self.groups)
        return {"groups": [list(g) for g in self.groups], **({"notes": notes} if notes else {})}

    def units(self):
        return [tuple(self.whole(t) for t in g) for g in self.groups]
