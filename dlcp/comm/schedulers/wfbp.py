"""WFBP (wait-free backpropagation, seeds-brief §8): each tensor's all-reduce starts as soon as
backward produces its gradient, FIFO on one channel, no fusion, no partitioning."""

from __future__ import annotations

from dlcp.comm.schedulers.grouped import GroupedAllReduce


class WFBP(GroupedAllReduce):
    name = "wfbp"

    def __init__(self, profile, cost=None, workers=None):
        super().__init__(profile.sizes, [[t] for t in range(len(profile))])
