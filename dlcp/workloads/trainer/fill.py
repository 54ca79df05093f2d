"""Fill policies: turn an Aggregate with holes into the averaged gradient of one message.

An Aggregate of a message holds, per value v, `total[v]` (sum of the contributions that arrived)
and `count[v]` (how many did, 0..W, W = `world`). Let m[v] = W - count[v] be the missing
contributions. The averaged gradient g is, per value:

    zero     g = total / W
             a missing contribution counts as 0 (biased towards 0 by the fraction lost).
    rescale  g = total / count            where count > 0
             g = 0                        where count = 0 (nobody delivered: nothing to rescale)
             the mean of the contributions that arrived (unbiased when loss is independent of the
             value).
    stale    g = (total + m * prev) / W
             each missing contribution is replaced by `prev`, the averaged gradient this policy
             produced for the same message in the previous iteration (0 before the first).
    local    g = (total + m * own) / W
             each missing contribution is replaced by this worker's own gradient `own` for the
             message (what it sent). Replicas in all-reduce mode may then drift apart slightly,
             since each worker fills with its own gradient.
             At the parameter server, which has no gradient of its own, `local` falls back to
             `rescale`: the received contributions' mean is the PS's best local estimate of a
             missing one (rescale = (total + m * total / count) / W), and a value nobody
             delivered stays 0.

Without loss (count = W everywhere) every policy returns exactly total / W, bit for bit.
Inputs are never modified; the result is a new float32 tensor (or `out`).
"""

from __future__ import annotations

import numpy as np
import torch

from dlcp.workloads.contract import Aggregate
from dlcp.workloads.settings import check_fill


def _tensor(values, dtype=None) -> torch.Tensor:
    if isinstance(values, torch.Tensor):
        t = values
    else:
        arr = np.asarray(values)
        t = torch.from_numpy(arr) if arr.flags.writeable else torch.from_numpy(arr.copy())
    return t.reshape(-1) if dtype is None else t.reshape(-1).to(dtype)


def fill_average(
    agg: Aggregate, policy: str, *, previous=None, own=None, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Averaged gradient of `agg` under fill `policy` (formulas in the module docstring).

    `previous` (stale): last iteration's result for this message, None before the first.
    `own` (local): this worker's own contribution; None at the PS (then local = rescale).
    """
    check_fill(policy)
    total = _tensor(agg.total, torch.float32)
    count = _tensor(agg.count, torch.float32)
    if total.numel() != count.numel():
        raise ValueError(f"aggregate of message {agg.msg_id}: {total.numel()} totals but {count.numel()} counts")
    world = float(agg.world)
    if policy == "local" and own is None:
        policy = "rescale"
    if policy == "zero":
        g = total / world
    elif policy == "rescale":
        g = torch.where(count > 0, total / count.clamp(min=1.0), torch.zeros_like(total))
    else:
        base = previous if policy == "stale" else own
        if base is None:  # stale before the first iteration: the previous value is 0
            g = total / world
        else:
            base = _tensor(base, torch.float32)
            if base.numel() != total.numel():
                raise ValueError(
                    f"{policy} fill of message {agg.msg_id}: {base.numel()} values, aggregate has {total.numel()}"
                )
            g = (total + (world - count) * base) / world
    if out is None:
        return g
    return out.copy_(g)
