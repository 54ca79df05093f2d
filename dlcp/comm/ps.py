"""The parameter server over the transport: workers push gradients and pull parameters, the PS
gathers the pushes and scatters parameters (`workload.mode = "ps"`). Every message is tagged
(dlcp/comm/packets.py) and cut into packets by dlcp.wire.chunking.

A push is one message per GradMessage (phase PUSH, wire msg_id = layout msg_id:
`WireIds.message`); `push` returns a `Handle` that completes with the transport's SendResult. The
PS sums a message over workers once every worker's push is complete or forced; lost packets
contribute nothing, so `count[v]` is the number of pushes that delivered value v. Pulls (phase
PULL, type PARAM) carry the parameters; their priority comes from the layer as usual and their drop
precedence from |w_new - w_old| per packet (a lost chunk keeps the worker's previous value, which is
worst where the parameters moved most). A lost pull value is marked in `ParamChunk.lost`.
"""

from __future__ import annotations

import collections

import numpy as np

from dlcp.comm.api import Handle
from dlcp.comm.packets import tagged_packets
from dlcp.comm.settings import CommConfig
from dlcp.comm.wire_ids import WireIds
from dlcp.transport.api import SendInfo
from dlcp.wire.chunking import MessageId
from dlcp.wire.control_frames import PS_RANK
from dlcp.wire.header import PHASE_PULL, PHASE_PUSH, TYPE_DATA, TYPE_PARAM
from dlcp.workloads.contract import Aggregate, GradMessage, MessageLayout, ParamChunk


def send_handle(send, what: str) -> Handle:
    """A comm Handle following a transport SendHandle (completes in the transport's thread)."""
    h = Handle(what)
    send.add_done_callback(lambda s: h.set_result(s.result))
    return h


class _Collective:
    def __init__(self, transport, cfg: CommConfig, layouts: list[MessageLayout], n_layers: int):
        self.t = transport
        self.cfg = cfg
        self.layouts = {lay.msg_id: lay for lay in layouts}
        self.n_layers = n_layers
        self.vpp = transport.vpp
        self.ids = WireIds(max(self.layouts, default=0) + 1, what="parameter server")  # slot = layout msg_id

    def begin(self, iteration: int) -> None:
        """A new iteration starts: older messages become stale at the transport."""
        self.t.advance(iteration)


# --- parameter server --------------------------------------------------------------------------------


class PSClient(_Collective):
    """Worker side: push gradients to the PS, pull parameters back."""

    def __init__(self, transport, cfg: CommConfig, layouts, n_layers: int, ps_rank: int = PS_RANK):
        super().__init__(transport, cfg, layouts, n_layers)
        self.ps = ps_rank
        self._handles: dict[int, list] = collections.defaultdict(list)

    def push(self, iteration: int, msg: GradMessage) -> Handle:
        lay = msg.layout
        values = np.ascontiguousarray(msg.values, dtype=np.float32).reshape(-1)
        ident = MessageId(
            self.cfg.job_id, self.cfg.rank, iteration, self.ids.message(lay.msg_id), PHASE_PUSH, TYPE_DATA
        )
        batch, lf, ll = tagged_packets(values, ident, lay, 0, lay.n_values, self.n_layers, self.cfg, self.vpp)
        h = self.t.send(self.ps, batch, SendInfo(rec_msg_id=lay.msg_id, layer_first=lf, layer_last=ll))
        self._handles[iteration].append(h)
        return send_handle(h, f"push of message {lay.msg_id} in iteration {iteration}")

    def pull(self, iteration: int) -> dict[int, ParamChunk]:
        """Wait for this iteration's pushes to finish and for every parameter message."""
        for h in self._handles.pop(iteration, []):
            h.wait(self.cfg.timeout_s)
        out = {}
        for msg_id in self.layouts:
            r = self.t.recv(self.ps, iteration, PHASE_PULL, self.ids.message(msg_id), self.cfg.timeout_s)
            out[msg_id] = ParamChunk(r.values, r.loss_mask())
        return out


class PSServer(_Collective):
    """PS side: aggregate pushes, send parameters."""

    def __init__(self, transport, cfg: CommConfig, layouts, n_layers: int):
        super().__init__(transport, cfg, layouts, n_layers)
        self._previous: dict[int, np.ndarray] = {}

    def gather(self, iteration: int) -> dict[int, Aggregate]:
        out = {}
        for msg_id, lay in self.layouts.items():
            total = np.zeros(lay.n_values, np.float32)
            count = np.zeros(lay.n_values, np.uint16)
            for rank in range(self.cfg.world):  # fixed order: sums are reproducible bit for bit
                r = self.t.recv(rank, iteration, PHASE_PUSH, self.ids.message(msg_id), self.cfg.timeout_s)
                total += r.values  # lost values are zeros
                count += ~r.loss_mask()
            out[msg_id] = Aggregate(msg_id, total, count, self.cfg.world)
        return out

    def scatter(self, iteration: int, params: dict[int, np.ndarray]) -> None:
        """Send every message's parameters to every worker; returns when all are done."""
        handles = []
        for msg_id, lay in self.layouts.items():
            values = np.array(params[msg_id], dtype=np.float32).reshape(-1)  # a copy: stays valid
            prev = self._previous.get(msg_id)
            delta = np.abs(values - prev) if prev is not None else np.abs(values)
            self._previous[msg_id] = values
            ident = MessageId(
                self.cfg.job_id, self.cfg.rank, iteration, self.ids.message(msg_id), PHASE_PULL, TYPE_PARAM
            )
            batch, lf, ll = tagged_packets(
                values, ident, lay, 0, lay.n_values, self.n_layers, self.cfg, self.vpp, magnitudes=delta
            )
            for rank in range(self.cfg.world):  # same packets for every worker
                handles.append(self.t.send(rank, batch, SendInfo(rec_msg_id=msg_id, layer_first=lf, layer_last=ll)))
        for h in handles:
            h.wait(self.cfg.timeout_s)
