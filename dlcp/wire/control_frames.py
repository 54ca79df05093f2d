"""Wire format of the bounded-loss transport's control channel: DESCRIBE, BITMAP, STOP, FORCE_STOP,
FEEDBACK (docs/wire-format.md, "Control frames").

Control messages travel on TCP (DSCP of priority 7) as length-prefixed frames:

    u32 body length | body

Every body starts with the same 14 bytes (big-endian), naming the data message it is about:

    byte 0      version (3)
    byte 1      type: DESCRIBE 1, BITMAP 2, STOP 3, FORCE_STOP 4, FEEDBACK 5
    byte 2      job_id
    byte 3      src_rank     sender of the data message (PS_RANK for the parameter server)
    byte 4      dst_rank     receiver of the data message
    byte 5      phase        as in the DLCP header
    bytes 6-7   iter         iteration mod 2**16
    bytes 8-9   msg_id       as in the DLCP header
    bytes 10-13 n_pkts

followed by, per type:

    DESCRIBE    u8 reserved, u8 flags (bit0 COUNTS, bit1 FEEDBACK), u16 layer_first, u16 layer_last,
                u8 prio, u8 step, u16 rec_msg_id, u32 n_values, u32 budget_ppm,
                drop_prec map: 2 bits per packet, packet 0 in the top bits of byte 0, ceil(n/4) bytes,
                [COUNTS: one u8 per packet: contributions summed into that packet (ring all-reduce)]
    BITMAP      u8 round, u8 attempt, u32 held_us, u32 missing, u32 protected_missing,
                requested: 1 bit per packet (packet 0 = top bit of byte 0), ceil(n/8) bytes
    STOP        u8 rounds, u8 flags (bit0 FORCED: the answer to FORCE_STOP), u8 attempt,
                u8 reserved, u32 held_us, u32 lost_pkts, u32 protected_lost
    FORCE_STOP  u8 round, u8 flags (bit0 FINAL: end with what arrived, protected packets too)
    FEEDBACK    u32 rcvd_pkts, u32 ce_pkts, u32 last_seq

DESCRIBE is sent once per message, before its data: what the receiver needs to judge the message
(which packets are protected, the budget, record labels, ring contribution counts) but must not act
on yet. The trigger, the PROBE, is not a control message: it travels in band on the data path after
each round (dlcp/wire/header.py, TYPE_PROBE), so it cannot overtake the data it asks about. The receiver
answers a PROBE on the message's control connection with STOP (done, within budget) or BITMAP (the
packets it asks for again), echoing the `attempt` of the PROBE it answers and how long it held that
PROBE before answering (`held_us`: waiting for the DESCRIBE or for a quiet time), so the sender's
PROBE timeout measures network round trips only, without Karn's ambiguity (NO_ATTEMPT in a STOP
that answers FORCE_STOP). FORCE_STOP lifts the budget of a message that ran out of rounds or time:
the receiver answers STOP, or a BITMAP (attempt NO_ATTEMPT) of the protected packets still missing;
a FINAL one ends the message whatever is missing. `rec_msg_id`
and `step` are what the receiver's records show (a ring step is its own wire message but belongs to
a gradient message). `budget_ppm` is the message's loss budget in parts per million (0: every packet
must arrive).

FEEDBACK is the receiver's report for the sender's congestion window (docs/transport.md, "Congestion
control"): how many data packets (DATA and RETX, every message, duplicates too) it has received from
that sender so far and how many of them carried the ECN mark CE, both cumulative modulo 2**32, so a
lost or late report is repaired by the next one. It is about a sender, not a message: its common part
and `last_seq` name the newest packet counted (src_rank is the data sender, dst_rank the receiver), so
the sender can time a round trip from when it sent that packet. A receiver sends FEEDBACK only to
senders whose DESCRIBE set the FEEDBACK flag.

`decode` raises `MalformedPacket` naming the field ("control.type", "control.length", ...);
receivers count it by that name and carry on.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from dlcp.wire.header import PHASE_NAMES, MalformedPacket

# 2: PROBE moved in band, its description became DESCRIBE; 3: FEEDBACK; 4: FORCE_STOP keeps the
# protected packets (FINAL gives them up)
CONTROL_VERSION = 4
DESCRIBE, BITMAP, STOP, FORCE_STOP, FEEDBACK = 1, 2, 3, 4, 5
TYPE_NAMES = {DESCRIBE: "DESCRIBE", BITMAP: "BITMAP", STOP: "STOP", FORCE_STOP: "FORCE_STOP", FEEDBACK: "FEEDBACK"}
DESCRIBE_FLAG_COUNTS = 0x01
DESCRIBE_FLAG_FEEDBACK = 0x02  # the sender runs congestion control: send it FEEDBACK

NO_ATTEMPT = 255  # attempt field of a STOP or BITMAP that answers FORCE_STOP, not a PROBE
PS_RANK = 255  # the parameter server's rank on the wire (records show -1)
MAX_MSG_PKTS = 1 << 21  # 2M packets = 2.9 GB of fp32: anything larger is a corrupt length
PPM = 1_000_000

LEN = struct.Struct("!I")
COMMON = struct.Struct("!BBBBBBHHI")
DESCRIBE_FIXED = struct.Struct("!BBHHBBHII")
BITMAP_FIXED = struct.Struct("!BBIII")
STOP_FIXED = struct.Struct("!BBBBIII")
FORCE_FIXED = struct.Struct("!BB")
FEEDBACK_FIXED = struct.Struct("!III")
_FEEDBACK_FRAME = struct.Struct("!I" + COMMON.format[1:] + FEEDBACK_FIXED.format[1:])
MAX_FRAME = COMMON.size + DESCRIBE_FIXED.size + MAX_MSG_PKTS // 4 + MAX_MSG_PKTS + 16


@dataclass(slots=True)
class Control:
    """One control message (fields not used by its type stay at their defaults)."""

    type: int
    job_id: int
    src_rank: int
    dst_rank: int
    phase: int
    iter: int
    msg_id: int
    n_pkts: int
    round: int = 1  # BITMAP, STOP, FORCE_STOP (DESCRIBE: unused)
    attempt: int = 0  # BITMAP, STOP: the attempt of the PROBE answered
    held_us: int = 0  # BITMAP, STOP: how long the receiver held that PROBE before answering
    # DESCRIBE
    layer_first: int = 0
    layer_last: int = 0
    prio: int = 0
    step: int = 0
    rec_msg_id: int = 0
    n_values: int = 0
    budget_ppm: int = 0
    drop_prec: np.ndarray | None = None  # uint8 per packet
    counts: np.ndarray | None = None  # uint8 per packet, or None
    # BITMAP
    missing: int = 0
    protected_missing: int = 0
    requested: np.ndarray | None = None  # bool per packet
    # STOP
    lost_pkts: int = 0
    protected_lost: int = 0
    forced: bool = False
    # FORCE_STOP
    final: bool = False  # end the message now, protected packets missing or not
    # DESCRIBE
    feedback: bool = False  # the sender wants FEEDBACK frames
    # FEEDBACK (cumulative, mod 2**32)
    rcvd_pkts: int = 0
    ce_pkts: int = 0
    last_seq: int = 0

    @property
    def key(self) -> tuple[int, int, int, int]:
        """(src_rank, iter, phase, msg_id): the data message this is about."""
        return (self.src_rank, self.iter, self.phase, self.msg_id)


# --- 2-bit and 1-bit per-packet maps ------------------------------------------------------------


def pack_drop_prec(dp: np.ndarray) -> bytes:
    dp = np.asarray(dp, dtype=np.uint8)
    pad = (-len(dp)) % 4
    q = np.concatenate([dp, np.zeros(pad, np.uint8)]).reshape(-1, 4)
    return ((q[:, 0] << 6) | (q[:, 1] << 4) | (q[:, 2] << 2) | q[:, 3]).astype(np.uint8).tobytes()


def unpack_drop_prec(raw, n: int) -> np.ndarray:
    b = np.frombuffer(raw, dtype=np.uint8)
    q = np.stack([b >> 6, (b >> 4) & 3, (b >> 2) & 3, b & 3], axis=1).reshape(-1)
    return q[:n].astype(np.uint8)


def pack_bits(mask: np.ndarray) -> bytes:
    return np.packbits(np.asarray(mask, dtype=bool)).tobytes()


def unpack_bits(raw, n: int) -> np.ndarray:
    return np.unpackbits(np.frombuffer(raw, dtype=np.uint8), count=n).astype(bool)


# --- encode ----------------------------------------------------------------------------------------


def _common(m: Control) -> bytes:
    return COMMON.pack(
        CONTROL_VERSION, m.type, m.job_id, m.src_rank, m.dst_rank, m.phase, m.iter & 0xFFFF, m.msg_id, m.n_pkts
    )


def encode(m: Control) -> bytes:
    """The frame (length prefix included) of control message `m`."""
    if m.type == DESCRIBE:
        flags = (DESCRIBE_FLAG_COUNTS if m.counts is not None else 0) | (DESCRIBE_FLAG_FEEDBACK if m.feedback else 0)
        dp = np.zeros(m.n_pkts, np.uint8) if m.drop_prec is None else m.drop_prec
        if len(dp) != m.n_pkts or (m.counts is not None and len(m.counts) != m.n_pkts):
            raise ValueError("DESCRIBE maps must have one entry per packet")
        body = b"".join(
            [
                _common(m),
                DESCRIBE_FIXED.pack(
                    0, flags, m.layer_first, m.layer_last, m.prio, m.step, m.rec_msg_id, m.n_values, m.budget_ppm
                ),
                pack_drop_prec(dp),
                b"" if m.counts is None else np.asarray(m.counts, np.uint8).tobytes(),
            ]
        )
    elif m.type == BITMAP:
        if m.requested is None or len(m.requested) != m.n_pkts:
            raise ValueError("BITMAP map must have one entry per packet")
        body = (
            _common(m)
            + BITMAP_FIXED.pack(m.round, m.attempt, min(m.held_us, 0xFFFFFFFF), m.missing, m.protected_missing)
            + pack_bits(m.requested)
        )
    elif m.type == STOP:
        body = _common(m) + STOP_FIXED.pack(
            m.round, 1 if m.forced else 0, m.attempt, 0, min(m.held_us, 0xFFFFFFFF), m.lost_pkts, m.protected_lost
        )
    elif m.type == FORCE_STOP:
        body = _common(m) + FORCE_FIXED.pack(m.round, 1 if m.final else 0)
    elif m.type == FEEDBACK:
        body = _common(m) + FEEDBACK_FIXED.pack(m.rcvd_pkts & 0xFFFFFFFF, m.ce_pkts & 0xFFFFFFFF, m.last_seq)
    else:
        raise ValueError(f"unknown control type {m.type}")
    return LEN.pack(len(body)) + body


def encode_feedback(
    job_id: int, src_rank: int, dst_rank: int, key, n_pkts: int, rcvd_pkts: int, ce_pkts: int, last_seq: int
) -> bytes:
    """The FEEDBACK frame (length prefix included) in one step: receivers send one every few packets.
    `key` is (src, iter, phase, msg_id) of the message of the newest packet counted, `last_seq` its seq."""
    return _FEEDBACK_FRAME.pack(
        COMMON.size + FEEDBACK_FIXED.size,
        CONTROL_VERSION,
        FEEDBACK,
        job_id,
        src_rank,
        dst_rank,
        key[2],
        key[1] & 0xFFFF,
        key[3],
        n_pkts,
        rcvd_pkts & 0xFFFFFFFF,
        ce_pkts & 0xFFFFFFFF,
        last_seq,
    )


# --- decode ----------------------------------------------------------------------------------------


def _expect_len(body, want: int, what: int) -> None:
    if len(body) != want:
        raise MalformedPacket("control.length", f"{TYPE_NAMES.get(what, what)} of {len(body)} bytes, expected {want}")


def decode(body) -> Control:
    """Parse one frame body; raises MalformedPacket("control.<field>", ...) on anything wrong."""
    if len(body) < COMMON.size:
        raise MalformedPacket("control.length", f"{len(body)} bytes, a control message needs {COMMON.size}")
    ver, typ, job, src, dst, phase, it, msg, n = COMMON.unpack_from(body, 0)
    if ver != CONTROL_VERSION:
        raise MalformedPacket("control.version", f"version {ver}, expected {CONTROL_VERSION}")
    if typ not in TYPE_NAMES:
        raise MalformedPacket("control.type", f"unknown type {typ}")
    if phase not in PHASE_NAMES:
        raise MalformedPacket("control.phase", f"unknown phase {phase}")
    if not 1 <= n <= MAX_MSG_PKTS:
        raise MalformedPacket("control.n_pkts", f"{n} packets (1..{MAX_MSG_PKTS})")
    m = Control(typ, job, src, dst, phase, it, msg, n)
    off = COMMON.size
    if typ == DESCRIBE:
        if len(body) < off + DESCRIBE_FIXED.size:
            raise MalformedPacket("control.length", f"DESCRIBE of {len(body)} bytes")
        (_, flags, m.layer_first, m.layer_last, m.prio, m.step, m.rec_msg_id, m.n_values, m.budget_ppm) = (
            DESCRIBE_FIXED.unpack_from(body, off)
        )
        off += DESCRIBE_FIXED.size
        dp_len = -(-n // 4)
        _expect_len(body, off + dp_len + (n if flags & DESCRIBE_FLAG_COUNTS else 0), DESCRIBE)
        m.drop_prec = unpack_drop_prec(body[off : off + dp_len], n)
        if flags & DESCRIBE_FLAG_COUNTS:
            m.counts = np.frombuffer(body, dtype=np.uint8, count=n, offset=off + dp_len).copy()
        m.feedback = bool(flags & DESCRIBE_FLAG_FEEDBACK)
        if m.budget_ppm > PPM:
            raise MalformedPacket("control.budget_ppm", f"{m.budget_ppm} > {PPM}")
        if m.n_values < 1:
            raise MalformedPacket("control.n_values", f"{m.n_values} values")
    elif typ == BITMAP:
        _expect_len(body, off + BITMAP_FIXED.size + -(-n // 8), BITMAP)
        m.round, m.attempt, m.held_us, m.missing, m.protected_missing = BITMAP_FIXED.unpack_from(body, off)
        m.requested = unpack_bits(body[off + BITMAP_FIXED.size :], n)
        if m.missing > n or m.protected_missing > m.missing:
            raise MalformedPacket("control.missing", f"{m.missing} missing ({m.protected_missing} protected) of {n}")
    elif typ == STOP:
        _expect_len(body, off + STOP_FIXED.size, STOP)
        m.round, flags, m.attempt, _, m.held_us, m.lost_pkts, m.protected_lost = STOP_FIXED.unpack_from(body, off)
        m.forced = bool(flags & 1)
        if m.lost_pkts > n or m.protected_lost > m.lost_pkts:
            raise MalformedPacket("control.lost_pkts", f"{m.lost_pkts} lost ({m.protected_lost} protected) of {n}")
    elif typ == FEEDBACK:
        _expect_len(body, off + FEEDBACK_FIXED.size, FEEDBACK)
        m.rcvd_pkts, m.ce_pkts, m.last_seq = FEEDBACK_FIXED.unpack_from(body, off)
        if m.last_seq >= n:
            raise MalformedPacket("control.last_seq", f"seq {m.last_seq} of {n} packets")
    else:
        _expect_len(body, off + FORCE_FIXED.size, FORCE_STOP)
        m.round, flags = FORCE_FIXED.unpack_from(body, off)
        m.final = bool(flags & 1)
    return m


class FrameReader:
    """Splits a TCP byte stream into frame bodies. A length outside COMMON.size..MAX_FRAME sets
    `error` (MalformedPacket "control.length"): the stream cannot be resynchronised after that, but
    the frames before it are still returned."""

    def __init__(self):
        self._buf = bytearray()
        self.error: MalformedPacket | None = None

    def feed(self, data) -> list[bytes]:
        if self.error is not None:
            return []
        self._buf += data
        out = []
        while len(self._buf) >= LEN.size:
            (n,) = LEN.unpack_from(self._buf, 0)
            if not COMMON.size <= n <= MAX_FRAME:
                self.error = MalformedPacket("control.length", f"frame length {n} outside {COMMON.size}..{MAX_FRAME}")
                break
            if len(self._buf) < LEN.size + n:
                break
            out.append(bytes(self._buf[LEN.size : LEN.size + n]))
            del self._buf[: LEN.size + n]
        return out
