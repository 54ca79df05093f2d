"""stale: each missing contribution is replaced by `prev`, the averaged gradient this rule produced
for the same message in the previous iteration: g = (total + m * prev) / W with m = W - count.
Before the first iteration the previous value is 0, i.e. the `zero` rule."""

from dlcp.workloads.fills import FillRule, register_fill

register_fill(
    FillRule(
        name="stale",
        description="a missing contribution is the message's averaged gradient of the previous iteration",
        average=lambda total, count, world, prev, ops: (total + (world - count) * prev) / world,
        base="previous",
        fallback="zero",
    )
)
