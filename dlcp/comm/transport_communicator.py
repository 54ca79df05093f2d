"""All-reduce over the transport: `TransportCommunicator` puts one worker's scheduler and collective
together for the `[comm]` settings, and adds replica re-sync (dlcp/comm/resync.py).

Driving pattern (dlcp/workloads/contract.py): `submit` every GradMessage as backward yields it,
then `wait` for the Aggregates (a `Communicator`, dlcp/comm/communicator.py: the scheduler decides what
runs when, the collective runs it).

`RingAllReduce` is the communicator with WFBP (each message's all-reduce as soon as it is ready, one at
a time in that order) over the ring of dlcp/comm/stepped.py: reduce-scatter then all-gather, P-1
steps each, every step its own transport message, exact contribution counts, the `ring_budget`
rules. `TransportCommunicator` is the same for any `[comm]` scheduler and collective.
"""

from __future__ import annotations

import numpy as np

from dlcp.comm.assemble import LayerTimes, assemble_rank
from dlcp.comm.communicator import Communicator
from dlcp.comm.order import TransportOrder
from dlcp.comm.resync import resync
from dlcp.comm.settings import CommConfig, CommSetup
from dlcp.comm.stepped import SteppedCollective
from dlcp.network.topology import TopologySpec
from dlcp.workloads.contract import MessageLayout


class TransportCommunicator(Communicator):
    """One worker's communication layer over the transport for the `[comm]` settings: the
    scheduler planned on the workload's messages (dlcp/comm/assemble.py), the collective's step plan
    on the topology (`spec`; None: a star), one set of wire ids, and rank 0's order announcements
    when the scheduler needs them (dlcp/comm/communicator.py). Adds `resync`."""

    def __init__(
        self,
        transport,
        cfg: CommConfig,
        comm: CommSetup,
        layouts: list[MessageLayout],
        n_layers: int,
        *,
        host_mbps: float = 50.0,
        spec: TopologySpec | None = None,
        backward_ms: float = 0.0,
        fabric_mbps: float | None = None,
        on_final=None,
        layer_times: LayerTimes | None = None,
    ):
        scheduler, plan, self.ids = assemble_rank(
            comm,
            cfg.world,
            layouts,
            host_mbps=host_mbps,
            spec=spec,
            backward_ms=backward_ms,
            fabric_mbps=fabric_mbps,
            layer_times=layer_times,
        )
        self.t, self.cfg, self.comm, self.plan = transport, cfg, comm, plan
        self.layouts = {lay.msg_id: lay for lay in layouts}
        collective = SteppedCollective(transport, cfg, plan, self.ids, lockstep=comm.lockstep)
        order = TransportOrder(transport, cfg, self.ids, n_layers) if scheduler.timing_dependent_order else None
        super().__init__(
            scheduler, collective, layouts, n_layers, order=order, timeout_s=cfg.timeout_s, on_final=on_final
        )

    def resync(self, iteration: int, params: dict[int, np.ndarray]) -> tuple[dict[int, np.ndarray], dict]:
        return resync(self.t, self.cfg, self.ids, self.layouts, self.n_layers, iteration, params)


class RingAllReduce(TransportCommunicator):
    """WFBP over the ring: the default `[comm]` (see the module docstring)."""

    def __init__(self, transport, cfg: CommConfig, layouts: list[MessageLayout], n_layers: int):
        super().__init__(transport, cfg, CommSetup(), layouts, n_layers)
