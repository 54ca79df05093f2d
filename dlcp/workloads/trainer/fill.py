"""Fill rules in torch: the averaged gradient of one message from an Aggregate with holes, under
the rule `dlcp.fill` names (formulas: dlcp/workloads/fills/, one module per rule).

Inputs are never modified; the result is a new float32 tensor (or `out`).
"""

from __future__ import annotations

import numpy as np
import torch

from dlcp.workloads.contract import Aggregate
from dlcp.workloads.fills import ArrayOps, applied_rule
from dlcp.workloads.settings import check_fill

TORCH = ArrayOps(torch.where, lambda x: x.clamp(min=1.0), torch.zeros_like)


def _tensor(values, dtype=None) -> torch.Tensor:
    if isinstance(values, torch.Tensor):
        t = values
    else:
        arr = np.asarray(values)
        t = torch.from_numpy(arr) if arr.flags.writeable else torch.from_numpy(arr.copy())
    return t.reshape(-1) if dtype is None else t.reshape(-1).to(dtype)


def fill_average(
    agg: Aggregate, rule: str, *, previous=None, own=None, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Averaged gradient of `agg` under fill rule `rule`.

    `previous` (stale): last iteration's result for this message, None before the first.
    `own` (local): this worker's own contribution; None at the PS (then local = rescale).
    """
    check_fill(rule)
    total = _tensor(agg.total, torch.float32)
    count = _tensor(agg.count, torch.float32)
    if total.numel() != count.numel():
        raise ValueError(f"aggregate of message {agg.msg_id}: {total.numel()} totals but {count.numel()} counts")
    applied, base = applied_rule(rule, previous, own)
    if base is not None:
        base = _tensor(base, torch.float32)
        if base.numel() != total.numel():
            raise ValueError(
                f"{rule} fill of message {agg.msg_id}: {base.numel()} values, aggregate has {total.numel()}"
            )
    g = applied.average(total, count, float(agg.world), base, TORCH)
    if out is None:
        return g
    return out.copy_(g)
