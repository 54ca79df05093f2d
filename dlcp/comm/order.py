"""How rank 0 tells the other ranks the order of operations it released (dlcp/comm/engine.py,
"One order on every rank"): over the transport, or in process."""

from __future__ import annotations

import threading

import numpy as np

from dlcp.comm.engine import PRIMITIVE_CODES, PRIMITIVE_NAMES, OrderChannel
from dlcp.comm.packets import tagged_packets
from dlcp.comm.settings import CommConfig
from dlcp.comm.wire_ids import WireIds
from dlcp.transport.api import SendInfo, TransportError
from dlcp.wire.chunking import MessageId
from dlcp.wire.header import PHASE_P2P, TYPE_DATA
from dlcp.workloads.contract import MessageLayout

LEADER = 0


class TransportOrder(OrderChannel):
    """Each announcement is one small message (two values: slot, primitive code) from rank 0 to
    every other rank: P2P phase, wire id `ids.announcement(seq)`, protected and reliable (budget 0),
    tagged as layer 0 (the most urgent data class under input_first)."""

    def __init__(self, transport, cfg: CommConfig, ids: WireIds, n_layers: int):
        self.t, self.cfg, self.ids, self.n_layers = transport, cfg, ids, n_layers
        self._layout = MessageLayout(0, 2, (0,), (0,))
        self._handles: list = []

    def announce(self, iteration: int, seq: int, slot: int, primitive: str) -> None:
        values = np.array([slot, PRIMITIVE_CODES[primitive]], np.float32)
        ident = MessageId(self.cfg.job_id, self.cfg.rank, iteration & 0xFFFF, self.ids.announcement(seq), PHASE_P2P,
                          TYPE_DATA)
        batch, _, _ = tagged_packets(values, ident, self._layout, 0, 2, self.n_layers, self.cfg, self.t.vpp,
                                     protect=True)
        self._handles = [h for h in self._handles if not h.done()]
        for r in range(self.cfg.world):
            if r != self.cfg.rank:
                self._handles.append(self.t.send(r, batch, SendInfo(rec_msg_id=slot, budget=0.0)))

    def receive(self, iteration: int, seq: int, timeout_s: float) -> tuple[int, str]:
        res = self.t.recv(LEADER, iteration, PHASE_P2P, self.ids.announcement(seq), timeout_s)
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
