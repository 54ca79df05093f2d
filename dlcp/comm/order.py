"""How rank 0 tells the other ranks the order of operations it released (dlcp/comm/communicator.py,
"One order on every rank"): over the transport, or in process."""

from __future__ import annotations

import threading

import numpy as np

from dlcp.comm.communicator import PRIMITIVE_CODES, PRIMITIVE_NAMES, OrderChannel
from dlcp.comm.packets import tagged_packets
from dlcp.comm.settings import CommConfig
from dlcp.comm.wire_ids import WireIds
from dlcp.transport.api import SendInfo, TransportError
from dlcp.wire.chunking import MessageId
from dlcp.wire.header import PHASE_P2P, TYPE_DATA
from dlcp.workloads.contract import MessageLayout

LEADER = 0
ANNOUNCEMENT_LAYOUT = MessageLayout(0, 2, (0,), (0,))  # two values, layer 0


class TransportOrder(OrderChannel):
    """Each announcement is one small message (two values: slot, primitive code) from rank 0 to
    every other rank: P2P phase, wire id `ids.announcement(seq)`, protected and reliable (budget 0),
    tagged as layer 0 (the most urgent data class under input_first)."""

    def __init__(self, transport, cfg: CommConfig, ids: WireIds, n_layers: int):
        self.t, self.cfg, self.ids, self.n_layers = transport, cfg, ids, n_layers
        self._handles: list = []

    def announce(self, iteration: int, seq: int, slot: int, primitive: str) -> None:
        batch = announcement_packets(self.cfg, self.ids, self.n_layers, self.t.vpp, iteration, seq, slot, primitive)
        self._handles = [h for h in self._handles if not h.done()]
        for r in range(self.cfg.world):
            if r != self.cfg.rank:
                self._handles.append(self.t.send(r, batch, announcement_info(slot)))

    def receive(self, iteration: int, seq: int, timeout_s: float) -> tuple[int, str]:
        res = self.t.recv(LEADER, iteration, PHASE_P2P, self.ids.announcement(seq), timeout_s)
        return read_announcement(res, iteration, seq)


def announcement_packets(
    cfg: CommConfig, ids: WireIds, n_layers: int, vpp: int, iteration: int, seq: int, slot: int, primitive: str
):
    """The packets of the leader's seq-th announcement of `iteration` (see TransportOrder); they
    carry their two values even when the run carries sizes only."""
    values = np.array([slot, PRIMITIVE_CODES[primitive]], np.float32)
    ident = MessageId(cfg.job_id, cfg.rank, iteration & 0xFFFF, ids.announcement(seq), PHASE_P2P, TYPE_DATA)
    batch, _, _ = tagged_packets(values, ident, ANNOUNCEMENT_LAYOUT, 0, 2, n_layers, cfg, vpp, protect=True)
    return batch


def announcement_info(slot: int) -> SendInfo:
    return SendInfo(rec_msg_id=slot, budget=0.0)


def read_announcement(res, iteration: int, seq: int) -> tuple[int, str]:
    """(slot, primitive) of a received announcement."""
    if not res.received.all():
        raise TransportError(f"order announcement {seq} of iteration {iteration} arrived incomplete")
    slot, code = (int(v) for v in res.values[:2])
    if code not in PRIMITIVE_NAMES:
        raise TransportError(f"order announcement {seq} of iteration {iteration}: unknown primitive {code}")
    return slot, PRIMITIVE_NAMES[code]


class MemoryOrder(OrderChannel):
    """In process: a shared table the leader writes and the followers read."""

    def __init__(self):
        self._cond = threading.Condition()
        self._table: dict[tuple[int, int], tuple[int, str]] = {}
        self._read: dict[tuple[int, int], int] = {}

    def announce(self, iteration: int, seq: int, slot: int, primitive: str) -> None:
        with self._cond:
            self._table[(iteration, seq)] = (slot, primitive)
            self._cond.notify_all()

    def receive(self, iteration: int, seq: int, timeout_s: float) -> tuple[int, str]:
        with self._cond:
            if not self._cond.wait_for(lambda: (iteration, seq) in self._table, timeout_s):
                raise TimeoutError(f"no order announcement {seq} of iteration {iteration} after {timeout_s:g} s")
            return self._table[(iteration, seq)]
