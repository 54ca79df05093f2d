"""WFBP (wait-free backpropagation, seeds-brief §8): each tensor's all-reduce starts as soon as
backward produces its gradient, FIFO on one channel, no fusion, no partitioning."""

from __future__ import annotations

from dlcp.comm.schedulers.base import register_scheduler
from dlcp.comm.schedulers.grouped import GroupedAllReduce


@register_scheduler(
    "wfbp", "wait-free backpropagation: each tensor's all-reduce as soon as its gradient is ready, FIFO"
)
class WFBP(GroupedAllReduce):
    def __init__(self, profile, cost=None, workers=None):
        super().__init__(profile.sizes, [[t] for t in range(len(profile))])
