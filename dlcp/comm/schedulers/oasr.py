"""OASR-WFBP (reconstructed). Song et al., JPDC 196:104997 (2025) share all-reduce start-ups among
consecutive gradients with an analytic, overlap-aware model instead of MG-WFBP's greedy rule
[V: abstract]. Neither the paper's model nor code was available, so this is our reconstruction
(seeds-brief §4.1 [D]): the optimal contiguous merge under the same timeline, found by dynamic
programming.

Under the §1 timeline with one FIFO channel, groups of consecutive tensors are all-reduced in
backward order, each as soon as its lowest-index tensor is ready and the channel is free; the
group holding tensor 0 ends last and the next forward waits for it, so minimising the end of
communication minimises the iteration time. With F(i) the earliest end of all communication of
tensors i..L-1 when i starts a group:

    F(L) = 0,   F(i) = min over k in i..L-1 of  max(F(k+1), r[i]) + T(bytes of tensors i..k)

F is optimal per suffix because a later channel-free time is never better for the groups below,
so F(0) is the optimum over all 2^(L-1) contiguous groupings (MG-WFBP's included): O(L^2).
Label results "OASR-WFBP (reconstructed)".
"""

from __future__ import annotations

import numpy as np

from dlcp.comm.schedulers.base import register_scheduler
from dlcp.comm.schedulers.grouped import GroupedAllReduce
from dlcp.comm.timeline import ready_times


def oasr_groups(sizes, backward_s, cost):
    """(groups in forward order, predicted end of communication after the backward start)."""
    L = len(sizes)
    r = np.asarray(ready_times(backward_s))
    prefix_bytes = np.concatenate([[0], np.cumsum(np.asarray(sizes, dtype=np.int64) * 4)])
    F = np.zeros(L + 1)
    last_of_group = np.zeros(L, dtype=np.int64)
    for i in range(L - 1, -1, -1):
        ks = np.arange(i, L)
        ends = np.maximum(F[ks + 1], r[i]) + (cost.alpha + cost.beta * (prefix_bytes[ks + 1] - prefix_bytes[i]))
        j = int(np.argmin(ends))
        F[i] = ends[j]
        last_of_group[i] = i + j
    groups, i = [], 0
    while i < L:
        k = int(last_of_group[i])
        groups.append(list(range(i, k + 1)))
        i = k + 1
    return groups, float(F[0])


@register_scheduler("oasr", "OASR-WFBP (reconstructed): the contiguous merge with the earliest end of communication")
class OASRWFBP(GroupedAllReduce):
    label = "OASR-WFBP (reconstructed)"

    def __init__(self, profile, cost, workers=None):
        groups, comm_end = oasr_groups(profile.sizes, profile.backward_s, cost)
        super().__init__(profile.sizes, groups)
        self.model_iteration_s = comm_end + sum(profile.forward_s)

    def describe(self) -> dict:
        return {**super().describe(), "label": self.label}
