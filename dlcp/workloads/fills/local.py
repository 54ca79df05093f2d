"""local: each missing contribution is replaced by this worker's own gradient `own` for the message
(what it sent): g = (total + m * own) / W with m = W - count. Replicas in all-reduce mode may then
drift apart slightly, since each worker fills with its own gradient. At the parameter server, which
has no gradient of its own, `local` falls back to `rescale`: the received contributions' mean is
the PS's best local estimate of a missing one (rescale = (total + m * total / count) / W), and a
value nobody delivered stays 0."""

from dlcp.workloads.fills import FillRule, register_fill

register_fill(
    FillRule(
        name="local",
        description="a missing contribution is this worker's own gradient (rescale at the PS)",
        average=lambda total, count, world, own, ops: (total + (world - count) * own) / world,
        base="own",
        fallback="rescale",
    )
)
