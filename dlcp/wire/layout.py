"""The one definition of the DLCP wire format, as data (docs/wire-format.md).

Everything else is derived from `LAYOUT`: the struct/numpy/scapy views of `dlcp/wire/header.py`
(at import), and the P4 header types and constants (`p4/include/generated/dlcp_wire.p4`) and the
C header of the built-in switch's fast path (`dlcp/switch/c/dlcp_wire.h`), which
`python -m dlcp.codegen` writes (`make gen`; a test fails while they are stale).

A header is a sequence of fields, most significant bit first, big-endian. Fields of 8, 16 or 32
bits on a byte boundary are words of their own; narrower fields are packed together, first field in
the top bits, until they fill a 1-, 2- or 4-byte word (`slots`). Widening a field or adding one is
an edit of the tuples below, followed by `make gen`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

WORD_BYTES = (1, 2, 4)  # struct B, H, I
ECN_BITS = 2  # the IPv4 TOS byte is DSCP (6 bits) then ECN (2 bits)


@dataclass(frozen=True)
class Field:
    name: str
    bits: int
    doc: str = ""


@dataclass(frozen=True)
class Code:
    """A named value of a header field (a type, a phase, a flag bit)."""

    name: str  # the constant's suffix: TYPE_<name>, PHASE_<name>, FLAG_<name>
    value: int
    label: str  # what records and pcaps print


@dataclass(frozen=True)
class Slot:
    """Where a field sits: inside word number `word` (the struct item), which starts at byte
    `offset` of the header and is `size` bytes long, `shift` bits up from the word's lowest bit."""

    name: str
    bits: int
    word: int
    offset: int
    size: int
    shift: int

    @property
    def mask(self) -> int:
        return (1 << self.bits) - 1

    @property
    def packed(self) -> bool:
        """Shares its word with other fields."""
        return self.bits != 8 * self.size


@dataclass(frozen=True)
class WireLayout:
    version: int
    data_port: int  # UDP destination port of DLCP data (an experiment may move it)
    header: tuple[Field, ...]
    telemetry: tuple[Field, ...]  # follows the header when FLAG_TELEMETRY is set
    probe: tuple[Field, ...]  # body of an in-band PROBE (type PROBE)
    types: tuple[Code, ...]
    phases: tuple[Code, ...]
    flags: tuple[Code, ...]
    dscp: tuple[Field, ...]  # the IPv4 DSCP (6 bits) of a DLCP packet, most significant first
    ecn: tuple[Code, ...]  # the 2 ECN bits below the DSCP (RFC 3168): what senders set, switches mark
    max_payload_bytes: int  # fp32 values after the header (and telemetry block)
    value_bytes: int
    eth_len: int = 14  # headers in front of the DLCP header in a frame
    ipv4_len: int = 20  # without options
    udp_len: int = 8

    def field(self, name: str) -> Field:
        return next(f for f in self.header if f.name == name)


LAYOUT = WireLayout(
    version=1,
    data_port=9910,
    header=(
        Field("ver", 4, "version"),
        Field("type", 4, "DATA, RETX, PARAM or PROBE"),
        Field("prio", 3, "queue priority, 7 served first"),
        Field("drop_prec", 2, "drop precedence, 0 protected .. 3 most droppable"),
        Field("phase", 3, "PUSH, PULL, RS, AG or P2P"),
        Field("job_id", 8, "experiment / job"),
        Field("src_rank", 8, "sender rank"),
        Field("iter", 16, "iteration mod 2**16"),
        Field("msg_id", 16, "message (tensor, bucket, ring step) within the iteration"),
        Field("layer_id", 16, "layer of the first value in the payload (0 = input side)"),
        Field("mag_class", 8, "log2 magnitude bucket 0..15, 8 = message median"),
        Field("flags", 8, "bit0 LAST, bit1 PROTECTED, bit2 TELEMETRY"),
        Field("seq", 32, "packet index in the message"),
        Field("n_pkts", 32, "packets in the message"),
        Field("offset", 32, "value offset of the payload in the flattened message"),
    ),
    telemetry=(
        Field("hops", 8, "switches that stamped the block"),
        Field("reserved", 8, "zero; switches leave it as it came"),
        Field("max_enq_qdepth", 16, "packets ahead in the packet's priority queue on arrival, max over hops"),
        Field("sum_deq_timedelta_us", 32, "time spent queued, summed over hops"),
    ),
    probe=(
        Field("round", 8, "1 = the first transmission, k = after k-1 retransmission rounds"),
        Field("attempt", 8, "0 = first PROBE of the round, k = k-th re-probe after a timeout"),
        Field("reserved", 16, "zero"),
        Field("round_pkts", 32, "data packets the sender sent in this round"),
    ),
    types=(Code("DATA", 0, "DATA"), Code("RETX", 1, "RETX"), Code("PARAM", 2, "PARAM"), Code("PROBE", 3, "PROBE")),
    phases=(
        Code("PUSH", 0, "push"),
        Code("PULL", 1, "pull"),
        Code("RS", 2, "reduce_scatter"),
        Code("AG", 3, "all_gather"),
        Code("P2P", 4, "p2p"),
    ),
    flags=(Code("LAST", 0x01, "LAST"), Code("PROTECTED", 0x02, "PROTECTED"), Code("TELEMETRY", 0x04, "TELEMETRY")),
    dscp=(Field("prio", 3), Field("drop_prec", 2), Field("zero", 1)),
    # senders with congestion control send ECT(0); a switch rewrites ECT(0) or ECT(1) to CE once the
    # packet's queue holds K packets (docs/pipeline.md, "ECN")
    ecn=(Code("NOT_ECT", 0, "Not-ECT"), Code("ECT1", 1, "ECT(1)"), Code("ECT0", 2, "ECT(0)"), Code("CE", 3, "CE")),
    max_payload_bytes=1400,  # keeps Ether + IPv4 + UDP + DLCP + telemetry + payload under a 1500 MTU
    value_bytes=4,  # fp32, little-endian
)


# --- derived views -----------------------------------------------------------------------------


class LayoutError(ValueError):
    """A layout that cannot be laid out in words; the message names the fields."""


def slots(fields: tuple[Field, ...]) -> tuple[Slot, ...]:
    """Every field's word, byte offset and shift (see the module docstring)."""
    out: list[Slot] = []
    group: list[Field] = []
    offset = word = 0
    for f in fields:
        if f.bits < 1:
            raise LayoutError(f"field {f.name}: {f.bits} bits")
        if not group and f.bits % 8 == 0 and f.bits // 8 in WORD_BYTES:
            out.append(Slot(f.name, f.bits, word, offset, f.bits // 8, 0))
            offset, word = offset + f.bits // 8, word + 1
            continue
        group.append(f)
        total = sum(g.bits for g in group)
        if total % 8 == 0 and total // 8 in WORD_BYTES:
            shift = total
            for g in group:
                shift -= g.bits
                out.append(Slot(g.name, g.bits, word, offset, total // 8, shift))
            offset, word, group = offset + total // 8, word + 1, []
        elif total > 8 * max(WORD_BYTES):
            raise LayoutError(
                f"fields {', '.join(g.name for g in group)}: {total} bits do not fill a 1-, 2- or 4-byte word"
            )
    if group:
        raise LayoutError(
            f"fields {', '.join(g.name for g in group)}: {sum(g.bits for g in group)} bits do not fill whole bytes"
        )
    return tuple(out)


def length(fields: tuple[Field, ...]) -> int:
    """Bytes of a header made of `fields`."""
    s = slots(fields)
    return s[-1].offset + s[-1].size if s else 0


def words(fields: tuple[Field, ...]) -> list[tuple[str, int]]:
    """(name, size in bytes) of each word; a packed word is named after its fields joined by '_'."""
    out: dict[int, tuple[list[str], int]] = {}
    for s in slots(fields):
        out.setdefault(s.word, ([], s.size))[0].append(s.name)
    return [("_".join(names), size) for names, size in out.values()]


def struct_format(fields: tuple[Field, ...]) -> str:
    """The `struct` format of a header: one item per word."""
    return "!" + "".join({1: "B", 2: "H", 4: "I"}[size] for _, size in words(fields))


def numpy_dtype_spec(fields: tuple[Field, ...]) -> list[tuple[str, str]]:
    """The numpy structured dtype of a header (big-endian words)."""
    return [(name, "u1" if size == 1 else f">u{size}") for name, size in words(fields)]


def bit_shifts(fields: tuple[Field, ...]) -> dict[str, int]:
    """Shift of each field in a value made of `fields` (first field most significant)."""
    out, shift = {}, sum(f.bits for f in fields)
    for f in fields:
        shift -= f.bits
        out[f.name] = shift
    return out


def check(layout: WireLayout) -> None:
    """Raise LayoutError unless the layout is consistent: every header lays out in words, the
    DSCP carries the header's prio and drop_prec widths, codes fit their fields."""
    for part in ("header", "telemetry", "probe"):
        names = [f.name for f in getattr(layout, part)]
        if len(set(names)) != len(names):
            raise LayoutError(f"{part}: duplicate field names")
        slots(getattr(layout, part))
    dscp = {f.name: f.bits for f in layout.dscp}
    if sum(dscp.values()) != 6:
        raise LayoutError(f"dscp: {sum(dscp.values())} bits, the IPv4 DSCP has 6")
    for name in ("prio", "drop_prec"):
        if dscp.get(name) != layout.field(name).bits:
            raise LayoutError(f"dscp.{name}: {dscp.get(name)} bits, the header's {name} has {layout.field(name).bits}")
    for part, field in (("types", "type"), ("phases", "phase"), ("flags", "flags")):
        bits = layout.field(field).bits
        for c in getattr(layout, part):
            if not 0 <= c.value < 1 << bits:
                raise LayoutError(f"{part}.{c.name}: {c.value} does not fit {field} ({bits} bits)")
    for c in layout.ecn:
        if not 0 <= c.value < 1 << ECN_BITS:
            raise LayoutError(f"ecn.{c.name}: {c.value} does not fit the {ECN_BITS} ECN bits")
    if layout.version >= 1 << layout.field("ver").bits:
        raise LayoutError(f"version {layout.version} does not fit ver")


def codes(items: tuple[Code, ...]) -> Mapping[str, int]:
    return {c.name: c.value for c in items}


check(LAYOUT)
