"""The receiver's half of the bounded-loss protocol (DESIGN §6, docs/transport.md), without I/O.

`ReceiverCore` places data packets by offset, keeps each message's bitmap, answers in-band PROBEs
with STOP or BITMAP, accepts FORCE_STOP, and reports to each sender with congestion control how
many of its packets arrived and how many carried CE (FEEDBACK). It is driven by calls that carry the
current time (`now`, seconds of any monotonic clock):

- `on_datagram(data, ecn, now, queued_s)`: one UDP datagram from the data path (DLCP data or
  PROBE), the ECN bits of its IPv4 header (0 when the driver cannot read them) and how long it
  waited in this host before the receiver took it (0 when unknown). A packet that waited longer than
  `host_mark_ms` is reported as congestion experienced, as if a switch had marked it: a receiver
  that falls behind is a queue too, one no switch can mark;
- `on_describe(msg, channel, now)`, `on_force_stop(msg, channel, now)`: control frames, with the
  connection they came on (answers go back on it);
- `on_timer(now)` once `next_timer()` has come: PROBEs whose quiet time is over, delayed FEEDBACK
  (a FEEDBACK goes every `feedback_every` packets of a sender, or once its sender's packets stop
  coming: see `_feedback_delay`).

Frames to send (`FrameSend`) and finished messages (`RecvDone`) collect in the outbox,
`take_outputs()`; record rows in `rows` / `packet_chunks`.

Receiver decision on PROBE (`_answer`): with `missing` packets of `n`, `allowed` = floor(budget * n)
further capped by the per-iteration budget (per source and iteration: floor(iter_budget * packets so
far) minus packets already accepted as lost), STOP when no protected packet is missing and `missing
<= allowed`; else BITMAP asking for every missing protected packet plus the fewest unprotected ones
that bring the loss within `allowed` (lowest drop precedence first). A PROBE is answered at once
when every packet of its round is in; otherwise after a short quiet time (no data of the message
since the PROBE) because per-packet spraying can still deliver data of a slower path after it. The
quiet time starts at `probe_quiet_ms` and adapts per source: it doubles whenever a packet asked for
in a BITMAP turns up as an original (the BITMAP was premature) and eases back after clean messages.
A PROBE of a round already answered gets the same answer again (the answer may have been lost).
FORCE_STOP (the sender's deadline or round limit) lifts the budget, not the protection: the answer
is STOP (forced) when no protected packet is missing, else a BITMAP asking for the protected ones
only (attempt NO_ATTEMPT), and the rounds go on until they are in; a FINAL FORCE_STOP ends the
message whatever is missing.

Malformed or unexpected packets and control messages are counted by cause (`drops`), logged once
per cause, and ignored.
"""

from __future__ import annotations

import collections
import logging
import math

import numpy as np

from dlcp.transport.api import RecvResult, TransportConfig, key_text
from dlcp.transport.core.close import make_close_rule
from dlcp.transport.core.drops import DropCounts
from dlcp.transport.core.outputs import FrameSend, RecvDone
from dlcp.transport.core.waits import WaitHistogram
from dlcp.transport.record_rows import message_row, packet_chunk
from dlcp.wire import control_frames as C
from dlcp.wire.header import (
    ECN_CE,
    FLAG_TELEMETRY,
    HEADER,
    HEADER_LEN,
    PHASE_MASK,
    PHASE_NAMES,
    PHASE_SHIFT,
    SLOTS,
    TELEMETRY_LEN,
    TYPE_MASK,
    TYPE_PROBE,
    TYPE_RETX,
    VALUE_BYTES,
    VER_SHIFT,
    VERSION,
    MalformedPacket,
    unpack_probe,
)

log = logging.getLogger("dlcp.transport.receiver")
_VER_BITS, _VER_HI = SLOTS["ver"].mask << VER_SHIFT, VERSION << VER_SHIFT

STALE_WINDOW = 2  # messages of iterations older than current - STALE_WINDOW are stale
QUIET_MAX_S = 0.2  # the longest a receiver waits for in-flight data before answering a PROBE
FEEDBACK_DELAY_S = 0.0005  # the longest a FEEDBACK waits for more packets to report
FEEDBACK_MARGIN_PKTS = 2  # a FEEDBACK waits for the packets its sender's last batch had, and this many gaps more


class _Rx:
    __slots__ = (
        "answer",
        "answered",
        "buf",
        "bytes",
        "channel",
        "desc",
        "dups",
        "first_byte_us",
        "first_t",
        "forced",
        "key",
        "last_len",
        "last_t",
        "late",
        "n_orig",
        "n_pkts",
        "n_received",
        "orig_last_t",
        "premature",
        "probe_attempt",
        "probe_round",
        "probe_t",
        "received",
        "recv_us",
        "req_left",
        "requested",
        "retx",
        "rounds",
        "start_us",
    )

    def __init__(self, key, n_pkts, values_per_pkt, per_packet, start_us):
        self.key = key
        self.n_pkts = n_pkts
        self.buf = np.zeros(n_pkts * values_per_pkt, dtype=np.float32)
        self.bytes = self.buf.data.cast("B")
        self.received = bytearray(n_pkts)
        self.n_received = 0
        self.retx = 0
        self.dups = 0
        self.start_us = start_us
        self.first_byte_us = None
        self.first_t = 0.0  # first data packet
        self.last_t = 0.0  # latest data packet
        self.orig_last_t = 0.0  # latest original (not RETX) packet: the gap estimate ignores rounds
        self.n_orig = 0
        self.last_len = -1  # payload values of the last packet, once seen
        self.desc = None  # the DESCRIBE (maps, budget, labels), once it arrived
        self.channel = None  # the control connection it came on: answers go there
        self.probe_round = 0  # round of the PROBE waiting for an answer (0: none)
        self.probe_attempt = 0
        self.probe_t = 0.0  # when it arrived
        self.answered = 0  # the last round answered with a BITMAP
        self.answer = None  # that BITMAP (encoded), sent again to a re-probe of its round
        self.requested = None  # bytearray: packets asked for in the last BITMAP
        self.req_left = 0  # of those, how many have not arrived yet
        self.premature = False  # a requested packet already turned up as an original
        self.late = 0  # BITMAPs found premature
        self.rounds = 0
        self.forced = False  # FORCE_STOP came: the budget no longer bounds the loss, only protected packets count
        self.recv_us = np.full(n_pkts, -1, dtype=np.int64) if per_packet else None


class _Source:
    """What this receiver reports to one sender (FEEDBACK): cumulative counts of its data packets,
    and how its packets arrive (`first_t`, `last_t`, `span`, `batch`, `gap`: when a FEEDBACK is due)."""

    __slots__ = (
        "batch",
        "ce",
        "channel",
        "due",
        "first_t",
        "gap",
        "key",
        "last_t",
        "n_pkts",
        "rcvd",
        "reported",
        "seq",
        "span",
        "want",
    )

    def __init__(self):
        self.rcvd = 0
        self.ce = 0
        self.reported = 0  # `rcvd` in the last FEEDBACK
        self.want = False  # a DESCRIBE from this sender asked for FEEDBACK
        self.channel = None  # the connection of its latest DESCRIBE
        self.key = None  # newest packet counted: message key, n_pkts, seq
        self.n_pkts = 0
        self.seq = 0
        self.due = math.inf  # when a FEEDBACK holding packets back must go
        self.first_t = 0.0  # arrival of the oldest packet not reported yet
        self.last_t = 0.0  # arrival of the newest packet
        self.span = 0  # datagram bytes that arrived after the oldest unreported packet, up to the newest
        self.batch = 0  # packets the last FEEDBACK reported (0: none yet)
        self.gap = 0.0  # seconds per full datagram in that batch (0: not measured yet)


class ReceiverCore:
    """The receiving half of one endpoint (see the module docstring). `peers`: the wire ranks data
    is accepted from (`add_peer` adds more)."""

    def __init__(self, cfg: TransportConfig, peers, wall_offset_s: float = 0.0):
        self.cfg = cfg
        self.vpp = cfg.values_per_pkt
        self._full_len = HEADER_LEN + self.vpp * VALUE_BYTES  # a full data datagram's bytes
        self.peers = set(peers)
        self.wall_offset_s = wall_offset_s
        self._rx: dict = {}
        self._finished: dict = {}  # key -> STOP frame: answers a FORCE_STOP or re-probe that crossed it
        self._iter_loss: dict = {}  # (src, iter) -> [packets accepted, packets lost]
        self._current_iter: int | None = None
        self._pending: set = set()  # keys with a PROBE waiting for its quiet time or DESCRIBE
        self._sources: dict[int, _Source] = {}
        self._fb_due: set = set()  # sources with a delayed FEEDBACK
        self._quiet_floor = cfg.probe_quiet_ms / 1e3
        self._host_mark_s = cfg.host_mark_ms / 1e3 if cfg.host_mark_ms > 0 else float("inf")
        self._quiet_s: dict[int, float] = {}  # per source: adapted quiet time
        self._out: list = []
        self.rows: list[dict] = []
        self.packet_chunks: list[dict] = []
        self.totals: collections.Counter[str] = collections.Counter()
        self.drops = DropCounts()
        self.socket_wait = WaitHistogram()  # data datagrams' wait in the socket buffer (wall clock)
        # receiver-initiated closes (dlcp.close, core/close.py): None = the PROBE's answer ends a message
        self._close = make_close_rule(cfg, self._quiet_of, wall_offset_s)
        self.budget_cap: float | None = None  # set_budget_cap: a cap on every sender's budget (DBLP's phases)

    def add_peer(self, rank: int) -> None:
        self.peers.add(rank)

    # --- data path: the hot loop ---------------------------------------------------------------------

    def on_datagram(self, mv, ecn: int, now: float, queued_s: float = 0.0) -> None:
        """One UDP datagram of the data path (`mv`: a buffer; read before this returns, never kept)."""
        n = len(mv)
        if n < HEADER_LEN:
            self.count_drop("length", f"{n} bytes, the DLCP header needs {HEADER_LEN}")
            return
        vt, pdp, j, src, it, msg, _layer, _mag, flags, seq, npk, off = HEADER.unpack_from(mv, 0)
        if vt & _VER_BITS != _VER_HI:
            self.count_drop("ver", f"version {vt >> VER_SHIFT}")
            return
        typ = vt & TYPE_MASK
        if typ > TYPE_PROBE:
            self.count_drop("type", f"unknown type {typ}")
            return
        phase = (pdp >> PHASE_SHIFT) & PHASE_MASK
        if phase not in PHASE_NAMES:
            self.count_drop("phase", f"unknown phase {phase}")
            return
        if j != self.cfg.job_id:
            self.count_drop("job_id", f"job {j}, expected {self.cfg.job_id}")
            return
        if src not in self.peers:
            self.count_drop("src_rank", f"unknown sender rank {src}")
            return
        if not 0 < npk <= C.MAX_MSG_PKTS or seq >= npk:
            self.count_drop("seq", f"seq {seq} of {npk} packets")
            return
        vpp = self.vpp
        if off != seq * vpp:
            self.count_drop("offset", f"{off} does not match seq {seq}")
            return
        hl = HEADER_LEN + TELEMETRY_LEN if flags & FLAG_TELEMETRY else HEADER_LEN
        key = (src, it, phase, msg)
        if typ == TYPE_PROBE:
            self._on_probe(key, npk, seq, mv, hl, now)
            return
        plen = n - hl
        full = vpp * VALUE_BYTES
        if plen != full and not (seq == npk - 1 and 0 < plen < full and plen % VALUE_BYTES == 0):
            self.count_drop("payload", f"{plen} payload bytes in packet {seq} of {npk}")
            return
        if queued_s > 0:  # 0: the driver does not know (simulated hosts read at once)
            self.socket_wait.record(queued_s)
        if queued_s > self._host_mark_s and ecn != ECN_CE:
            ecn = ECN_CE
            self.totals["host_marked"] += 1
        self._count(src, key, npk, seq, ecn, now, now - queued_s, n)
        st = self._rx.get(key)
        if st is None:
            st = self._new_rx(key, npk, now)
            if st is None:
                return
        elif st.n_pkts != npk:
            self.count_drop("n_pkts", f"{npk}, message has {st.n_pkts}")
            return
        if st.received[seq]:
            st.dups += 1
            self.totals["dups"] += 1
            return
        st.bytes[off * VALUE_BYTES : off * VALUE_BYTES + plen] = mv[hl:n]
        st.received[seq] = 1
        st.n_received += 1
        self.totals["pkts_rcvd"] += 1
        self.totals["bytes_rcvd"] += plen
        if typ == TYPE_RETX:
            st.retx += 1
        else:
            st.n_orig += 1
            st.orig_last_t = now
        if st.requested is not None and st.requested[seq]:
            st.req_left -= 1
            if typ != TYPE_RETX and not st.premature:
                self._late_original(st)
        if st.first_byte_us is None:
            st.first_byte_us = self._wall_us(now)
            st.first_t = now
        st.last_t = now
        if st.recv_us is not None:
            st.recv_us[seq] = self._wall_us(now)
        if seq == npk - 1:
            st.last_len = plen // VALUE_BYTES
        if st.probe_round and st.desc is not None and self._round_complete(st):
            self._answer(st, now)

    def _count(self, src: int, key, npk: int, seq: int, ecn: int, now: float, arrived: float, n: int) -> None:
        """Count a data packet of `src` (a datagram of `n` bytes) that arrived at `arrived` for its
        FEEDBACK (every packet that left the network)."""
        s = self._sources.get(src)
        if s is None:
            s = self._sources[src] = _Source()
        s.rcvd += 1
        if ecn == ECN_CE:
            s.ce += 1
        s.key, s.n_pkts, s.seq = key, npk, seq
        if s.rcvd - s.reported == 1:
            s.first_t = arrived
        else:
            s.span += n
        s.last_t = arrived
        self._feedback_rule(src, s, now)

    def counted(self, src: int, now: float) -> None:
        """Packets of `src` were counted by a receive path that counts them itself (the C receive
        path, dlcp/transport/rx_mirror.py): decide what `_count` decides after a packet."""
        self._feedback_rule(src, self._sources[src], now)

    def _feedback_rule(self, src: int, s: _Source, now: float) -> None:
        """After a packet of `src` was counted: its FEEDBACK now, or the FEEDBACK delay starts."""
        if not s.want:
            return
        if s.rcvd - s.reported >= self.cfg.feedback_every:
            self._feedback(src, s)
        elif s.due == math.inf:
            s.due = now + self._feedback_delay(s)
            self._fb_due.add(src)

    def _feedback_delay(self, s: _Source) -> float:
        """How long a FEEDBACK waits for more of its sender's packets: its last batch's packets and
        FEEDBACK_MARGIN_PKTS more, each at the time a full datagram took in that batch, at most
        FEEDBACK_DELAY_S. A sender whose congestion window holds fewer than `feedback_every` packets
        sends its window and waits for this FEEDBACK: waiting FEEDBACK_DELAY_S (500 us: 400 full
        frames at 10 Gbit/s) would stall it that long every round trip; waiting for its batch costs
        a few packet times, and a sender that sends more than its last batch only gets a FEEDBACK a
        little early."""
        cap = FEEDBACK_DELAY_S * self.cfg.time_scale
        if not s.gap:
            return cap
        expect = min(self.cfg.feedback_every, s.batch) + FEEDBACK_MARGIN_PKTS
        return min(cap, expect * s.gap)

    def _feedback(self, src: int, s: _Source) -> None:
        batch = s.rcvd - s.reported
        if s.span:
            # per full datagram, from the bytes that arrived, not per packet: a message's short last
            # packet arrives a fraction of a frame time after the one before, and a gap taken from
            # it would cut every later batch at one packet (each FEEDBACK waiting less than a frame)
            s.gap = (s.last_t - s.first_t) * self._full_len / s.span
        if batch:
            s.batch = batch
        s.reported = s.rcvd
        s.span = 0
        s.due = math.inf
        self._fb_due.discard(src)
        self._out.append(
            FrameSend(
                src,
                s.channel,
                C.encode_feedback(self.cfg.job_id, src, self.cfg.rank, s.key, s.n_pkts, s.rcvd, s.ce, s.seq),
            )
        )
        self.totals["feedback_sent"] += 1

    def _new_rx(self, key, n_pkts, now: float) -> _Rx | None:
        """State for a message seen for the first time, or None (counted) when it is stale/late."""
        if key in self._finished:
            self.count_drop("late", "packet of a finished message")
            return None
        if self._stale(key[1]):
            self.count_drop("stale_iter", f"iteration {key[1]}, current {self._current_iter}")
            return None
        st = _Rx(key, n_pkts, self.vpp, self.cfg.per_packet, self._wall_us(now))
        self._rx[key] = st
        if self._close is not None:
            self._close.opened(st, now)
        return st

    # --- PROBE, DESCRIBE, FORCE_STOP -----------------------------------------------------------

    def _on_probe(self, key, n_pkts: int, seq: int, mv, hl: int, now: float) -> None:
        """An in-band PROBE: answer it now if its round is complete, else once the message is quiet."""
        try:
            probe = unpack_probe(mv, hl)
        except MalformedPacket as e:
            self.count_drop(e.field, e.detail)
            return
        if seq:
            self.count_drop("probe.seq", f"PROBE with seq {seq}")
            return
        fin = self._finished.get(key)
        if fin is not None:  # a re-probe that crossed our STOP: the STOP again (it may be lost)
            self.totals["dup_probes"] += 1
            self._send(key[0], fin[1], fin[0])
            return
        st = self._rx.get(key)
        if st is None:
            st = self._new_rx(key, n_pkts, now)
            if st is None:
                return
        elif st.n_pkts != n_pkts:
            self.count_drop("n_pkts", f"{n_pkts}, message has {st.n_pkts}")
            return
        if probe.round <= st.answered or probe.round == st.probe_round:
            self.totals["dup_probes"] += 1  # a re-probe of a round already answered or waiting
            if probe.round == st.answered and st.answer is not None:
                self._send(key[0], st.channel, st.answer)
            return
        st.rounds = max(st.rounds, probe.round)
        st.probe_round, st.probe_attempt = probe.round, probe.attempt
        st.probe_t = now
        self._try_answer(st, now)

    def on_describe(self, msg: C.Control, channel, now: float) -> None:
        key = self._control_key(msg)
        if key is None:
            return
        s = self._sources.get(key[0])
        if s is None:
            s = self._sources[key[0]] = _Source()
        s.channel = channel
        if msg.feedback and not s.want:
            s.want = True
            if s.rcvd > s.reported and s.key is not None:
                self._feedback(key[0], s)
        if key in self._finished:
            self.count_drop("control.late", f"DESCRIBE of a finished message {key_text(key)}")
            return
        st = self._rx.get(key)
        if st is None:
            st = self._new_rx(key, msg.n_pkts, now)
            if st is None:
                return
        if st.n_pkts != msg.n_pkts:
            self.count_drop("control.n_pkts", f"{msg.n_pkts}, message has {st.n_pkts}")
            return
        if -(-msg.n_values // self.vpp) != msg.n_pkts or (
            st.last_len >= 0 and (msg.n_pkts - 1) * self.vpp + st.last_len != msg.n_values
        ):
            self.count_drop("control.n_values", f"{msg.n_values} values do not fit {msg.n_pkts} packets")
            return
        st.desc, st.channel = msg, channel
        if st.probe_round:  # the PROBE came first (the DESCRIBE was delayed)
            self._try_answer(st, now)

    def on_force_stop(self, msg: C.Control, channel, now: float) -> None:
        key = self._control_key(msg)
        if key is None:
            return
        fin = self._finished.get(key)
        if fin is not None:  # FORCE_STOP crossed our STOP: same answer
            self._send(key[0], channel, fin[0])
            return
        st = self._rx.get(key)
        if st is None or st.desc is None or st.n_pkts != msg.n_pkts:
            self.count_drop("control.sequence", f"FORCE_STOP for no described message {key_text(key)}")
            return
        st.rounds = max(st.rounds, msg.round)
        st.channel = channel
        st.forced = True
        if msg.final:
            self._finish(st, True, now)
            return
        st.probe_round, st.probe_attempt, st.probe_t = msg.round, C.NO_ATTEMPT, now
        self._answer(st, now)  # STOP, or a BITMAP of the protected packets still missing

    def _control_key(self, msg: C.Control):
        """The message key of a control message addressed to this endpoint, or None (counted)."""
        if msg.dst_rank != self.cfg.rank:
            self.count_drop("control.dst_rank", f"addressed to rank {msg.dst_rank}, this is {self.cfg.rank}")
            return None
        if msg.src_rank not in self.peers:
            self.count_drop("control.src_rank", f"unknown sender rank {msg.src_rank}")
            return None
        return msg.key

    # --- answering -------------------------------------------------------------------------------

    def _round_complete(self, st: _Rx) -> bool:
        """Every packet of the PROBE's round is in: nothing the answer could wait for."""
        return st.n_received == st.n_pkts or (st.requested is not None and st.req_left <= 0)

    def _try_answer(self, st: _Rx, now: float) -> None:
        if st.desc is not None and (self._round_complete(st) or now >= self._quiet_until(st)):
            self._answer(st, now)
        else:
            self._pending.add(st.key)

    def _quiet_until(self, st: _Rx) -> float:
        """When a PROBE whose round is incomplete may be answered: once neither data of this message
        nor the PROBE itself arrived for the source's quiet time (or three mean gaps between the
        message's original packets, if they arrive slower than that). On one path the PROBE comes
        after its round's data, so the wait only covers data of slower paths (per-packet spraying)."""
        n = st.n_orig
        gap = (st.orig_last_t - st.first_t) / (n - 1) if n > 1 else 0.0
        quiet = min(QUIET_MAX_S * self.cfg.time_scale, max(self._quiet_s.get(st.key[0], self._quiet_floor), 3 * gap))
        return max(st.last_t, st.probe_t) + quiet

    def _late_original(self, st: _Rx) -> None:
        """A packet asked for in a BITMAP arrived as an original, not as RETX: it was in flight
        (on a slower path), so this source's quiet time was too short. Double it, once per BITMAP,
        like an RTO backing off."""
        st.premature = True
        st.late += 1
        src = st.key[0]
        q = self._quiet_s.get(src, self._quiet_floor)
        self._quiet_s[src] = min(QUIET_MAX_S * self.cfg.time_scale, 2 * q)
        self.totals["premature_bitmaps"] += 1

    def _allowed_loss(self, st: _Rx, budget_ppm: int) -> int:
        n = st.n_pkts
        if self.budget_cap is not None:  # the receiver's cap (a budget schedule) lowers any sender's budget
            budget_ppm = min(budget_ppm, round(self.budget_cap * C.PPM))
        allowed = (budget_ppm * n) // C.PPM
        acc = self._iter_loss.get((st.key[0], st.key[1]), (0, 0))
        cap = int(np.floor(self.cfg.iter_budget * (acc[0] + n) + 1e-9)) - acc[1]
        return max(0, min(allowed, cap))

    def _answer(self, st: _Rx, now: float) -> None:
        """Answer the pending PROBE of `st` (its DESCRIBE is in): STOP or BITMAP."""
        self._pending.discard(st.key)
        desc = st.desc
        assert desc is not None  # answered only once the DESCRIBE is in
        recvd = np.frombuffer(st.received, dtype=np.uint8).astype(bool)
        missing = ~recvd
        n_missing = int(missing.sum())
        prot = missing & (desc.drop_prec == 0)
        n_prot = int(prot.sum())
        allowed = n_missing if st.forced else self._allowed_loss(st, desc.budget_ppm)
        if n_prot == 0 and n_missing <= allowed:
            self._finish(st, st.forced, now)
            return
        # ask for every missing protected packet and the fewest unprotected ones (lowest drop
        # precedence first) that bring the loss within `allowed`
        request = prot.copy()
        unprot = np.flatnonzero(missing & ~prot)
        excess = len(unprot) - allowed
        if excess > 0:
            pick = unprot[np.argsort(desc.drop_prec[unprot], kind="stable")[:excess]]
            request[pick] = True
        rnd = st.probe_round
        st.answered, st.probe_round = rnd, 0
        st.requested = bytearray(request.astype(np.uint8).tobytes())
        st.req_left = int(request.sum())
        st.premature = False
        key = st.key
        st.answer = C.encode(
            C.Control(
                C.BITMAP,
                self.cfg.job_id,
                key[0],
                self.cfg.rank,
                key[2],
                key[1],
                key[3],
                st.n_pkts,
                round=rnd,
                attempt=st.probe_attempt,
                held_us=self._held_us(st, now),
                missing=n_missing,
                protected_missing=n_prot,
                requested=request,
            )
        )
        self._send(key[0], st.channel, st.answer)

    def _finish(self, st: _Rx, forced: bool, now: float, closed: bool = False) -> None:
        """End `st`: STOP to its sender. `closed`: the receiver's close rule ended it, not a PROBE's
        answer (its STOP echoes no attempt, so the sender takes no round-trip sample from it)."""
        desc = st.desc
        assert desc is not None  # finished only once the DESCRIBE is in
        recvd = np.frombuffer(st.received, dtype=np.uint8).astype(bool)
        lost = int(st.n_pkts - st.n_received)
        prot_lost = int((~recvd & (desc.drop_prec == 0)).sum())
        key = st.key
        stop = C.encode(
            C.Control(
                C.STOP,
                self.cfg.job_id,
                key[0],
                self.cfg.rank,
                key[2],
                key[1],
                key[3],
                st.n_pkts,
                round=st.rounds,
                lost_pkts=lost,
                protected_lost=prot_lost,
                forced=forced,
                attempt=C.NO_ATTEMPT if forced or closed else st.probe_attempt,
                held_us=0 if forced or closed else self._held_us(st, now),
            )
        )
        self._send(key[0], st.channel, stop)
        done_us = self._wall_us(now)
        acc = self._iter_loss.setdefault((key[0], key[1]), [0, 0])
        acc[0] += st.n_pkts
        acc[1] += lost
        if forced:
            self.totals["forced_rcvd"] += 1
        if closed:
            self.totals["closed"] += 1
        if self._close is not None:
            self._close.finished(st, st.retx + lost, closed, now)
        self.totals["msgs_rcvd"] += 1
        if not st.late and key[0] in self._quiet_s:  # no premature answer: ease back to the floor
            self._quiet_s[key[0]] = max(self._quiet_floor, 0.9 * self._quiet_s[key[0]])
        self._rx.pop(key, None)
        self._pending.discard(key)
        self._finished[key] = (stop, st.channel)
        self.rows.append(
            message_row(
                self.cfg.host,
                self.cfg.rank,
                "receiver",
                key[0],
                key,
                rec_msg_id=desc.rec_msg_id,
                step=desc.step,
                layer_first=desc.layer_first,
                layer_last=desc.layer_last,
                prio=desc.prio,
                nbytes=desc.n_values * VALUE_BYTES,
                pkts=st.n_pkts,
                lost_pkts=lost,
                retx_pkts=st.retx,
                rounds=st.rounds,
                forced=forced,
                protected_lost=prot_lost,
                start_us=st.start_us,
                first_byte_us=st.first_byte_us,
                complete_us=done_us,
            )
        )
        if st.recv_us is not None:
            self.packet_chunks.append(
                packet_chunk(
                    "receiver",
                    key[0],
                    self.cfg.rank,
                    key,
                    desc.rec_msg_id,
                    np.full(st.n_pkts, desc.prio, np.uint8),
                    desc.drop_prec,
                    np.full(st.n_pkts, -1),
                    st.recv_us,
                    np.zeros(st.n_pkts, np.int8),
                )
            )
        self._out.append(
            RecvDone(
                key,
                RecvResult(
                    key[0],
                    key[1],
                    key[2],
                    key[3],
                    st.buf[: desc.n_values],
                    recvd,
                    desc.counts,
                    self.vpp,
                    lost,
                    prot_lost,
                    forced,
                    st.rounds,
                ),
            )
        )

    # --- timers, iterations, outputs -------------------------------------------------------------

    def next_timer(self) -> float:
        """When `on_timer` next has something to do (a quiet time over, a FEEDBACK due), or inf."""
        t = math.inf
        for key in self._pending:
            st = self._rx.get(key)
            if st is not None and st.desc is not None and st.probe_round:
                t = min(t, self._quiet_until(st))
        for src in self._fb_due:
            t = min(t, self._sources[src].due)
        if self._close is not None:
            for st in self._rx.values():
                if st.desc is not None:
                    t = min(t, self._close.next_time(st))
        return t

    def on_timer(self, now: float) -> None:
        for key in list(self._pending):
            st = self._rx.get(key)
            if st is None or not st.probe_round:
                self._pending.discard(key)
            elif st.desc is not None and (self._round_complete(st) or now >= self._quiet_until(st)):
                self._answer(st, now)
        for src in list(self._fb_due):
            s = self._sources[src]
            if now >= s.due:
                self._feedback(src, s)
        if self._close is not None:
            for st in [st for st in self._rx.values() if st.desc is not None and self._close.due(st, now)]:
                self._finish(st, False, now, closed=True)

    def advance(self, iteration: int) -> None:
        """The caller moved on to `iteration`: messages more than STALE_WINDOW iterations older
        become stale (their packets are counted and dropped) and are forgotten."""
        self._current_iter = iteration & 0xFFFF
        for table in (self._finished, self._iter_loss):
            for k in [k for k in table if self._stale(k[1])]:
                table.pop(k, None)
        for k in [k for k in self._rx if self._stale(k[1])]:
            self.drops["abandoned"] += 1
            self._rx.pop(k, None)
            self._pending.discard(k)

    def is_stale(self, iteration: int) -> bool:
        return self._stale(iteration & 0xFFFF)

    def progress(self, key) -> str:
        """What has arrived of message `key` (for a timeout's error text)."""
        st = self._rx.get(key)
        return f"{st.n_received}/{st.n_pkts} packets" if st else "nothing"

    def take_outputs(self) -> list:
        out, self._out = self._out, []
        return out

    def outputs_pending(self) -> int:
        """How many outputs `take_outputs` would return now."""
        return len(self._out)

    def set_budget_cap(self, budget: float | None) -> None:
        """Cap every sender's message budget at `budget` from now on (None: no cap)."""
        self.budget_cap = budget

    def stats(self) -> dict:
        extra = {} if self._close is None else {"closed_by_receiver": self.totals["closed"], **self._close.stats()}
        return {
            **extra,
            "packets_received": self.totals["pkts_rcvd"],
            "bytes_received": self.totals["bytes_rcvd"],
            "duplicates": self.totals["dups"],
            "messages_received": self.totals["msgs_rcvd"],
            "forced_received": self.totals["forced_rcvd"],
            "premature_bitmaps": self.totals["premature_bitmaps"],
            "quiet_ms": {str(k): round(v * 1e3, 3) for k, v in self._quiet_s.items()},
            "duplicate_probes": self.totals["dup_probes"],
            "feedback_sent": self.totals["feedback_sent"],
            "ce_received": sum(s.ce for s in self._sources.values()),
            "host_marked": self.totals["host_marked"],
            "control_sent": self.totals["ctrl_sent"],
            "socket_wait": self.socket_wait.as_dict(),
        }

    # --- helpers -------------------------------------------------------------------------------

    def _send(self, peer: int, channel, frame: bytes) -> None:
        self._out.append(FrameSend(peer, channel, frame))
        self.totals["ctrl_sent"] += 1

    def _quiet_of(self, src: int) -> float:
        """The quiet time of source `src` (seconds): how long its data may pause before it counts as stalled."""
        return self._quiet_s.get(src, self._quiet_floor)

    def _held_us(self, st: _Rx, now: float) -> int:
        """How long the receiver has held the PROBE it is answering (echoed to the sender)."""
        return max(0, int((now - st.probe_t) * 1e6))

    def _wall_us(self, now: float) -> int:
        return int((now + self.wall_offset_s) * 1e6)

    def _stale(self, it16: int) -> bool:
        cur = self._current_iter
        return cur is not None and STALE_WINDOW < ((cur - it16) & 0xFFFF) < 0x8000

    def count_drop(self, cause: str, detail: str = "") -> None:
        """Count (and log once per cause) something malformed or unexpected that was ignored."""
        self.drops.note(self.cfg.rank, cause, detail)
