"""The reliable baselines the loss-tolerant systems are measured against."""

from dlcp.experiment.systems import SystemEntry, register_system

register_system(
    SystemEntry(
        name="reliable",
        description="every packet recovered by the bounded-loss transport (budget 0), one FIFO queue: a reliable "
        "transport over the same switches (Gloo / NCCL in OptiReduce's comparison, the baseline of DBLP's)",
        settings={"dlcp.policy": "fifo", "dlcp.reliable": True},
    )
)
register_system(
    SystemEntry(
        name="tcp",
        description="each message one frame on a kernel TCP connection (LTP's baseline: TCP congestion control)",
        settings={"dlcp.policy": "fifo", "dlcp.transport": "tcp"},
        source="LTP (arXiv 2305.04279) compares against TCP congestion controls [V: abstract]",
    )
)
