"""bubble: LTP's Bubble Filling (arXiv 2305.04279; our reconstruction, docs/bounded-loss.md).

LTP "employs ... Bubble Filling for data correction to maintain training accuracy" [V: abstract];
how it fills is not in the abstract. Ours [D]: at the parameter server, a hole ("bubble") in a
worker's push is filled, before the pushes are summed, with the value that worker delivered there
last (its previous push of the message), so the sum keeps every worker's contribution, one
iteration stale where it was lost; a value the worker never delivered stays missing and the mean of
what arrived applies (`rescale`'s formula). `BubbleMemory` is that per-source memory (the PS's:
dlcp/comm/ps.py `sum_pushes`). Where no per-source memory exists (all-reduce: a contribution is
summed on the way) the rule is `rescale`.
"""

from __future__ import annotations

import numpy as np

from dlcp.workloads.fills import FillRule, register_fill


class BubbleMemory:
    """Every source's last delivered value of every message's values (NaN: never delivered)."""

    def __init__(self):
        self._last: dict[tuple[int, int], np.ndarray] = {}
        self.filled = 0  # values filled from memory, in all

    def fill(self, src: int, msg_id: int, values: np.ndarray, lost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(values with the holes filled from `src`'s last delivery, which values count as
        delivered now); remembers what arrived."""
        last = self._last.get((src, msg_id))
        if last is None:
            last = self._last[(src, msg_id)] = np.full(values.size, np.nan, np.float32)
        out = np.array(values, dtype=np.float32)
        known = lost & ~np.isnan(last)
        out[known] = last[known]
        last[~lost] = values[~lost]
        self.filled += int(known.sum())
        return out, ~lost | known


register_fill(
    FillRule(
        name="bubble",
        description="LTP's Bubble Filling (reconstructed): at the PS a worker's lost values are its previous push's; "
        "elsewhere rescale",
        average=lambda total, count, world, base, ops: ops.where(
            count > 0, total / ops.at_least_one(count), ops.zeros_like(total)
        ),
        per_source=True,
    )
)
