"""DLCP wire format: the one definition of the 24-byte DLCP header and its telemetry block.

Layout (all fields big-endian; see docs/wire-format.md):

    byte 0      ver:4 type:4
    byte 1      prio:3 drop_prec:2 phase:3
    byte 2      job_id
    byte 3      src_rank
    bytes 4-5   iter          (iteration mod 2**16)
    bytes 6-7   msg_id
    bytes 8-9   layer_id      (layer of the first value in the payload)
    byte 10     mag_class     (log2 magnitude bucket, 8 = message median)
    byte 11     flags         (bit0 LAST, bit1 PROTECTED, bit2 TELEMETRY)
    bytes 12-15 seq           (packet index in the message)
    bytes 16-19 n_pkts
    bytes 20-23 offset        (value offset of the payload in the flat message)

When TELEMETRY is set, an 8-byte telemetry block follows the header (the sender reserves it zeroed;
switches fill it in place so the frame length never changes):

    byte 0      hops               (switches that stamped the block)
    byte 1      reserved
    bytes 2-3   max_enq_qdepth     (packets ahead in the packet's priority queue of the egress port
                                    on arrival, max over hops)
    bytes 4-7   sum_deq_timedelta_us (time spent queued, summed over hops)

The payload that follows is little-endian fp32 values (the host's native order on every platform we
run on), at most MAX_PAYLOAD_BYTES.

A PROBE (type 3) travels on the data path, in band, right after a round of a message's packets, so
that queues which hold back that data hold back the PROBE too (docs/transport.md). Its header names
the message like its data packets do (phase, job_id, src_rank, iter, msg_id, n_pkts, layer_id of the
message's first layer) with seq 0, offset 0, drop_prec 0 and flags PROTECTED; prio is the lowest
priority among the packets of its round. An 8-byte body follows the header (after the telemetry
block, if TELEMETRY is set):

    byte 0      round         (1 = the first transmission, k = after k-1 retransmission rounds)
    byte 1      attempt       (0 = first PROBE of the round, k = k-th re-probe after a timeout)
    bytes 2-3   reserved      (0)
    bytes 4-7   round_pkts    (data packets the sender sent in this round)

Three views of the same layout live here: `HEADER` (struct, one header at a time), `HEADER_DTYPE`
(numpy, many headers at once) and the scapy layers `DLCP` / `DLCPTelemetry` (tests and pcaps).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

# --- constants -------------------------------------------------------------------------------

VERSION = 1
HEADER_LEN = 24
TELEMETRY_LEN = 8
DATA_PORT = 9910  # UDP destination port of DLCP data (configurable per experiment)
MAX_PAYLOAD_BYTES = 1400  # keeps Ether+IPv4+UDP+DLCP+payload under a 1500-byte MTU
VALUE_BYTES = 4  # fp32
VALUES_PER_PKT = MAX_PAYLOAD_BYTES // VALUE_BYTES  # 350

# type (low nibble of byte 0)
TYPE_DATA = 0
TYPE_RETX = 1
TYPE_PARAM = 2
TYPE_PROBE = 3  # in-band PROBE: header + PROBE_BODY, no values
TYPE_NAMES = {TYPE_DATA: "DATA", TYPE_RETX: "RETX", TYPE_PARAM: "PARAM", TYPE_PROBE: "PROBE"}

# phase (low 3 bits of byte 1)
PHASE_PUSH = 0
PHASE_PULL = 1
PHASE_RS = 2
PHASE_AG = 3
PHASE_P2P = 4
PHASE_NAMES = {PHASE_PUSH: "push", PHASE_PULL: "pull", PHASE_RS: "reduce_scatter",
               PHASE_AG: "all_gather", PHASE_P2P: "p2p"}

# flags (byte 11)
FLAG_LAST = 0x01
FLAG_PROTECTED = 0x02
FLAG_TELEMETRY = 0x04
FLAG_NAMES = ["LAST", "PROTECTED", "TELEMETRY"]  # bit order, for scapy's FlagsField

# priorities: 7 is served first
PRIO_BITS = 3
DROP_PREC_BITS = 2
PHASE_BITS = 3
PRIO_MAX = (1 << PRIO_BITS) - 1
DROP_PREC_MAX = (1 << DROP_PREC_BITS) - 1
PRIO_BACKGROUND = 0
PRIO_CONTROL = 7
PRIO_DATA_MIN = 1
PRIO_DATA_MAX = 6
MAG_CLASS_MAX = 15
MAG_CLASS_MEDIAN = 8

# field widths in bits, in wire order: the P4 header and the scapy layer are checked against this
FIELD_BITS = (
    ("ver", 4), ("type", 4),
    ("prio", 3), ("drop_prec", 2), ("phase", 3),
    ("job_id", 8), ("src_rank", 8),
    ("iter", 16), ("msg_id", 16), ("layer_id", 16),
    ("mag_class", 8), ("flags", 8),
    ("seq", 32), ("n_pkts", 32), ("offset", 32),
)
TELEMETRY_FIELD_BITS = (
    ("hops", 8), ("reserved", 8), ("max_enq_qdepth", 16), ("sum_deq_timedelta_us", 32),
)

PROBE_FIELD_BITS = (("round", 8), ("attempt", 8), ("reserved", 16), ("round_pkts", 32))

HEADER = struct.Struct("!BBBBHHHBBIII")
TELEMETRY = struct.Struct("!BBHI")
PROBE_BODY = struct.Struct("!BBHI")
PROBE_LEN = PROBE_BODY.size  # 8
assert HEADER.size == HEADER_LEN and TELEMETRY.size == TELEMETRY_LEN
assert 8 * PROBE_LEN == sum(bits for _, bits in PROBE_FIELD_BITS)

# numpy view: the raw bytes 0 and 1 stay packed (ver_type, prio_dp_phase)
HEADER_DTYPE = np.dtype([
    ("ver_type", "u1"), ("prio_dp_phase", "u1"), ("job_id", "u1"), ("src_rank", "u1"),
    ("iter", ">u2"), ("msg_id", ">u2"), ("layer_id", ">u2"),
    ("mag_class", "u1"), ("flags", "u1"),
    ("seq", ">u4"), ("n_pkts", ">u4"), ("offset", ">u4"),
])
assert HEADER_DTYPE.itemsize == HEADER_LEN


class MalformedPacket(ValueError):
    """A DLCP packet (or header, or control message) that cannot be accepted.

    `field` names the offending field so receivers can count drops per cause.
    """

    def __init__(self, field: str, detail: str):
        super().__init__(f"malformed DLCP packet: {field}: {detail}")
        self.field = field
        self.detail = detail


# --- DSCP and ECN -------------------------------------------------------------------------------

# The two low bits of the IPv4 TOS byte (RFC 3168). Senders with congestion control send ECT(0);
# switches rewrite ECT to CE once the packet's queue has K packets (docs/pipeline.md, "ECN").
ECN_NOT_ECT = 0
ECN_ECT1 = 1
ECN_ECT0 = 2
ECN_CE = 3
ECN_MASK = 3

def dscp_of(prio, drop_prec):
    """DSCP carrying (prio, drop_prec), AF-like: works on ints and numpy arrays."""
    return (prio << 3) | (drop_prec << 1)


def tos_of(prio: int, drop_prec: int) -> int:
    """The IPv4 TOS byte (DSCP in the upper six bits, ECN bits zero)."""
    return dscp_of(prio, drop_prec) << 2


def prio_dp_of_dscp(dscp: int) -> tuple[int, int]:
    """Inverse of `dscp_of` (ignores the low DSCP bit)."""
    return (dscp >> 3) & PRIO_MAX, (dscp >> 1) & DROP_PREC_MAX


# --- one header at a time (struct) ---------------------------------------------------------------

@dataclass(slots=True)
class DlcpHeader:
    type: int = TYPE_DATA
    prio: int = PRIO_DATA_MIN
    drop_prec: int = 0
    phase: int = PHASE_PUSH
    job_id: int = 0
    src_rank: int = 0
    iter: int = 0
    msg_id: int = 0
    layer_id: int = 0
    mag_class: int = MAG_CLASS_MEDIAN
    flags: int = 0
    seq: int = 0
    n_pkts: int = 1
    offset: int = 0
    ver: int = VERSION

    def pack(self) -> bytes:
        buf = bytearray(HEADER_LEN)
        pack_into(buf, 0, self)
        return bytes(buf)

    @property
    def protected(self) -> bool:
        return bool(self.flags & FLAG_PROTECTED)

    @property
    def has_telemetry(self) -> bool:
        return bool(self.flags & FLAG_TELEMETRY)


_RANGES = (
    ("ver", 0, 15), ("type", 0, 15), ("prio", 0, PRIO_MAX), ("drop_prec", 0, DROP_PREC_MAX),
    ("phase", 0, 7), ("job_id", 0, 255), ("src_rank", 0, 255), ("iter", 0, 0xFFFF),
    ("msg_id", 0, 0xFFFF), ("layer_id", 0, 0xFFFF), ("mag_class", 0, MAG_CLASS_MAX),
    ("flags", 0, 255), ("seq", 0, 0xFFFFFFFF), ("n_pkts", 0, 0xFFFFFFFF),
    ("offset", 0, 0xFFFFFFFF),
)


def pack_into(buf, offset: int, h: DlcpHeader) -> None:
    """Encode `h` into `buf` (bytearray / memoryview) at `offset`; raises MalformedPacket on a
    field that does not fit its width."""
    for name, lo, hi in _RANGES:
        v = getattr(h, name)
        if not lo <= v <= hi:
            raise MalformedPacket(name, f"{v} outside {lo}..{hi}")
    HEADER.pack_into(
        buf, offset,
        (h.ver << 4) | h.type, (h.prio << 5) | (h.drop_prec << 3) | h.phase,
        h.job_id, h.src_rank, h.iter, h.msg_id, h.layer_id, h.mag_class, h.flags,
        h.seq, h.n_pkts, h.offset)


def unpack_from(buf, offset: int = 0) -> DlcpHeader:
    """Decode the header at `offset` of `buf` (any buffer; nothing is copied).

    Raises MalformedPacket naming the field for a short buffer, a wrong version, an unknown type
    or phase, a seq/offset inconsistent with n_pkts.
    """
    avail = len(buf) - offset
    if avail < HEADER_LEN:
        raise MalformedPacket("length", f"{avail} bytes, the DLCP header needs {HEADER_LEN}")
    (vt, pdp, job, src, it, msg, layer, mag, flags, seq, n_pkts, off) = HEADER.unpack_from(buf, offset)
    ver, typ = vt >> 4, vt & 0x0F
    if ver != VERSION:
        raise MalformedPacket("ver", f"version {ver}, expected {VERSION}")
    if typ not in TYPE_NAMES:
        raise MalformedPacket("type", f"unknown type {typ}")
    phase = pdp & 0x07
    if phase not in PHASE_NAMES:
        raise MalformedPacket("phase", f"unknown phase {phase}")
    if n_pkts == 0:
        raise MalformedPacket("n_pkts", "zero packets in a message")
    if seq >= n_pkts:
        raise MalformedPacket("seq", f"seq {seq} >= n_pkts {n_pkts}")
    if mag > MAG_CLASS_MAX:
        raise MalformedPacket("mag_class", f"{mag} > {MAG_CLASS_MAX}")
    return DlcpHeader(type=typ, prio=pdp >> 5, drop_prec=(pdp >> 3) & 0x03, phase=phase,
                      job_id=job, src_rank=src, iter=it, msg_id=msg, layer_id=layer,
                      mag_class=mag, flags=flags, seq=seq, n_pkts=n_pkts, offset=off, ver=ver)


@dataclass(slots=True)
class Telemetry:
    hops: int = 0
    max_enq_qdepth: int = 0
    sum_deq_timedelta_us: int = 0


def unpack_telemetry(buf, offset: int = HEADER_LEN) -> Telemetry:
    if len(buf) - offset < TELEMETRY_LEN:
        raise MalformedPacket("telemetry", f"{len(buf) - offset} bytes, the block needs {TELEMETRY_LEN}")
    hops, _, qd, dt = TELEMETRY.unpack_from(buf, offset)
    return Telemetry(hops, qd, dt)


@dataclass(slots=True)
class Probe:
    """The body of an in-band PROBE (see the module docstring)."""
    round: int = 1
    attempt: int = 0
    round_pkts: int = 0


def probe_header(h: DlcpHeader, prio: int) -> DlcpHeader:
    """The header of a PROBE for the message whose (first) data header is `h`, sent at `prio`."""
    return DlcpHeader(type=TYPE_PROBE, prio=prio, drop_prec=0, phase=h.phase, job_id=h.job_id,
                      src_rank=h.src_rank, iter=h.iter, msg_id=h.msg_id, layer_id=h.layer_id,
                      mag_class=MAG_CLASS_MEDIAN, flags=FLAG_PROTECTED, seq=0, n_pkts=h.n_pkts, offset=0)


def pack_probe(h: DlcpHeader, p: Probe) -> bytes:
    """A PROBE datagram (UDP payload): header `h` (type PROBE, see `probe_header`) and body `p`."""
    if h.type != TYPE_PROBE or h.has_telemetry:
        raise ValueError("pack_probe needs a PROBE header without telemetry")
    for name, hi in (("round", 255), ("attempt", 255), ("round_pkts", 0xFFFFFFFF)):
        v = getattr(p, name)
        if not 0 <= v <= hi:
            raise MalformedPacket(f"probe.{name}", f"{v} outside 0..{hi}")
    return h.pack() + PROBE_BODY.pack(p.round, p.attempt, 0, p.round_pkts)


def unpack_probe(buf, offset: int = HEADER_LEN) -> Probe:
    """The PROBE body at `offset` (the payload offset of its header); it must end the datagram."""
    if len(buf) - offset != PROBE_LEN:
        raise MalformedPacket("probe.length", f"{len(buf) - offset} body bytes, a PROBE has {PROBE_LEN}")
    rnd, attempt, _, pkts = PROBE_BODY.unpack_from(buf, offset)
    if rnd == 0:
        raise MalformedPacket("probe.round", "round 0 (rounds start at 1)")
    return Probe(rnd, attempt, pkts)


def payload_offset(flags: int) -> int:
    """Where the fp32 payload starts after the UDP header."""
    return HEADER_LEN + (TELEMETRY_LEN if flags & FLAG_TELEMETRY else 0)


# --- many headers at once (numpy) ----------------------------------------------------------------

def pack_headers(n: int, *, type: int, phase: int, job_id: int, src_rank: int, iter: int,
                 msg_id: int, prio, drop_prec, layer_id, mag_class, flags,
                 offset, seq=None) -> np.ndarray:
    """Build `n` headers as an (n, 24) uint8 array. Per-packet fields take scalars or arrays."""
    h = np.zeros(n, dtype=HEADER_DTYPE)
    h["ver_type"] = (VERSION << 4) | type
    h["prio_dp_phase"] = (np.asarray(prio, np.uint8) << 5) | (np.asarray(drop_prec, np.uint8) << 3) | phase
    h["job_id"] = job_id
    h["src_rank"] = src_rank
    h["iter"] = iter & 0xFFFF
    h["msg_id"] = msg_id
    h["layer_id"] = layer_id
    h["mag_class"] = mag_class
    h["flags"] = flags
    h["seq"] = np.arange(n, dtype=np.uint32) if seq is None else seq
    h["n_pkts"] = n
    h["offset"] = offset
    return h.view(np.uint8).reshape(n, HEADER_LEN)


def header_fields(headers: np.ndarray) -> np.ndarray:
    """The structured (numpy) view of an (n, 24) uint8 header array, for vectorised reads."""
    return np.ascontiguousarray(headers).view(HEADER_DTYPE).reshape(-1)


# --- scapy layers (tests, pcap analysis) ------------------------------------------------------------

def _scapy_layers():
    from scapy.fields import BitEnumField, BitField, ByteField, FlagsField, IntField, ShortField
    from scapy.layers.inet import UDP
    from scapy.packet import Packet, bind_layers

    class DLCP(Packet):
        name = "DLCP"
        fields_desc = [
            BitField("ver", VERSION, 4),
            BitEnumField("type", TYPE_DATA, 4, TYPE_NAMES),
            BitField("prio", PRIO_DATA_MIN, 3),
            BitField("drop_prec", 0, 2),
            BitEnumField("phase", PHASE_PUSH, 3, PHASE_NAMES),
            ByteField("job_id", 0),
            ByteField("src_rank", 0),
            ShortField("iter", 0),
            ShortField("msg_id", 0),
            ShortField("layer_id", 0),
            ByteField("mag_class", MAG_CLASS_MEDIAN),
            FlagsField("flags", 0, 8, FLAG_NAMES),
            IntField("seq", 0),
            IntField("n_pkts", 1),
            IntField("offset", 0),
        ]

        def guess_payload_class(self, payload):
            if int(self.flags) & FLAG_TELEMETRY:
                return DLCPTelemetry
            if self.type == TYPE_PROBE:
                return DLCPProbe
            return super().guess_payload_class(payload)

    class DLCPTelemetry(Packet):
        name = "DLCPTelemetry"
        fields_desc = [
            ByteField("hops", 0),
            ByteField("reserved", 0),
            ShortField("max_enq_qdepth", 0),
            IntField("sum_deq_timedelta_us", 0),
        ]

        def guess_payload_class(self, payload):
            under = self.underlayer
            if under is not None and under.type == TYPE_PROBE:
                return DLCPProbe
            return super().guess_payload_class(payload)

    class DLCPProbe(Packet):
        name = "DLCPProbe"
        fields_desc = [
            ByteField("round", 1),
            ByteField("attempt", 0),
            ShortField("reserved", 0),
            IntField("round_pkts", 0),
        ]

    bind_layers(UDP, DLCP, dport=DATA_PORT)
    return DLCP, DLCPTelemetry, DLCPProbe


_LAYERS = None


def scapy_layers():
    """(DLCP, DLCPTelemetry) scapy Packet classes, bound to UDP dport DATA_PORT.

    Built on first use so the hot path never imports scapy.
    """
    global _LAYERS
    if _LAYERS is None:
        _LAYERS = _scapy_layers()
    return _LAYERS[:2]


def scapy_probe_layer():
    """The scapy Packet class of the in-band PROBE body (follows DLCP, or DLCPTelemetry)."""
    scapy_layers()
    return _LAYERS[2]


def bind_data_port(port: int) -> None:
    """Also decode UDP traffic to `port` as DLCP (experiments may move the data port)."""
    from scapy.layers.inet import UDP
    from scapy.packet import bind_layers
    bind_layers(UDP, scapy_layers()[0], dport=port)
