"""What the protocol core asks its driver to do: put data or a PROBE on the UDP path, write a
control frame, hand a finished message to its caller. Plain data; the core never performs them.

A round's packets are described once (`Round`: the message's PacketBatch and the packets in wire
order) and handed out in slices (`DataSend`: packets `start..stop` of `round.wire`) as the window
and pacing allow, so a driver can build its send vectors once per round.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dlcp.transport.api import RecvResult, SendResult
from dlcp.wire.header import (
    ECN_ECT0,
    FLAG_PROTECTED,
    TELEMETRY_LEN,
    TYPE_RETX,
    field_values,
    header_fields,
    set_field_values,
    tos_of,
)


class Round:
    """One round of a message: the packets its sender transmits before the round's PROBE.

    `order`: every packet of the round (seq numbers, in sending order); `wire`: those that really go
    on the wire (the same array unless the test knob `inject_loss` skips some); `retx`: a
    retransmission round (type RETX, drop precedence 0, PROTECTED); `ecn`: ECN-capable (ECT(0)).
    `taken` counts the packets of `wire` already handed out. `prepared` belongs to the driver (what it
    builds once per round to send its packets: send vectors, header rows).
    """

    __slots__ = ("batch", "dst", "ecn", "key", "number", "order", "prepared", "retx", "taken", "wire")

    def __init__(self, key, dst: int, number: int, batch, order: np.ndarray, wire: np.ndarray, retx: bool, ecn: bool):
        self.key, self.dst, self.number, self.batch = key, dst, number, batch
        self.order, self.wire, self.retx, self.ecn = order, wire, retx, ecn
        self.taken = 0
        self.prepared: Any = None  # the driver's: its SendVectors, or (rows, tos) for data_datagrams

    def header_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The header of every packet of `wire` (a copy, in wire order) and its IPv4 TOS byte.

        A retransmission goes out as RETX with drop precedence 0 and the PROTECTED flag: the receiver
        asked for exactly these packets because the message cannot finish within budget without them,
        so a switch must not early-drop them again (they still tail-drop when a queue is full)."""
        rows = self.batch.headers[self.wire]  # a copy
        f = header_fields(rows)  # a view: writes land in rows
        if self.retx:
            set_field_values(f, "type", TYPE_RETX)
            set_field_values(f, "drop_prec", 0)
            set_field_values(f, "flags", field_values(f, "flags") | FLAG_PROTECTED)
        tos = tos_of(field_values(f, "prio").astype(np.int32), field_values(f, "drop_prec").astype(np.int32))
        if self.ecn:
            tos = tos | ECN_ECT0
        return rows, tos


@dataclass(slots=True)
class DataSend:
    """Put packets `round.wire[start:stop]` on the UDP path to `dst`."""

    dst: int
    round: Round
    start: int
    stop: int


def data_datagrams(tx: DataSend):
    """Each packet of `tx` as (UDP payload, IPv4 TOS), in order: header, an empty telemetry block
    when the batch carries one, values. Builds the round's header rows the first time (`Round.prepared`).
    For drivers that hand a datagram over as bytes (the virtual-time and ns-3 drivers)."""
    rnd = tx.round
    if rnd.prepared is None:
        rnd.prepared = rnd.header_rows()
    rows, tos = rnd.prepared
    batch = rnd.batch
    vpp = batch.values_per_pkt
    tel = bytes(TELEMETRY_LEN) if batch.telemetry else b""
    values = batch.values
    for i in range(tx.start, tx.stop):
        seq = int(rnd.wire[i])
        yield rows[i].tobytes() + tel + values[seq * vpp : (seq + 1) * vpp].tobytes(), int(tos[i])


@dataclass(slots=True)
class ProbeSend:
    """Put the in-band PROBE datagram `data` (UDP payload) on the UDP path to `dst` with IPv4 TOS `tos`."""

    dst: int
    key: tuple
    data: bytes
    tos: int


@dataclass(slots=True)
class FrameSend:
    """Write control frame `data` (length prefix included) toward `peer`: on the connection `channel`
    when it is set (the one the peer's DESCRIBE came on), else on this endpoint's own connection to
    `peer`."""

    peer: int
    channel: object
    data: bytes


@dataclass(slots=True)
class SendDone:
    """A message this endpoint sent is finished (STOP, FORCE_STOP answered, or given up)."""

    key: tuple
    result: SendResult


@dataclass(slots=True)
class RecvDone:
    """A message this endpoint received is finished; its values are ready for the caller."""

    key: tuple
    result: RecvResult
