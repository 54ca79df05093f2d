"""Flat tensor <-> DLCP packets, and reassembly by offset with a loss mask.

A message is a flat fp32 vector. `packetize` cuts it into packets of `values_per_pkt` values: the
headers are built in one vectorised step into an (n, 24) array and payloads stay views into the
message buffer, so a sender hands (header row, payload slice) pairs to `sendmsg` without copying.
`Reassembler` places packets by offset in any order, ignores duplicates and reports which values
never arrived.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dlcp.wire.header import (
    FLAG_LAST,
    FLAG_PROTECTED,
    FLAG_TELEMETRY,
    HEADER_LEN,
    PHASE_PUSH,
    TELEMETRY_LEN,
    TYPE_DATA,
    VALUE_BYTES,
    VALUES_PER_PKT,
    DlcpHeader,
    MalformedPacket,
    pack_headers,
)
from dlcp.wire.tagging import Tags, n_packets


def as_flat_f32(values) -> np.ndarray:
    """A 1-D float32 numpy view of `values` (numpy array or contiguous CPU torch tensor)."""
    if hasattr(values, "detach"):  # torch: share memory, never copy
        t = values.detach()
        if t.device.type != "cpu" or not t.is_contiguous():
            raise ValueError("packetize needs a contiguous CPU tensor")
        values = t.reshape(-1).numpy()
    arr = np.asarray(values)
    if arr.dtype != np.float32:
        raise ValueError(f"gradient values must be float32, got {arr.dtype}")
    return arr.reshape(-1)


@dataclass
class MessageId:
    """What identifies a message on the wire (fields shared by all its packets)."""

    job_id: int = 0
    src_rank: int = 0
    iter: int = 0
    msg_id: int = 0
    phase: int = PHASE_PUSH
    type: int = TYPE_DATA


@dataclass
class PacketBatch:
    """The packets of one message: header rows plus payload views of the message values."""

    headers: np.ndarray  # (n, 24) uint8
    values: np.ndarray  # flat float32, the message itself (not a copy)
    values_per_pkt: int
    telemetry: bool = False
    _telemetry_block: bytes = field(default=bytes(TELEMETRY_LEN), repr=False)

    def __len__(self) -> int:
        return self.headers.shape[0]

    def payload(self, i: int) -> memoryview:
        lo = i * self.values_per_pkt
        return self.values[lo : lo + self.values_per_pkt].data.cast("B")

    def iovec(self, i: int) -> list:
        """Buffers of packet i in wire order, for socket.sendmsg (no copies)."""
        if self.telemetry:
            return [self.headers[i], self._telemetry_block, self.payload(i)]
        return [self.headers[i], self.payload(i)]

    def to_bytes(self, i: int) -> bytes:
        return b"".join(bytes(b) for b in self.iovec(i))


def packetize(
    values, ident: MessageId, tags: Tags, values_per_pkt: int = VALUES_PER_PKT, telemetry: bool = False
) -> PacketBatch:
    """Cut a flat fp32 message into tagged DLCP packets."""
    flat = as_flat_f32(values)
    n = n_packets(flat.size, values_per_pkt)
    if len(tags) != n:
        raise ValueError(f"{len(tags)} tags for {n} packets")
    flags = np.where(tags.drop_prec == 0, FLAG_PROTECTED, 0).astype(np.uint8)
    if telemetry:
        flags |= FLAG_TELEMETRY
    flags[-1] |= FLAG_LAST
    headers = pack_headers(
        n,
        type=ident.type,
        phase=ident.phase,
        job_id=ident.job_id,
        src_rank=ident.src_rank,
        iter=ident.iter,
        msg_id=ident.msg_id,
        prio=tags.prio,
        drop_prec=tags.drop_prec,
        layer_id=tags.layer_id,
        mag_class=tags.mag_class,
        flags=flags,
        offset=np.arange(n, dtype=np.uint32) * values_per_pkt,
    )
    return PacketBatch(headers, flat, values_per_pkt, telemetry)


class Reassembler:
    """Receives the packets of one message in any order; duplicates are ignored.

    `values` holds what arrived (zeros elsewhere); `loss_mask()` is True for values that never
    arrived. Inconsistent packets raise MalformedPacket naming the field, and change nothing.
    """

    def __init__(self, n_values: int, values_per_pkt: int = VALUES_PER_PKT, out: np.ndarray | None = None):
        self.n_values = n_values
        self.values_per_pkt = values_per_pkt
        self.n_pkts = n_packets(n_values, values_per_pkt)
        self.values = np.zeros(n_values, np.float32) if out is None else as_flat_f32(out)
        if self.values.size != n_values:
            raise ValueError(f"output buffer has {self.values.size} values, message has {n_values}")
        self.received = np.zeros(self.n_pkts, dtype=bool)
        self.n_received = 0
        self.duplicates = 0

    def check(self, h: DlcpHeader, payload_len: int) -> None:
        """Raise MalformedPacket if `h` with a payload of `payload_len` bytes does not fit."""
        if h.n_pkts != self.n_pkts:
            raise MalformedPacket("n_pkts", f"{h.n_pkts}, message has {self.n_pkts}")
        if h.offset != h.seq * self.values_per_pkt:
            raise MalformedPacket("offset", f"{h.offset} does not match seq {h.seq}")
        expect = min(self.values_per_pkt, self.n_values - h.offset) * VALUE_BYTES
        if payload_len != expect:
            raise MalformedPacket("payload", f"{payload_len} bytes, expected {expect}")

    def add(self, h: DlcpHeader, payload) -> bool:
        """Place one packet; returns False for a duplicate."""
        self.check(h, len(payload))
        if self.received[h.seq]:
            self.duplicates += 1
            return False
        n = len(payload) // VALUE_BYTES
        self.values[h.offset : h.offset + n] = np.frombuffer(payload, dtype=np.float32, count=n)
        self.received[h.seq] = True
        self.n_received += 1
        return True

    def add_frame(self, frame) -> bool:
        """Place a packet given as UDP payload bytes (header [+ telemetry] + values)."""
        from dlcp.wire.header import unpack_from

        h = unpack_from(frame)
        start = HEADER_LEN + (TELEMETRY_LEN if h.flags & FLAG_TELEMETRY else 0)
        return self.add(h, memoryview(frame)[start:])

    @property
    def complete(self) -> bool:
        return self.n_received == self.n_pkts

    def missing(self) -> np.ndarray:
        """Sequence numbers not received yet."""
        return np.flatnonzero(~self.received)

    def loss_mask(self) -> np.ndarray:
        """Boolean per value: True where the value never arrived."""
        per_value = np.repeat(~self.received, self.values_per_pkt)[: self.n_values]
        return per_value
