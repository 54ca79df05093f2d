"""rescale: the mean of the contributions that arrived, g = total / count where count > 0, and 0
where nobody delivered (nothing to rescale). Unbiased when loss is independent of the value."""

from dlcp.workloads.fills import FillRule, register_fill

register_fill(
    FillRule(
        name="rescale",
        description="the mean of the contributions that arrived: total / count (0 where none did)",
        average=lambda total, count, world, base, ops: ops.where(
            count > 0, total / ops.at_least_one(count), ops.zeros_like(total)
        ),
    )
)
