"""zero: a missing contribution counts as 0, g = total / W (biased towards 0 by the fraction lost)."""

from dlcp.workloads.fills import FillRule, register_fill

register_fill(
    FillRule(
        name="zero",
        description="a missing contribution counts as 0: total / W",
        average=lambda total, count, world, base, ops: total / world,
    )
)
