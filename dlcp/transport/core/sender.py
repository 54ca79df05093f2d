"""The sender's half of the bounded-loss protocol (DESIGN §6, docs/transport.md), without I/O.

`SenderCore` keeps every message this endpoint is sending: its rounds (the packets sent before each
in-band PROBE), the PROBE attempts and their timeout, the deadline, FORCE_STOP, and one congestion
window per destination. It is driven by calls that carry the current time (`now`, seconds of any
monotonic clock: the UDP driver passes time.monotonic(), the virtual network its own clock):

- `send(dst, batch, info, now)`: a new message; its first round is queued behind the destination's
  other rounds (retransmission rounds go to the front);
- `poll_transmit(now)`: the next thing to put on the UDP path (`DataSend`: a slice of a round, as the
  window and pacing allow; `ProbeSend`: a round's PROBE, handed out only after the last slice of its
  round, so a driver that sends what it polls in order puts the PROBE behind the round's data), or
  None;
- `on_frame(msg, now)`: BITMAP, STOP or FEEDBACK from a receiver;
- `on_timer(now)` once `next_timer()` has come: PROBE timeouts (re-probes), deadlines (FORCE_STOP),
  losses the windows declare;
- `peer_unreachable(dst, why, now)`, `fail_all(why, now)`: the driver could not reach a receiver.

FORCE_STOP gives up the budget, not the protected packets: the receiver answers it with STOP or
with a BITMAP of the protected packets still missing, and the rounds go on until STOP. A deadline
passing in them sends FORCE_STOP again, and each answer to a FORCE_STOP renews the deadline. After
`MAX_FORCED_ROUNDS` rounds a FINAL FORCE_STOP gives up what is still missing; a FORCE_STOP with no
answer by the deadline ends the message on this side alone.

Control frames (DESCRIBE, FORCE_STOP) and finished messages (`SendDone`) collect in the outbox,
`take_outputs()`; record rows in `rows` / `packet_chunks`.

Send order within a round: priority 7 first, protected before droppable within a priority, then
by seq; retransmission rounds: protected first, then by priority. Destinations with queued rounds
take turns, one slice each.
"""

from __future__ import annotations

import collections
import logging
import math

import numpy as np

from dlcp.transport.api import SendInfo, SendResult, TransportConfig, TransportError, key_text
from dlcp.transport.core.congestion import HORIZON_FLOOR_S, DctcpWindow, Unlimited
from dlcp.transport.core.drops import DropCounts
from dlcp.transport.core.incast import make_incast
from dlcp.transport.core.outputs import DataSend, FrameSend, ProbeSend, Round, SendDone
from dlcp.transport.core.receiver import FEEDBACK_DELAY_S
from dlcp.transport.record_rows import message_row, packet_chunk
from dlcp.wire import control_frames as C
from dlcp.wire.header import (
    HEADER_LEN,
    PROBE_LEN,
    TELEMETRY_LEN,
    VALUE_BYTES,
    Probe,
    field_values,
    header_fields,
    pack_probe,
    probe_header,
    tos_of,
    unpack_from,
)

log = logging.getLogger("dlcp.transport.sender")

MAX_FORCED_ROUNDS = 32  # retransmission rounds of protected packets after FORCE_STOP before giving up
MAX_ATTEMPTS = 250  # re-probes of one round (the attempt travels in one byte; the deadline ends it first)
PACE_SLACK_S = 0.005  # pacing catches up on delays shorter than this (sleep overshoot, scheduling)
PACE_QUANTUM_S = 0.002  # pacing hands out this much time's worth of frames per slice (<= send_batch)
FRAME_OVERHEAD = 14 + 20 + 8 + HEADER_LEN  # Ethernet + IPv4 + UDP + DLCP header: pacing counts frames
CC_SLICE = 256  # most packets per slice under congestion control (the window usually limits first)


class _Msg:
    __slots__ = (
        "attempt",
        "batch",
        "budget_ppm",
        "deadline",
        "described",
        "dp",
        "dst",
        "final",
        "forced",
        "forced_round",
        "info",
        "key",
        "missing",
        "n_pkts",
        "n_values",
        "pkt_retx",
        "pkt_send_us",
        "prio",
        "probe_due",
        "probe_head",
        "probe_times",
        "probes",
        "prot_missing",
        "retx_pkts",
        "round_pkts",
        "round_prio",
        "rounds",
        "sent_at",
        "start_us",
        "state",
    )

    def __init__(self, key, dst, batch, info: SendInfo, budget: float):
        self.key, self.dst, self.batch, self.info = key, dst, batch, info
        f = header_fields(batch.headers)
        self.n_pkts = len(batch)
        self.n_values = int(batch.values.size)
        self.prio = field_values(f, "prio").astype(np.uint8)
        self.dp = field_values(f, "drop_prec").astype(np.uint8)
        self.budget_ppm = round(budget * C.PPM)
        self.rounds = 0  # PROBE rounds so far: 1 + retransmission rounds
        self.retx_pkts = 0
        self.start_us: int | None = None  # wall-clock microseconds of the DESCRIBE (the message's first packet)
        self.deadline: float | None = None  # set at the first PROBE
        # queued -> sending -> probing -> (retx -> probing)* -> [forcing -> (retx -> probing)*] -> done
        self.state = "queued"
        self.missing = self.n_pkts  # as last reported by the receiver
        self.prot_missing = int((self.dp == 0).sum())
        self.pkt_send_us: np.ndarray | None = None  # per-packet records only
        self.pkt_retx: np.ndarray | None = None
        first = unpack_from(batch.headers[0].tobytes())
        first.layer_id = info.layer_first & 0xFFFF
        self.probe_head = probe_header(first, 0)  # prio set per round
        self.round_prio = 0  # lowest priority among the packets of the current round
        self.round_pkts = 0
        self.attempt = 0  # re-probes of the current round so far
        self.probe_times: list[float] = []  # send time of each attempt of the current round
        self.probe_due = math.inf  # when the current round is probed again
        self.probes = 0  # PROBE packets sent, re-probes included
        self.described = False
        self.forced = False  # FORCE_STOP sent: only protected packets are still recovered
        self.forced_round = 0  # the round at the first FORCE_STOP
        self.final = False  # the FINAL FORCE_STOP sent: whatever is missing stays missing
        self.sent_at: np.ndarray | None = None  # per packet: when it last left (round-trip samples from FEEDBACK)


class SenderCore:
    """The sending half of one endpoint (see the module docstring)."""

    def __init__(self, cfg: TransportConfig, wall_offset_s: float = 0.0):
        self.cfg = cfg
        self.wall_offset_s = wall_offset_s  # wall-clock seconds = now + this (record times)
        self._msgs: dict = {}
        self._queues: dict[int, collections.deque] = {}  # dst -> rounds waiting for the window
        self._ready: collections.deque = collections.deque()  # dsts with queued rounds, in turn
        self._probe_q: collections.deque = collections.deque()  # messages whose PROBE goes next
        self._windows: dict = {}
        self._rtt: dict[int, list[float]] = {}  # per destination: [srtt, rttvar] of PROBE -> answer (s)
        self._pace_next = 0.0
        self._pace_wait = False  # poll_transmit held data back for pacing: wake at _pace_next
        self._rng = np.random.default_rng(cfg.inject_seed)
        self._out: list = []
        self.rows: list[dict] = []
        self.packet_chunks: list[dict] = []
        self.totals: collections.Counter[str] = collections.Counter()
        self.drops = DropCounts()
        self.budget_override: float | None = None  # set_budget: a schedule's budget in place of loss_budget
        # dlcp.incast: which destinations may transmit now (None: all of them; core/incast.py)
        self._incast = make_incast(cfg)

    def set_budget(self, budget: float | None) -> None:
        """Messages sent from now on take `budget` in place of loss_budget (None: loss_budget again)."""
        self.budget_override = budget

    # --- inputs --------------------------------------------------------------------------------

    def send(self, dst: int, batch, info: SendInfo, now: float) -> tuple:
        """Queue a new message for `dst`; returns its key (dst, iter, phase, msg_id)."""
        f = header_fields(batch.headers[:1])
        key = (dst, int(f["iter"][0]), int(field_values(f, "phase")[0]), int(f["msg_id"][0]))
        if batch.values_per_pkt != self.cfg.values_per_pkt:
            raise ValueError(f"batch has {batch.values_per_pkt} values per packet, transport {self.cfg.values_per_pkt}")
        if key in self._msgs:
            raise TransportError(f"message {key_text(key)} is already in flight")
        budget = (
            self.cfg.budget_for(info.layer_first, info.layer_last, self.budget_override) * info.budget_share
            if info.budget is None
            else (0.0 if self.cfg.reliable else info.budget)
        )
        st = _Msg(key, dst, batch, info, budget)
        if info.counts is not None and len(info.counts) != st.n_pkts:
            raise ValueError(f"{len(info.counts)} counts for {st.n_pkts} packets")
        if self.cfg.cc != "none":
            st.sent_at = np.full(st.n_pkts, -1.0)
        self._msgs[key] = st
        order = np.lexsort((np.arange(st.n_pkts), st.dp, -st.prio.astype(np.int16)))
        self._enqueue(self._round(st, order, retx=False), front=False)
        return key

    def on_frame(self, msg: C.Control, now: float) -> None:
        """A BITMAP, STOP or FEEDBACK addressed to this sender."""
        if msg.src_rank != self.cfg.rank:
            self.count_drop("control.src_rank", f"reply about rank {msg.src_rank}'s message, this is {self.cfg.rank}")
            return
        if msg.type == C.FEEDBACK:
            self._on_feedback(msg, now)
            return
        key = (msg.dst_rank, msg.iter, msg.phase, msg.msg_id)
        st = self._msgs.get(key)
        if st is None and msg.type in (C.STOP, C.BITMAP):
            self.totals["dup_answers"] += 1  # an answer to a re-probe, or a STOP that crossed FORCE_STOP
            return
        if st is None or st.n_pkts != msg.n_pkts:
            self.count_drop("control.unexpected", f"{C.TYPE_NAMES[msg.type]} for no message in flight {key_text(key)}")
            return
        times = st.probe_times
        if st.state == "probing" and msg.round == st.rounds and msg.attempt < len(times):
            rtt = now - times[msg.attempt] - msg.held_us / 1e6
            self._rtt_sample(st.dst, max(rtt, 0.0))
        if msg.type == C.STOP:
            self._finish(st, msg.lost_pkts, msg.protected_lost, msg.forced, None, now)
            return
        if msg.type != C.BITMAP:
            self.count_drop("control.unexpected", f"{C.TYPE_NAMES[msg.type]} sent to a sender")
            return
        forced_answer = (
            st.state == "forcing" and not st.final and msg.round == st.rounds and msg.attempt == C.NO_ATTEMPT
        )
        if not forced_answer and (msg.round < st.rounds or (msg.round == st.rounds and st.state != "probing")):
            self.totals["dup_answers"] += 1  # the same answer again (to a re-probe): already acted on
            return
        if msg.round != st.rounds:
            self.count_drop("control.unexpected", f"BITMAP of round {msg.round} while in round {st.rounds}")
            return
        st.missing, st.prot_missing = msg.missing, msg.protected_missing
        assert msg.requested is not None  # every BITMAP carries its map (decode and the receiver set it)
        requested = np.flatnonzero(msg.requested)
        if st.forced and (st.rounds >= st.forced_round + MAX_FORCED_ROUNDS or not len(requested)):
            log.warning(
                "rank %s: message %s still misses %d protected packets %d rounds after FORCE_STOP: FINAL",
                self.cfg.rank,
                key_text(key),
                msg.protected_missing,
                st.rounds - st.forced_round,
            )
            self._force(st, now, final=True)
            return
        if not st.forced and (st.rounds > self.cfg.r_max or not len(requested)):
            log.warning(
                "rank %s: message %s still misses %d packets (%d protected) after %d rounds: FORCE_STOP",
                self.cfg.rank,
                key_text(key),
                msg.missing,
                msg.protected_missing,
                st.rounds,
            )
            self._force(st, now)
            return
        if forced_answer:
            st.deadline = now + self.cfg.deadline_ms / 1e3  # the receiver answers: it gets another deadline
        st.state = "retx"
        # protected first, then by priority (highest first), then by seq
        order = requested[np.lexsort((requested, -st.prio[requested].astype(np.int16), st.dp[requested] != 0))]
        self._enqueue(self._round(st, order, retx=True), front=True)

    def on_timer(self, now: float) -> None:
        """PROBE timeouts (the same round probed again), deadlines (FORCE_STOP; no answer to it:
        give up), and the windows' loss horizons."""
        for st in list(self._msgs.values()):
            if st.deadline is None or st.state not in ("probing", "forcing"):
                continue
            if now >= st.deadline:
                if st.state == "probing":
                    log.warning(
                        "rank %s: message %s past its deadline after %d rounds: FORCE_STOP",
                        self.cfg.rank,
                        key_text(st.key),
                        st.rounds,
                    )
                    self._force(st, now)
                else:
                    self._finish(st, st.missing, st.prot_missing, True, "no answer to FORCE_STOP", now)
            elif st.state == "probing" and now >= st.probe_due:
                st.probe_due = math.inf  # until the re-probe is out
                if st.attempt < MAX_ATTEMPTS:
                    st.attempt += 1
                    self.totals["probe_timeouts"] += 1
                    self._probe_q.append(st)
        for w in self._windows.values():
            if w.next_timer() <= now:
                w.on_timer(now)  # losses declared after the horizon

    def peer_unreachable(self, dst: int, why: str, now: float) -> None:
        """Every message to `dst` ends forced with error `why` (the control connection failed)."""
        for st in [s for s in self._msgs.values() if s.dst == dst]:
            self._finish(st, st.missing, st.prot_missing, True, why, now)

    def fail_all(self, why: str, now: float) -> None:
        for st in list(self._msgs.values()):
            self._finish(st, st.missing, st.prot_missing, True, why, now)

    # --- outputs -------------------------------------------------------------------------------

    def poll_transmit(self, now: float) -> DataSend | ProbeSend | None:
        """What goes on the UDP path next, or None (nothing queued, or the windows / pacing say
        wait: see `next_timer`)."""
        while self._probe_q:
            st = self._probe_q.popleft()
            if st.state in ("sending", "probing"):
                return self._probe(st, now)
        paced = self.cfg.pacing_mbps > 0
        self._pace_wait = False
        for _ in range(len(self._ready)):
            dst = self._ready[0]
            q = self._queues[dst]
            while q and self._msgs.get(q[0].key) is None:  # rounds of messages finished meanwhile
                q.popleft()
            if not q:
                self._ready.popleft()
                continue
            if self._incast is not None and not self._incast.admits(dst, self._ready, q[0].retx):
                self._ready.rotate(-1)  # an incast bound holds this destination back
                continue
            room = self._window(dst).room(now)
            if room <= 0:
                self._ready.rotate(-1)
                continue
            if paced:
                if now < self._pace_next:
                    self._pace_wait = True
                    return None
                if now - self._pace_next > PACE_SLACK_S:
                    self._pace_next = now  # idle: no credit for the past
            rnd = q[0]
            st = self._msgs[rnd.key]
            if not st.described:
                self._describe(st, now)
            left = len(rnd.wire) - rnd.taken
            k = min(room, left, self._slice(st, paced))
            start = rnd.taken
            rnd.taken += k
            if k:
                self._sent(st, rnd, start, start + k, now)
            if rnd.taken == len(rnd.wire):
                q.popleft()
                self._round_out(st, rnd, now)
                if not q:
                    self._ready.remove(dst)
            else:
                self._ready.rotate(-1)
            if k:
                return DataSend(dst, rnd, start, start + k)
            return self.poll_transmit(now)  # an empty round (all skipped): its PROBE is next
        return None

    def next_timer(self) -> float:
        """When `on_timer` (or `poll_transmit`, for pacing and windows) next has something to do."""
        t = math.inf
        if self._probe_q:
            return -math.inf
        for st in self._msgs.values():
            if st.state == "probing":
                t = min(t, st.deadline, st.probe_due)
            elif st.state == "forcing":
                t = min(t, st.deadline)
        for w in self._windows.values():
            t = min(t, w.next_timer())
        if self._pace_wait:
            t = min(t, self._pace_next)
        return t

    def take_outputs(self) -> list:
        out, self._out = self._out, []
        return out

    def busy(self) -> bool:
        """True while any message is in flight."""
        return bool(self._msgs)

    def stats(self) -> dict:
        return {
            "packets_sent": self.totals["pkts_sent"],
            "bytes_sent": self.totals["bytes_sent"],
            "packets_retransmitted": self.totals["retx_sent"],
            "injected_drops": self.totals["injected_drops"],
            "messages_sent": self.totals["msgs_sent"],
            "forced_sent": self.totals["forced_sent"],
            "probes_sent": self.totals["probes_sent"],
            "probe_timeouts": self.totals["probe_timeouts"],
            "duplicate_answers": self.totals["dup_answers"],
            "feedback_received": self.totals["feedback_rcvd"],
            "srtt_ms": {str(k): round(v[0] * 1e3, 3) for k, v in self._rtt.items()},
            "cc": {str(k): w.stats() for k, w in self._windows.items() if w.stats()},
            "control_sent": self.totals["ctrl_sent"],
            **(self._incast.stats() if self._incast is not None else {}),
        }

    # --- rounds --------------------------------------------------------------------------------

    def _round(self, st: _Msg, order: np.ndarray, retx: bool) -> Round:
        wire = order
        if self.cfg.inject_loss > 0:  # the test knob: these packets never reach the wire
            keep = self._rng.random(len(order)) >= self.cfg.inject_loss
            self.totals["injected_drops"] += int((~keep).sum())
            wire = order[keep]
        return Round(st.key, st.dst, st.rounds + 1, st.batch, order, wire, retx, self.cfg.cc != "none")

    def _enqueue(self, rnd: Round, front: bool) -> None:
        q = self._queues.setdefault(rnd.dst, collections.deque())
        if front:
            q.appendleft(rnd)
        else:
            q.append(rnd)
        if rnd.dst not in self._ready:
            self._ready.append(rnd.dst)

    def _slice(self, st: _Msg, paced: bool) -> int:
        """Most packets in one slice: pacing hands out PACE_QUANTUM_S worth, per-packet records a
        send batch (each slice gets its own timestamp), congestion control CC_SLICE."""
        if paced:
            rate = self.cfg.pacing_mbps * 1e6 / 8
            frame = self.cfg.values_per_pkt * VALUE_BYTES + FRAME_OVERHEAD
            return int(max(1, min(self.cfg.send_batch, rate * PACE_QUANTUM_S / frame)))
        if self.cfg.per_packet:
            return self.cfg.send_batch
        return CC_SLICE if self.cfg.cc != "none" else st.n_pkts

    def _sent(self, st: _Msg, rnd: Round, start: int, stop: int, now: float) -> None:
        """Bookkeeping of a slice handed to the driver."""
        seqs = rnd.wire[start:stop]
        k = stop - start
        payload = (
            int(np.minimum(st.batch.values_per_pkt, st.n_values - seqs * st.batch.values_per_pkt).sum()) * VALUE_BYTES
        )
        self.totals["pkts_sent"] += k
        self.totals["bytes_sent"] += payload
        self._window(st.dst).on_sent(k, now)
        if st.sent_at is not None:
            st.sent_at[seqs] = now
        if st.pkt_send_us is not None:
            stamps = st.pkt_send_us
            stamps[seqs[stamps[seqs] < 0]] = self._wall_us(now)
        if self.cfg.pacing_mbps > 0:
            tel = TELEMETRY_LEN if st.batch.telemetry else 0
            self._pace_next += (payload + k * (FRAME_OVERHEAD + tel)) * 8 / (self.cfg.pacing_mbps * 1e6)

    def _round_out(self, st: _Msg, rnd: Round, now: float) -> None:
        """The last slice of `rnd` was handed out: the round counts, its PROBE goes next."""
        order = rnd.order
        if rnd.retx:
            st.retx_pkts += len(order)
            self.totals["retx_sent"] += len(order)
            if st.pkt_retx is not None:
                st.pkt_retx[order] += 1
        elif st.pkt_send_us is not None:  # packets the injected loss skipped still count as sent
            st.pkt_send_us[order[st.pkt_send_us[order] < 0]] = self._wall_us(now)
        st.round_prio = int(st.prio[order].min()) if len(order) else int(st.prio.min())
        st.round_pkts = len(order)
        st.rounds = rnd.number
        st.attempt = 0
        st.probe_times = []
        st.state = "sending"
        self._probe_q.append(st)

    def _describe(self, st: _Msg, now: float) -> None:
        """The message's DESCRIBE goes to the receiver ahead of its first packet."""
        st.described = True
        st.state = "sending"
        st.start_us = self._wall_us(now)
        if self.cfg.per_packet:
            st.pkt_send_us = np.full(st.n_pkts, -1, dtype=np.int64)
            st.pkt_retx = np.zeros(st.n_pkts, dtype=np.int32)
        info = st.info
        self._frame(
            st.dst,
            C.Control(
                C.DESCRIBE,
                self.cfg.job_id,
                self.cfg.rank,
                st.dst,
                st.key[2],
                st.key[1],
                st.key[3],
                st.n_pkts,
                layer_first=info.layer_first,
                layer_last=info.layer_last,
                prio=int(st.prio[0]),
                step=info.step,
                rec_msg_id=info.rec_msg_id,
                n_values=st.n_values,
                budget_ppm=st.budget_ppm,
                drop_prec=st.dp,
                counts=info.counts,
                feedback=self.cfg.cc != "none",
            ),
        )

    def _probe(self, st: _Msg, now: float) -> ProbeSend:
        """The PROBE of the current round (attempt `st.attempt`), with its timeout armed."""
        st.probe_head.prio = st.round_prio
        data = pack_probe(st.probe_head, Probe(st.rounds, st.attempt, st.round_pkts))
        st.state = "probing"
        if st.deadline is None:
            st.deadline = now + self.cfg.deadline_ms / 1e3
        st.probe_times.append(now)
        st.probe_due = min(st.deadline, now + self._rto(st.dst) * (1 << min(st.attempt, 16)))
        st.probes += 1
        self.totals["probes_sent"] += 1
        if self.cfg.pacing_mbps > 0:
            self._pace_next += (HEADER_LEN + PROBE_LEN + 28 + 14) * 8 / (self.cfg.pacing_mbps * 1e6)
        return ProbeSend(st.dst, st.key, data, tos_of(st.round_prio, 0))

    def _force(self, st: _Msg, now: float, final: bool = False) -> None:
        """FORCE_STOP: the receiver gives up the unprotected packets still missing and asks for the
        protected ones (a BITMAP answering no attempt), or ends the message (STOP). FINAL: it ends
        the message whatever is missing."""
        st.state = "forcing"
        if not st.forced:
            st.forced, st.forced_round = True, st.rounds
        st.final = final
        st.deadline = now + self.cfg.deadline_ms / 1e3  # for the receiver's acknowledgement
        self._frame(
            st.dst,
            C.Control(
                C.FORCE_STOP,
                self.cfg.job_id,
                self.cfg.rank,
                st.dst,
                st.key[2],
                st.key[1],
                st.key[3],
                st.n_pkts,
                round=st.rounds,
                final=final,
            ),
        )

    def _finish(self, st: _Msg, lost: int, prot_lost: int, forced: bool, error: str | None, now: float) -> None:
        if st.state == "done":
            return
        st.state = "done"
        self._msgs.pop(st.key, None)
        done_us = self._wall_us(now)
        start_us = done_us if st.start_us is None else st.start_us
        res = SendResult(lost, prot_lost, st.retx_pkts, st.rounds, forced, start_us, done_us, error)
        if self._incast is not None:
            self._incast.finished(lost == 0 and st.retx_pkts == 0 and not forced)
        if forced:
            self.totals["forced_sent"] += 1
            log.warning(
                "rank %s: budget violation: message %s forced after %d rounds, %d of %d packets lost (%d protected)%s",
                self.cfg.rank,
                key_text(st.key),
                st.rounds,
                lost,
                st.n_pkts,
                prot_lost,
                f": {error}" if error else "",
            )
        self.totals["msgs_sent"] += 1
        info = st.info
        self.rows.append(
            message_row(
                self.cfg.host,
                self.cfg.rank,
                "sender",
                st.dst,
                st.key,
                rec_msg_id=info.rec_msg_id,
                step=info.step,
                layer_first=info.layer_first,
                layer_last=info.layer_last,
                prio=int(st.prio[0]),
                nbytes=st.n_values * VALUE_BYTES,
                pkts=st.n_pkts,
                lost_pkts=lost,
                retx_pkts=st.retx_pkts,
                rounds=st.rounds,
                forced=forced,
                protected_lost=prot_lost,
                start_us=res.start_us,
                first_byte_us=None,
                complete_us=done_us,
            )
        )
        if st.pkt_send_us is not None:
            self.packet_chunks.append(
                packet_chunk(
                    "sender",
                    self.cfg.rank,
                    st.dst,
                    st.key,
                    info.rec_msg_id,
                    st.prio,
                    st.dp,
                    st.pkt_send_us,
                    np.full(st.n_pkts, -1),
                    st.pkt_retx,
                )
            )
        self._out.append(SendDone(st.key, res))

    # --- feedback and round trips ---------------------------------------------------------------

    def _window(self, dst: int):
        w = self._windows.get(dst)
        if w is None:
            w = (
                Unlimited()
                if self.cfg.cc == "none"
                else DctcpWindow(
                    self.cfg.cc_init_window,
                    self.cfg.probe_rto_ms / 1e3,
                    FEEDBACK_DELAY_S * self.cfg.time_scale,
                    HORIZON_FLOOR_S * self.cfg.time_scale,
                )
            )
            self._windows[dst] = w
        return w

    def _on_feedback(self, msg: C.Control, now: float) -> None:
        self.totals["feedback_rcvd"] += 1
        w = self._windows.get(msg.dst_rank)
        if w is None:
            self.count_drop("control.unexpected", f"FEEDBACK from rank {msg.dst_rank}, never sent to")
            return
        st = self._msgs.get((msg.dst_rank, msg.iter, msg.phase, msg.msg_id))
        rtt = None
        if st is not None and st.sent_at is not None and st.n_pkts == msg.n_pkts and st.sent_at[msg.last_seq] >= 0:
            rtt = now - float(st.sent_at[msg.last_seq])
        w.on_feedback(msg.rcvd_pkts, msg.ce_pkts, rtt, now)

    def _rto(self, dst: int) -> float:
        """PROBE timeout before backoff (seconds): max(floor, srtt + 4 rttvar) of PROBE -> answer
        times to `dst` (RFC 6298 with unambiguous samples: answers echo the PROBE's attempt and the
        time the receiver held it, which is subtracted), the floor until the first sample. The
        round's size adds nothing: the PROBE leaves after the round's packets have left, so what can
        still be ahead of it is bounded by the window (or the send buffer) and the queues on the path,
        which the measured round-trip times include."""
        floor = self.cfg.probe_rto_ms / 1e3
        est = self._rtt.get(dst)
        return floor if est is None else max(floor, est[0] + 4 * est[1])

    def _rtt_sample(self, dst: int, r: float) -> None:
        est = self._rtt.get(dst)
        if est is None:
            self._rtt[dst] = [r, r / 2]
        else:
            est[1] = 0.75 * est[1] + 0.25 * abs(est[0] - r)
            est[0] = 0.875 * est[0] + 0.125 * r

    # --- helpers -------------------------------------------------------------------------------

    def _frame(self, dst: int, msg: C.Control) -> None:
        self._out.append(FrameSend(dst, None, C.encode(msg)))
        self.totals["ctrl_sent"] += 1

    def _wall_us(self, now: float) -> int:
        return int((now + self.wall_offset_s) * 1e6)

    def count_drop(self, cause: str, detail: str = "") -> None:
        """Count (and log once per cause) something malformed or unexpected that was ignored."""
        self.drops.note(self.cfg.rank, cause, detail)
