"""MG-WFBP (Shi, Chu, Li, INFOCOM'19): greedy merging of consecutive gradients under the alpha-beta
model, walking backward from the output side. The rule is the authors' code [C:
HKBU-HPML/MG-WFBP distributed_optimizer.py and lzhangbv/dear_pytorch mgwfbp/dopt.py,
`_generate_groups_mgwfbp`], restated here in our own words (seeds-brief §4.2):

    c[l]  = start of the all-reduce holding tensor l on the FIFO channel:
            c[L-1] = r[L-1],  c[l] = max(c[l+1] + tc[l+1], r[l])     (tc = 0 for merged-away layers)
    for l = L-1 down to 1, with tensor l's current group (l and whatever merged into it):
        if r[l-1] < c[l] + tc[l]              (l-1 is ready before l's all-reduce would end)
            and r[l-1] - c[l] < alpha:        (l's all-reduce has not started when l-1 is ready
                                               ("not_started"), or started less than one start-up
                                               latency earlier ("within_alpha"): waiting costs less
                                               than the alpha a separate message pays)
            merge l's group into l-1 and recompute c
        else close the group at l.
    Tensor 0 closes the last group.

Small-tensor rule: the DeAR repository's copy adds "merge anyway if the group has fewer than 8192
elements"; the authors' own repository does not have it, so it is not part of the algorithm here.
It is available as `small_merge_elems=8192` (default 0 = off) to reproduce DeAR's baseline.
"""

from __future__ import annotations

from pydantic import Field

from dlcp.comm.schedulers.base import register_scheduler
from dlcp.comm.schedulers.grouped import GroupedAllReduce
from dlcp.comm.timeline import ready_times
from dlcp.settings import Settings

DEAR_SMALL_MERGE_ELEMS = 8192


def mgwfbp_groups(sizes, backward_s, cost, small_merge_elems: int = 0):
    """(groups in forward order, per-boundary decisions, predicted end of communication after the
    backward start). decisions[l] for l = 1..L-1 says whether tensor l's group merged into l-1
    and by which rule: "not_started", "within_alpha", "small" or None (closed)."""
    L = len(sizes)
    r = ready_times(backward_s)
    merged_elems = list(sizes)
    tc = [cost.allreduce_s(4 * n) for n in merged_elems]
    c = [0.0] * L

    def recompute_starts(top):
        for l in range(top, -1, -1):
            c[l] = r[l] if l == L - 1 else max(c[l + 1] + tc[l + 1], r[l])

    recompute_starts(L - 1)
    decisions: dict[int, str | None] = {}
    groups, group = [], []
    for l in range(L - 1, 0, -1):
        group.append(l)
        rule = None
        if r[l - 1] < c[l] + tc[l]:
            if c[l] > r[l - 1]:
                rule = "not_started"
            elif r[l - 1] - c[l] < cost.alpha:
                rule = "within_alpha"
        if rule is None and merged_elems[l] < small_merge_elems:
            rule = "small"
        decisions[l] = rule
        if rule is None:
            groups.append(group)
            group = []
            continue
        merged_elems[l - 1] += merged_elems[l]
        merged_elems[l] = 0
        tc[l] = 0.0
        tc[l - 1] = cost.allreduce_s(4 * merged_elems[l - 1])
        recompute_starts(l - 1)
    group.append(0)
    groups.append(group)
    comm_end = c[0] + tc[0]
    return sorted(sorted(g) for g in groups), decisions, comm_end


class MGWFBPOptions(Settings):
    small_merge_elems: int = Field(
        0,
        ge=0,
        description="mgwfbp: also merge groups below this many elements "
        "(DeAR's copy: 8192; 0 = the authors' rule only)",
    )


@register_scheduler(
    "mgwfbp",
    "MG-WFBP (Shi et al., INFOCOM'19): merges consecutive gradients where waiting costs less than a start-up",
    MGWFBPOptions,
)
class MGWFBP(GroupedAllReduce):
    def __init__(self, profile, cost, workers=None, small_merge_elems: int = 0):
        if isinstance(small_merge_elems, bool) or not isinstance(small_merge_elems, int) or small_merge_elems < 0:
            raise ValueError(f"mgwfbp: small_merge_elems must be an integer >= 0, got {small_merge_elems!r}")
        groups, self.decisions, comm_end = mgwfbp_groups(profile.sizes, profile.backward_s, cost, small_merge_elems)
        super().__init__(profile.sizes, groups)
        self.small_merge_elems = small_merge_elems
        # MG-WFBP's own model: forward waits for the last all-reduce (the one holding tensor 0)
        self.model_iteration_s = comm_end + sum(profile.forward_s)

    def describe(self) -> dict:
        return {
            **super().describe(),
            "small_merge_elems": self.small_merge_elems,
            "merges": {str(l): rule for l, rule in sorted(self.decisions.items())},
        }
