"""DLCP wire format: the DLCP header, its telemetry block and the in-band PROBE body, in three views
derived from the one definition in `dlcp/wire/layout.py` (byte tables: docs/wire-format.md):
`HEADER` (struct, one header at a time), `HEADER_DTYPE` (numpy, many headers at once) and the scapy
layers `DLCP` / `DLCPTelemetry` / `DLCPProbe` (tests and pcaps).

The header is 24 bytes, big-endian; when flags.TELEMETRY is set an 8-byte telemetry block follows
(the sender reserves it zeroed, switches fill it in place so the frame length never changes); then
little-endian fp32 values (the host's native order on every platform we run on), at most
MAX_PAYLOAD_BYTES.

A PROBE (type PROBE) travels on the data path, in band, right after a round of a message's packets,
so that queues which hold back that data hold back the PROBE too (docs/transport.md). Its header
names the message like its data packets do (phase, job_id, src_rank, iter, msg_id, n_pkts, layer_id
of the message's first layer) with seq 0, offset 0, drop_prec 0 and flags PROTECTED; prio is the
lowest priority among the packets of its round. The 8-byte PROBE body (round, attempt, reserved,
round_pkts) follows the header (after the telemetry block, if TELEMETRY is set).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, fields
from typing import TypeVar

import numpy as np

from dlcp.wire.layout import ECN_BITS, LAYOUT, bit_shifts, codes, length, numpy_dtype_spec, slots, struct_format

# --- constants (from dlcp/wire/layout.py) ------------------------------------------------------

VERSION = LAYOUT.version
HEADER_LEN = length(LAYOUT.header)
TELEMETRY_LEN = length(LAYOUT.telemetry)
PROBE_LEN = length(LAYOUT.probe)
DATA_PORT = LAYOUT.data_port  # UDP destination port of DLCP data (configurable per experiment)
MAX_PAYLOAD_BYTES = LAYOUT.max_payload_bytes  # keeps Ether+IPv4+UDP+DLCP+payload under a 1500-byte MTU
VALUE_BYTES = LAYOUT.value_bytes  # fp32
VALUES_PER_PKT = MAX_PAYLOAD_BYTES // VALUE_BYTES  # 350
STANDARD_MTU = 1500  # what MAX_PAYLOAD_BYTES is sized for
JUMBO_MTU = 9000


def values_per_pkt_for_mtu(mtu: int) -> int:
    """fp32 values a full data packet carries on links of this IP MTU (the simulator's links may be
    jumbo; emulated links are 1500): the standard payload plus the extra MTU bytes."""
    return (MAX_PAYLOAD_BYTES + mtu - STANDARD_MTU) // VALUE_BYTES


MAX_VALUES_PER_PKT = values_per_pkt_for_mtu(JUMBO_MTU)  # 2225

_TYPES, _PHASES, _FLAGS = codes(LAYOUT.types), codes(LAYOUT.phases), codes(LAYOUT.flags)
TYPE_DATA, TYPE_RETX, TYPE_PARAM, TYPE_PROBE = (_TYPES[n] for n in ("DATA", "RETX", "PARAM", "PROBE"))
TYPE_NAMES = {c.value: c.label for c in LAYOUT.types}
PHASE_PUSH, PHASE_PULL, PHASE_RS, PHASE_AG, PHASE_P2P = (_PHASES[n] for n in ("PUSH", "PULL", "RS", "AG", "P2P"))
PHASE_NAMES = {c.value: c.label for c in LAYOUT.phases}
FLAG_LAST, FLAG_PROTECTED, FLAG_TELEMETRY = (_FLAGS[n] for n in ("LAST", "PROTECTED", "TELEMETRY"))
FLAG_NAMES = [c.label for c in sorted(LAYOUT.flags, key=lambda c: c.value)]  # bit order, for scapy

# field widths in bits, in wire order
FIELD_BITS = tuple((f.name, f.bits) for f in LAYOUT.header)
TELEMETRY_FIELD_BITS = tuple((f.name, f.bits) for f in LAYOUT.telemetry)
PROBE_FIELD_BITS = tuple((f.name, f.bits) for f in LAYOUT.probe)

# where each header field sits: SLOTS[name].word / .shift / .mask
SLOTS = {s.name: s for s in slots(LAYOUT.header)}
_TEL_SLOTS = slots(LAYOUT.telemetry)
TEL_SLOTS = {s.name: s for s in _TEL_SLOTS}
_PROBE_SLOTS = slots(LAYOUT.probe)
VER_SHIFT = SLOTS["ver"].shift
TYPE_MASK = SLOTS["type"].mask
PRIO_SHIFT, DROP_PREC_SHIFT, PHASE_SHIFT = (SLOTS[n].shift for n in ("prio", "drop_prec", "phase"))
PHASE_MASK = SLOTS["phase"].mask

# priorities: 7 is served first
PRIO_BITS = SLOTS["prio"].bits
DROP_PREC_BITS = SLOTS["drop_prec"].bits
PHASE_BITS = SLOTS["phase"].bits
PRIO_MAX = SLOTS["prio"].mask
DROP_PREC_MAX = SLOTS["drop_prec"].mask
PRIO_BACKGROUND = 0
PRIO_CONTROL = PRIO_MAX
PRIO_DATA_MIN = 1
PRIO_DATA_MAX = PRIO_MAX - 1
MAG_CLASS_MAX = 15
MAG_CLASS_MEDIAN = 8

HEADER = struct.Struct(struct_format(LAYOUT.header))
TELEMETRY = struct.Struct(struct_format(LAYOUT.telemetry))
PROBE_BODY = struct.Struct(struct_format(LAYOUT.probe))

# numpy view: packed fields share a word (ver_type, prio_drop_prec_phase); `field_values` unpacks one
HEADER_DTYPE = np.dtype(numpy_dtype_spec(LAYOUT.header))
_HEADER_WORDS: tuple[str, ...] = HEADER_DTYPE.names or ()  # numpy types names Optional; a struct has them
assert HEADER.size == HEADER_DTYPE.itemsize == HEADER_LEN

# the IPv4 DSCP of a DLCP packet: (prio << 3) | (drop_prec << 1)
_DSCP_SHIFTS = bit_shifts(LAYOUT.dscp)
DSCP_PRIO_SHIFT = _DSCP_SHIFTS["prio"]
DSCP_DROP_PREC_SHIFT = _DSCP_SHIFTS["drop_prec"]


def _words_of(slot_list, values) -> list[int]:
    """The struct items of a header from its field values (a mapping or an object's attributes)."""
    get = values.__getitem__ if isinstance(values, dict) else values.__getattribute__
    out: dict[int, int] = {}
    for s in slot_list:
        out[s.word] = out.get(s.word, 0) | (get(s.name) << s.shift)
    return list(out.values())


def _fields_of(slot_list, words) -> dict[str, int]:
    """Field values from a header's struct items."""
    return {s.name: (words[s.word] >> s.shift) & s.mask for s in slot_list}


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
_ECN = codes(LAYOUT.ecn)
ECN_NOT_ECT, ECN_ECT1, ECN_ECT0, ECN_CE = (_ECN[n] for n in ("NOT_ECT", "ECT1", "ECT0", "CE"))
ECN_MASK = (1 << ECN_BITS) - 1


_IntOrArray = TypeVar("_IntOrArray", int, np.ndarray)


def dscp_of(prio, drop_prec):
    """DSCP carrying (prio, drop_prec), AF-like: works on ints and numpy arrays."""
    return (prio << DSCP_PRIO_SHIFT) | (drop_prec << DSCP_DROP_PREC_SHIFT)


def tos_of(prio: _IntOrArray, drop_prec: _IntOrArray) -> _IntOrArray:
    """The IPv4 TOS byte (DSCP in the upper six bits, ECN bits zero): of ints or numpy arrays."""
    return dscp_of(prio, drop_prec) << 2


def prio_dp_of_dscp(dscp: int) -> tuple[int, int]:
    """Inverse of `dscp_of` (ignores the low DSCP bit)."""
    return (dscp >> DSCP_PRIO_SHIFT) & PRIO_MAX, (dscp >> DSCP_DROP_PREC_SHIFT) & DROP_PREC_MAX


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


assert {f.name for f in fields(DlcpHeader)} == set(SLOTS), "DlcpHeader must have the fields of LAYOUT.header"

# what each field may hold: its width, and mag_class's 16 classes
_RANGES = tuple((s.name, 0, MAG_CLASS_MAX if s.name == "mag_class" else s.mask) for s in SLOTS.values())


def pack_into(buf, offset: int, h: DlcpHeader) -> None:
    """Encode `h` into `buf` (bytearray / memoryview) at `offset`; raises MalformedPacket on a
    field that does not fit its width."""
    for name, lo, hi in _RANGES:
        v = getattr(h, name)
        if not lo <= v <= hi:
            raise MalformedPacket(name, f"{v} outside {lo}..{hi}")
    HEADER.pack_into(buf, offset, *_words_of(SLOTS.values(), h))


def unpack_from(buf, offset: int = 0) -> DlcpHeader:
    """Decode the header at `offset` of `buf` (any buffer; nothing is copied).

    Raises MalformedPacket naming the field for a short buffer, a wrong version, an unknown type
    or phase, a seq/offset inconsistent with n_pkts.
    """
    avail = len(buf) - offset
    if avail < HEADER_LEN:
        raise MalformedPacket("length", f"{avail} bytes, the DLCP header needs {HEADER_LEN}")
    f = _fields_of(SLOTS.values(), HEADER.unpack_from(buf, offset))
    if f["ver"] != VERSION:
        raise MalformedPacket("ver", f"version {f['ver']}, expected {VERSION}")
    if f["type"] not in TYPE_NAMES:
        raise MalformedPacket("type", f"unknown type {f['type']}")
    if f["phase"] not in PHASE_NAMES:
        raise MalformedPacket("phase", f"unknown phase {f['phase']}")
    if f["n_pkts"] == 0:
        raise MalformedPacket("n_pkts", "zero packets in a message")
    if f["seq"] >= f["n_pkts"]:
        raise MalformedPacket("seq", f"seq {f['seq']} >= n_pkts {f['n_pkts']}")
    if f["mag_class"] > MAG_CLASS_MAX:
        raise MalformedPacket("mag_class", f"{f['mag_class']} > {MAG_CLASS_MAX}")
    return DlcpHeader(**f)


@dataclass(slots=True)
class Telemetry:
    hops: int = 0
    max_enq_qdepth: int = 0
    sum_deq_timedelta_us: int = 0


def unpack_telemetry(buf, offset: int = HEADER_LEN) -> Telemetry:
    if len(buf) - offset < TELEMETRY_LEN:
        raise MalformedPacket("telemetry", f"{len(buf) - offset} bytes, the block needs {TELEMETRY_LEN}")
    f = _fields_of(_TEL_SLOTS, TELEMETRY.unpack_from(buf, offset))
    return Telemetry(f["hops"], f["max_enq_qdepth"], f["sum_deq_timedelta_us"])


@dataclass(slots=True)
class Probe:
    """The body of an in-band PROBE (see the module docstring)."""

    round: int = 1
    attempt: int = 0
    round_pkts: int = 0


def probe_header(h: DlcpHeader, prio: int) -> DlcpHeader:
    """The header of a PROBE for the message whose (first) data header is `h`, sent at `prio`."""
    return DlcpHeader(
        type=TYPE_PROBE,
        prio=prio,
        drop_prec=0,
        phase=h.phase,
        job_id=h.job_id,
        src_rank=h.src_rank,
        iter=h.iter,
        msg_id=h.msg_id,
        layer_id=h.layer_id,
        mag_class=MAG_CLASS_MEDIAN,
        flags=FLAG_PROTECTED,
        seq=0,
        n_pkts=h.n_pkts,
        offset=0,
    )


def pack_probe(h: DlcpHeader, p: Probe) -> bytes:
    """A PROBE datagram (UDP payload): header `h` (type PROBE, see `probe_header`) and body `p`."""
    if h.type != TYPE_PROBE or h.has_telemetry:
        raise ValueError("pack_probe needs a PROBE header without telemetry")
    values = {"reserved": 0, "round": p.round, "attempt": p.attempt, "round_pkts": p.round_pkts}
    for s in _PROBE_SLOTS:
        if not 0 <= values[s.name] <= s.mask:
            raise MalformedPacket(f"probe.{s.name}", f"{values[s.name]} outside 0..{s.mask}")
    return h.pack() + PROBE_BODY.pack(*_words_of(_PROBE_SLOTS, values))


def unpack_probe(buf, offset: int = HEADER_LEN) -> Probe:
    """The PROBE body at `offset` (the payload offset of its header); it must end the datagram."""
    if len(buf) - offset != PROBE_LEN:
        raise MalformedPacket("probe.length", f"{len(buf) - offset} body bytes, a PROBE has {PROBE_LEN}")
    f = _fields_of(_PROBE_SLOTS, PROBE_BODY.unpack_from(buf, offset))
    if f["round"] == 0:
        raise MalformedPacket("probe.round", "round 0 (rounds start at 1)")
    return Probe(f["round"], f["attempt"], f["round_pkts"])


def payload_offset(flags: int) -> int:
    """Where the fp32 payload starts after the UDP header."""
    return HEADER_LEN + (TELEMETRY_LEN if flags & FLAG_TELEMETRY else 0)


# --- many headers at once (numpy) ----------------------------------------------------------------


def pack_headers(
    n: int,
    *,
    type: int,
    phase: int,
    job_id: int,
    src_rank: int,
    iter: int,
    msg_id: int,
    prio,
    drop_prec,
    layer_id,
    mag_class,
    flags,
    offset,
    seq=None,
) -> np.ndarray:
    """Build `n` headers as an (n, HEADER_LEN) uint8 array. Per-packet fields take scalars or arrays."""
    values = {
        "ver": VERSION,
        "type": type,
        "prio": prio,
        "drop_prec": drop_prec,
        "phase": phase,
        "job_id": job_id,
        "src_rank": src_rank,
        "iter": iter & 0xFFFF,
        "msg_id": msg_id,
        "layer_id": layer_id,
        "mag_class": mag_class,
        "flags": flags,
        "seq": np.arange(n, dtype=np.uint32) if seq is None else seq,
        "n_pkts": n,
        "offset": offset,
    }
    h = np.zeros(n, dtype=HEADER_DTYPE)
    for s in SLOTS.values():
        word = _HEADER_WORDS[s.word]
        kind = HEADER_DTYPE[word].newbyteorder("=")
        h[word] |= np.asarray(values[s.name]).astype(kind) << kind.type(s.shift)
    return h.view(np.uint8).reshape(n, HEADER_LEN)


def header_fields(headers: np.ndarray) -> np.ndarray:
    """The structured (numpy) view of an (n, HEADER_LEN) uint8 header array, for vectorised reads
    (packed fields: `field_values`)."""
    return np.ascontiguousarray(headers).view(HEADER_DTYPE).reshape(-1)


def field_values(view: np.ndarray, name: str) -> np.ndarray:
    """One field of every header in a `header_fields` view (unpacked from its word)."""
    s = SLOTS[name]
    word = view[_HEADER_WORDS[s.word]]
    return (word >> s.shift) & s.mask if s.packed else word


def set_field_values(view: np.ndarray, name: str, values) -> None:
    """Write one field of every header in a `header_fields` view (the rest of its word stays)."""
    s = SLOTS[name]
    word = _HEADER_WORDS[s.word]
    if not s.packed:
        view[word] = values
        return
    kind = view[word].dtype.type
    keep = kind(~(s.mask << s.shift) & ((1 << 8 * s.size) - 1))
    view[word] = (view[word] & keep) | ((np.asarray(values).astype(kind) & kind(s.mask)) << kind(s.shift))


# --- scapy layers (tests, pcap analysis) ------------------------------------------------------------


def _scapy_fields(layout_fields, defaults: dict) -> list:
    """scapy fields of a header, in wire order; type/phase print their names, flags its bits."""
    from scapy.fields import BitEnumField, BitField, FlagsField

    out: list = []
    for f in layout_fields:
        default = defaults.get(f.name, 0)
        if f.name == "type":
            out.append(BitEnumField(f.name, default, f.bits, TYPE_NAMES))
        elif f.name == "phase":
            out.append(BitEnumField(f.name, default, f.bits, PHASE_NAMES))
        elif f.name == "flags":
            out.append(FlagsField(f.name, default, f.bits, FLAG_NAMES))
        else:
            out.append(BitField(f.name, default, f.bits))
    return out


def _scapy_layers():
    from scapy.layers.inet import UDP
    from scapy.packet import Packet, bind_layers

    class DLCP(Packet):
        name = "DLCP"
        fields_desc = _scapy_fields(LAYOUT.header, {f.name: f.default for f in fields(DlcpHeader)})

        def guess_payload_class(self, payload):
            if int(self.flags) & FLAG_TELEMETRY:
                return DLCPTelemetry
            if self.type == TYPE_PROBE:
                return DLCPProbe
            return super().guess_payload_class(payload)

    class DLCPTelemetry(Packet):
        name = "DLCPTelemetry"
        fields_desc = _scapy_fields(LAYOUT.telemetry, {})

        def guess_payload_class(self, payload):
            under = self.underlayer
            if under is not None and under.type == TYPE_PROBE:
                return DLCPProbe
            return super().guess_payload_class(payload)

    class DLCPProbe(Packet):
        name = "DLCPProbe"
        fields_desc = _scapy_fields(LAYOUT.probe, {f.name: f.default for f in fields(Probe)})

    bind_layers(UDP, DLCP, dport=DATA_PORT)
    return DLCP, DLCPTelemetry, DLCPProbe


_LAYERS: tuple | None = None


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
    assert _LAYERS is not None  # scapy_layers() built them
    return _LAYERS[2]


def bind_data_port(port: int) -> None:
    """Also decode UDP traffic to `port` as DLCP (experiments may move the data port)."""
    from scapy.layers.inet import UDP
    from scapy.packet import bind_layers

    bind_layers(UDP, scapy_layers()[0], dport=port)
