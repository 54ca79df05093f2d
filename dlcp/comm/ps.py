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

The packets of a push (`push_message`), the sum of the pushes (`sum_pushes`) and the parameter
messages (`PullMessages`) are shared with the event-driven PS of the simulated hosts
(dlcp/comm/evented.py `EventPSClient`, `EventPSServer`).
"""

from __future__ import annotations

import collections

import numpy as np

from dlcp.comm.api import Handle
from dlcp.comm.packets import sized_packets, tagged_packets
from dlcp.comm.settings import CommConfig
from dlcp.comm.wire_ids import WireIds
from dlcp.transport.api import SendInfo
from dlcp.wire.chunking import MessageId
from dlcp.wire.control_frames import PS_RANK
from dlcp.wire.header import PHASE_PULL, PHASE_PUSH, TYPE_DATA, TYPE_PARAM
from dlcp.workloads.contract import Aggregate, GradMessage, MessageLayout, ParamChunk
from dlcp.workloads.fills import FILLS
from dlcp.workloads.fills.bubble import BubbleMemory


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


def push_message(
    cfg: CommConfig, ids: WireIds, n_layers: int, vpp: int, iteration: int, msg: GradMessage, sizes_only: bool = False
) -> tuple[object, SendInfo]:
    """A worker's push of `msg` to the PS: its packets (phase PUSH, wire id `ids.message(msg_id)`)
    and SendInfo. `sizes_only`: packets of the right sizes without values."""
    lay = msg.layout
    ident = MessageId(cfg.job_id, cfg.rank, iteration, ids.message(lay.msg_id), PHASE_PUSH, TYPE_DATA)
    if sizes_only:
        batch, lf, ll = sized_packets(ident, lay, 0, lay.n_values, n_layers, cfg, vpp)
    else:
        values = np.ascontiguousarray(msg.values, dtype=np.float32).reshape(-1)
        batch, lf, ll = tagged_packets(values, ident, lay, 0, lay.n_values, n_layers, cfg, vpp)
    return batch, SendInfo(rec_msg_id=lay.msg_id, layer_first=lf, layer_last=ll)


def sum_pushes(
    layouts: dict[int, MessageLayout], world: int, pushes: dict, bubbles: BubbleMemory | None = None
) -> dict[int, Aggregate]:
    """Every message's pushes summed over the workers: `pushes[(rank, msg_id)]` is the RecvResult
    (lost values are zeros; `count[v]` is the number of pushes that delivered value v). Ranks in a
    fixed order: sums are reproducible bit for bit. `bubbles`: fill each push's holes from that
    worker's last push first (the `bubble` fill rule; those values count as delivered)."""
    out = {}
    for msg_id, lay in layouts.items():
        total = np.zeros(lay.n_values, np.float32)
        count = np.zeros(lay.n_values, np.uint16)
        for rank in range(world):
            r = pushes[(rank, msg_id)]
            values, delivered = r.values, ~r.loss_mask()
            if bubbles is not None:
                values, delivered = bubbles.fill(rank, msg_id, values, ~delivered)
            total += values
            count += delivered
        out[msg_id] = Aggregate(msg_id, total, count, world)
    return out


def bubble_memory(fill: str) -> BubbleMemory | None:
    """The PS's per-worker memory when fill rule `fill` fills per source (`bubble`), else None."""
    return BubbleMemory() if FILLS.get(fill).per_source else None


class PullMessages:
    """The PS's parameter messages (phase PULL, type PARAM): every message's packets, their drop
    precedence from |w_new - w_old| per packet (from |w| the first time), so it keeps the
    parameters it sent last."""

    def __init__(self, cfg: CommConfig, ids: WireIds, layouts: dict[int, MessageLayout], n_layers: int, vpp: int):
        self.cfg, self.ids, self.layouts, self.n_layers, self.vpp = cfg, ids, layouts, n_layers, vpp
        self._previous: dict[int, np.ndarray] = {}

    def build(self, iteration: int, params: dict[int, np.ndarray] | None) -> list[tuple[int, object, SendInfo]]:
        """(msg_id, packets, SendInfo) of every message, in layout order; `params` None: packets
        of the right sizes without values (sizes only)."""
        out = []
        for msg_id, lay in self.layouts.items():
            ident = MessageId(
                self.cfg.job_id, self.cfg.rank, iteration, self.ids.message(msg_id), PHASE_PULL, TYPE_PARAM
            )
            if params is None:
                batch, lf, ll = sized_packets(ident, lay, 0, lay.n_values, self.n_layers, self.cfg, self.vpp)
            else:
                values = np.array(params[msg_id], dtype=np.float32).reshape(-1)  # a copy: stays valid
                prev = self._previous.get(msg_id)
                delta = np.abs(values - prev) if prev is not None else np.abs(values)
                self._previous[msg_id] = values
                batch, lf, ll = tagged_packets(
                    values, ident, lay, 0, lay.n_values, self.n_layers, self.cfg, self.vpp, magnitudes=delta
                )
            out.append((msg_id, batch, SendInfo(rec_msg_id=msg_id, layer_first=lf, layer_last=ll)))
        return out


class PSClient(_Collective):
    """Worker side: push gradients to the PS, pull parameters back."""

    def __init__(self, transport, cfg: CommConfig, layouts, n_layers: int, ps_rank: int = PS_RANK):
        super().__init__(transport, cfg, layouts, n_layers)
        self.ps = ps_rank
        self._handles: dict[int, list] = collections.defaultdict(list)

    def push(self, iteration: int, msg: GradMessage) -> Handle:
        batch, info = push_message(self.cfg, self.ids, self.n_layers, self.vpp, iteration, msg)
        h = self.t.send(self.ps, batch, info)
        self._handles[iteration].append(h)
        return send_handle(h, f"push of message {msg.msg_id} in iteration {iteration}")

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
    """PS side: aggregate pushes, send parameters. `fill`: the run's fill rule (`bubble` fills each
    push from its worker's last one before the sum)."""

    def __init__(self, transport, cfg: CommConfig, layouts, n_layers: int, fill: str = "rescale"):
        super().__init__(transport, cfg, layouts, n_layers)
        self.pulls = PullMessages(cfg, self.ids, self.layouts, n_layers, self.vpp)
        self.bubbles = bubble_memory(fill)

    def gather(self, iteration: int) -> dict[int, Aggregate]:
        pushes = {
            (rank, msg_id): self.t.recv(rank, iteration, PHASE_PUSH, self.ids.message(msg_id), self.cfg.timeout_s)
            for msg_id in self.layouts
            for rank in range(self.cfg.world)
        }
        return sum_pushes(self.layouts, self.cfg.world, pushes, self.bubbles)

    def scatter(self, iteration: int, params: dict[int, np.ndarray]) -> None:
        """Send every message's parameters to every worker; returns when all are done."""
        handles = []
        for _, batch, info in self.pulls.build(iteration, params):
            for rank in range(self.cfg.world):  # same packets for every worker
                handles.append(self.t.send(rank, batch, info))
        for h in handles:
            h.wait(self.cfg.timeout_s)
