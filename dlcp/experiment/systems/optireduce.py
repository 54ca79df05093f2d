"""OptiReduce (Warraich et al., NSDI'25; arXiv 2310.06993), as this framework runs it: Transpose
AllReduce (dlcp/comm/plans/tar.py), its Unreliable Bounded Transport's adaptive time-out
(`dlcp.close = "timeout"`, dlcp/transport/core/close.py) and dynamic incast
(`dlcp.incast_adaptive`, dlcp/transport/core/incast.py), the randomised Hadamard transform
(dlcp/workloads/hadamard.py). Its network is a shared cloud: no priorities, so one data queue
(`magnitude` tagging: which packets are droppable; with the transform every packet's magnitude is
alike). Unreliable means no retransmission of droppable packets (budget 1: whatever a step did not
deliver by its PROBE or time-out stays lost); protected ones are recovered as for every system.
Reconstructions are listed in docs/bounded-loss.md."""

from dlcp.experiment.systems import SystemEntry, register_system

register_system(
    SystemEntry(
        name="optireduce",
        description="OptiReduce (NSDI'25): Transpose AllReduce, adaptive time-outs, dynamic incast, Hadamard transform",
        settings={
            "dlcp.policy": "magnitude",
            "comm.collective": "tar",
            "dlcp.close": "timeout",
            "dlcp.incast_adaptive": True,
            "dlcp.ring_budget": "per_step",
            "dlcp.loss_budget": 1.0,
            "dlcp.iter_budget": 1.0,
            "dlcp.fill": "rescale",
            "workload.hadamard": True,
        },
        modes=("allreduce",),
        source="arXiv 2310.06993 abstract [V]; TAR's shape from a course reproduction [S]; time-out rule, incast "
        "rule and transform blocks ours [D]",
    )
)
