"""Bounded-loss transport (DESIGN §6): UDP data with in-band PROBEs; DESCRIBE / BITMAP / STOP /
FORCE_STOP on TCP.

One `Transport` per agent owns a UDP data socket (receive on `data_port`, send from a second socket
so sends may block on a full NIC queue without stalling reception), a TCP listener for control
(`control_port`), and two threads:

- the **send thread** takes messages from a queue (retransmissions first), sends the message's
  DESCRIBE on the control connection to the receiver, then its pre-built packets (`dlcp.udpio`:
  sendmmsg, IP TOS per packet, optional pacing), highest priority first and, within a priority,
  protected packets first, then a PROBE on the same UDP socket (an in-band DLCP packet of type
  PROBE at the lowest priority of the round, drop precedence 0, PROTECTED). Queues serve a priority
  in FIFO order and the PROBE is in the lowest one of its round, so on any one path it reaches the
  receiver after every surviving packet of the round. It also runs the timers: a PROBE not answered
  within the PROBE timeout is sent again (a re-probe: not a new round), and a message past its
  deadline gets FORCE_STOP.
- the **receive thread** places data packets by offset into the message's buffer, keeps the
  per-packet bitmap, answers PROBEs (STOP or BITMAP, on the control connection the DESCRIBE came
  from) and handles STOP / BITMAP replies to its own messages.

Receiver decision on PROBE (`_answer`): with `missing` packets of `n`, `allowed` = floor(budget * n)
further capped by the per-iteration budget (per source and iteration: floor(iter_budget * packets so
far) minus packets already accepted as lost), STOP when no protected packet is missing and `missing
<= allowed`; else BITMAP asking for every missing protected packet plus the fewest unprotected ones
that bring the loss within `allowed` (lowest drop precedence first). The sender resends those as
RETX, protected first, then by priority, and probes again: at most `r_max` retransmission rounds and
`deadline_ms` from the first PROBE, then FORCE_STOP (logged and recorded as a budget violation).
A PROBE is answered at once when every packet of its round is in; otherwise after a short quiet
time (no data of the message since the PROBE) because per-packet spraying can still deliver data
of a slower path after it. The quiet time starts at `probe_quiet_ms` and adapts per source: it
doubles whenever a packet asked for in a BITMAP turns up as an original (the BITMAP was premature)
and eases back after clean messages.

Malformed or unexpected packets and control messages are counted by cause (`stats()["drops"]`),
logged once per cause, and ignored.
"""

from __future__ import annotations

import collections
import logging
import os
import selectors
import socket
import struct
import threading
import time

import numpy as np

from dlcp.records import now_us
from dlcp.transport.api import (
    Peer,
    RecvResult,
    SendHandle,
    SendInfo,
    SendResult,
    TransportConfig,
    TransportError,
    connect_retrying,
    key_text,
    record_rank,
    set_socket_buffer,
    wait_for_done,
)
from dlcp.transport.udpio import BatchSender, plan_for, sockaddr_in
from dlcp.wire import control_frames as C
from dlcp.wire.header import (
    FLAG_TELEMETRY,
    HEADER,
    HEADER_LEN,
    PHASE_MASK,
    PHASE_NAMES,
    PHASE_SHIFT,
    PRIO_CONTROL,
    SLOTS,
    TELEMETRY_LEN,
    TYPE_MASK,
    TYPE_PROBE,
    TYPE_RETX,
    VALUE_BYTES,
    VER_SHIFT,
    VERSION,
    MalformedPacket,
    Probe,
    field_values,
    header_fields,
    pack_probe,
    probe_header,
    tos_of,
    unpack_from,
    unpack_probe,
)

log = logging.getLogger("dlcp.transport.bounded_loss")

ETH_HEADER = 14  # pacing counts Ethernet frames (preamble and FCS are not on a veth)
STALE_WINDOW = 2  # messages of iterations older than current - STALE_WINDOW are stale
QUIET_MAX_S = 0.2  # the longest a receiver waits for in-flight data before answering a PROBE
TCP_RTO_MIN_US = 45  # socket option (Linux 6.16)
CONTROL_RTO_MIN_US = 10_000
MAX_ATTEMPTS = 250  # re-probes of one round (the attempt travels in one byte; the deadline ends it first)
PACE_SLACK_S = 0.005  # pacing catches up on delays shorter than this (sleep overshoot, scheduling)
PACE_QUANTUM_S = 0.002  # pacing sends this much time's worth of frames per system call (<= send_batch)


def _held_us(st: "_Rx") -> int:
    """How long the receiver has held the PROBE it is answering (echoed to the sender)."""
    return int((time.monotonic() - st.probe_mono) * 1e6)


def _control_socket_options(s: socket.socket) -> None:
    """Priority 7, no Nagle, and (Linux >= 6.16) a 10 ms floor instead of 200 ms for the TCP
    retransmission timeout: where control shares a lossy queue (the fifo baseline), a lost DESCRIBE,
    BITMAP or STOP segment otherwise stalls its message for at least 200 ms."""
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos_of(PRIO_CONTROL, 0))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        s.setsockopt(socket.IPPROTO_TCP, TCP_RTO_MIN_US, CONTROL_RTO_MIN_US)
    except OSError:  # older kernels: the default floor
        pass


# --- control connections -----------------------------------------------------------------------------

class _Conn:
    """A non-blocking TCP control connection with an output buffer (writes from any thread)."""

    def __init__(self, sock: socket.socket, outgoing_to: int | None):
        self.sock = sock
        self.outgoing_to = outgoing_to  # peer rank for connections we opened, else None
        self.reader = C.FrameReader()
        self.out = bytearray()
        self.lock = threading.Lock()
        self.closed = False
        self.fd = sock.fileno()

    def send(self, frame: bytes) -> bool:
        """Queue `frame`; returns True when bytes are left for the receive thread to flush."""
        with self.lock:
            if self.closed:
                return False
            if not self.out:
                try:
                    n = self.sock.send(frame)
                except (BlockingIOError, InterruptedError):
                    n = 0
                except OSError:
                    self.closed = True
                    return False
                frame = frame[n:]
            self.out += frame
            return bool(self.out)

    def flush(self) -> bool:
        """Write what is buffered; True when everything went out."""
        with self.lock:
            while self.out and not self.closed:
                try:
                    n = self.sock.send(self.out)
                except (BlockingIOError, InterruptedError):
                    return False
                except OSError:
                    self.closed = True
                    return True
                del self.out[:n]
            return True


# --- per-message state -----------------------------------------------------------------------------

class _Tx:
    __slots__ = ("key", "dst", "batch", "info", "handle", "n_pkts", "prio", "dp", "budget_ppm",
                 "rounds", "retx_pkts", "start_us", "deadline", "state", "missing", "prot_missing",
                 "pkt_send_us", "pkt_retx", "probe_head", "round_prio", "round_pkts", "attempt",
                 "probe_times", "probe_due", "probes")

    def __init__(self, key, dst, batch, info, handle, budget):
        self.key, self.dst, self.batch, self.info, self.handle = key, dst, batch, info, handle
        f = header_fields(batch.headers)
        self.n_pkts = len(batch)
        self.prio = field_values(f, "prio").astype(np.uint8)
        self.dp = field_values(f, "drop_prec").astype(np.uint8)
        self.budget_ppm = int(round(budget * C.PPM))
        self.rounds = 0  # PROBE rounds so far: 1 + retransmission rounds
        self.retx_pkts = 0
        self.start_us = 0
        self.deadline = None  # monotonic seconds, set at the first PROBE
        self.state = "queued"  # queued -> sending -> probing -> (retx -> probing)* -> forcing -> done
        self.missing = self.n_pkts  # as last reported by the receiver
        self.prot_missing = int((self.dp == 0).sum())
        self.pkt_send_us = None  # per-packet records only
        self.pkt_retx = None
        first = unpack_from(batch.headers[0].tobytes())
        first.layer_id = info.layer_first & 0xFFFF
        self.probe_head = probe_header(first, 0)  # prio set per round
        self.round_prio = 0  # lowest priority among the packets of the current round
        self.round_pkts = 0
        self.attempt = 0  # re-probes of the current round so far
        self.probe_times: list[float] = []  # monotonic send time of each attempt of the current round
        self.probe_due = float("inf")  # when the current round is probed again
        self.probes = 0  # PROBE packets sent, re-probes included


class _Rx:
    __slots__ = ("key", "n_pkts", "buf", "bytes", "received", "n_received", "retx", "dups",
                 "start_us", "first_byte_us", "first_mono", "last_mono", "orig_last_mono", "n_orig",
                 "last_len", "desc", "conn", "probe_round", "probe_attempt", "probe_mono", "answered",
                 "rounds", "recv_us", "requested", "req_left", "premature", "late")

    def __init__(self, key, n_pkts, values_per_pkt, per_packet):
        self.key = key
        self.n_pkts = n_pkts
        self.buf = np.zeros(n_pkts * values_per_pkt, dtype=np.float32)
        self.bytes = memoryview(self.buf).cast("B")
        self.received = bytearray(n_pkts)
        self.n_received = 0
        self.retx = 0
        self.dups = 0
        self.start_us = now_us()
        self.first_byte_us = None
        self.first_mono = 0.0  # first data packet
        self.last_mono = 0.0  # latest data packet
        self.orig_last_mono = 0.0  # latest original (not RETX) packet: the gap estimate ignores rounds
        self.n_orig = 0
        self.last_len = -1  # payload values of the last packet, once seen
        self.desc = None  # the DESCRIBE (maps, budget, labels), once it arrived
        self.conn = None  # the control connection it came on: answers go there
        self.probe_round = 0  # round of the PROBE waiting for an answer (0: none)
        self.probe_attempt = 0
        self.probe_mono = 0.0  # when it arrived
        self.answered = 0  # the last round answered with a BITMAP
        self.requested = None  # bytearray: packets asked for in the last BITMAP
        self.req_left = 0  # of those, how many have not arrived yet
        self.premature = False  # a requested packet already turned up as an original
        self.late = 0  # BITMAPs found premature
        self.rounds = 0
        self.recv_us = np.full(n_pkts, -1, dtype=np.int64) if per_packet else None


class Transport:
    """One endpoint of the bounded-loss transport. See the module docstring."""

    def __init__(self, config: TransportConfig, peers: dict[int, Peer] | list[Peer]):
        self.cfg = config
        self.peers = {p.rank: p for p in (peers.values() if isinstance(peers, dict) else peers)}
        self.vpp = config.values_per_pkt
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)  # send queue + receive completions
        self._work: collections.deque = collections.deque()
        self._tx: dict = {}
        self._rx: dict = {}
        self._rx_done: dict = {}  # key -> RecvResult, until the consumer takes it
        self._finished: dict = {}  # key -> STOP frame, to answer a FORCE_STOP that crossed it / count late data
        self._iter_loss: dict = {}  # (src, iter) -> [packets accepted, packets lost]
        self._current_iter = None
        self._out: dict[int, _Conn] = {}
        self._conns: dict[int, _Conn] = {}  # fd -> conn (all control connections)
        self._pending_reg: collections.deque = collections.deque()
        self._pending_probe: set = set()
        self._closing = False
        self._rng = np.random.default_rng(config.inject_seed)
        self.message_rows: list[dict] = []
        self.packet_chunks: list[dict] = []
        self.drops: collections.Counter = collections.Counter()
        self._logged: set = set()
        self.totals = collections.Counter()
        self._pace_next = 0.0
        self._quiet_floor = config.probe_quiet_ms / 1e3
        self._quiet_s: dict[int, float] = {}  # per source: adapted quiet time
        self._rtt: dict[int, list[float]] = {}  # per destination: [srtt, rttvar] of PROBE -> answer (s)
        self._open_sockets()
        self._rx_thread = threading.Thread(target=self._rx_loop, name=f"dlcp-rx-{config.rank}", daemon=True)
        self._tx_thread = threading.Thread(target=self._tx_loop, name=f"dlcp-tx-{config.rank}", daemon=True)
        self._rx_thread.start()
        self._tx_thread.start()

    # --- sockets -------------------------------------------------------------------------------

    def _open_sockets(self) -> None:
        cfg = self.cfg
        try:
            self.udp_rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            set_socket_buffer(self.udp_rx, socket.SO_RCVBUF, cfg.rcvbuf_bytes)
            self.udp_rx.bind((cfg.ip, cfg.data_port))
            self.udp_rx.setblocking(False)
            self.udp_tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            set_socket_buffer(self.udp_tx, socket.SO_SNDBUF, cfg.sndbuf_bytes)
            self.udp_tx.bind((cfg.ip, 0))
            self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            # the SYN-ACK carries the listener's TOS: at priority 0 it queues (and is dropped) with
            # background traffic, and a lost SYN-ACK costs the connecting peer a 1 s SYN timeout
            self.listener.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos_of(PRIO_CONTROL, 0))
            self.listener.bind((cfg.ip, cfg.control_port))
            self.listener.listen(64)
            self.listener.setblocking(False)
        except OSError as e:
            self._close_sockets()
            raise TransportError(f"cannot open data port {cfg.ip}:{cfg.data_port} / control port "
                                 f"{cfg.control_port}: {e.strerror or e}") from None
        self.data_port = self.udp_rx.getsockname()[1]
        self.control_port = self.listener.getsockname()[1]
        self.sender = BatchSender(self.udp_tx, cfg.send_impl, cfg.send_batch)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.udp_rx, selectors.EVENT_READ, "udp")
        self._sel.register(self.listener, selectors.EVENT_READ, "listen")
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._dests = {r: sockaddr_in(p.ip, p.data_port) for r, p in self.peers.items()}

    def _close_sockets(self) -> None:
        for name in ("udp_rx", "udp_tx", "listener"):
            s = getattr(self, name, None)
            if s is not None:
                s.close()

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass

    # --- public API ----------------------------------------------------------------------------

    def add_peer(self, peer: Peer) -> None:
        """Make `peer` reachable (or move it, e.g. behind a test proxy)."""
        with self._lock:
            self.peers = {**self.peers, peer.rank: peer}
            self._dests = {**self._dests, peer.rank: sockaddr_in(peer.ip, peer.data_port)}

    def connect(self, ranks=None, timeout: float | None = None) -> None:
        """Open control connections to `ranks` (default: every peer), waiting until each peer is
        listening: after this, data sent to them will find their sockets bound."""
        for r in (self.peers if ranks is None else ranks):
            self._conn_to(r, timeout)

    def send(self, dst: int, batch, info: SendInfo) -> SendHandle:
        """Queue the packets of `batch` for `dst`; returns at once. The batch (headers and values)
        must stay unchanged until the handle is done."""
        if dst not in self.peers:
            raise TransportError(f"send to unknown rank {dst}")
        f = header_fields(batch.headers[:1])
        key = (dst, int(f["iter"][0]), int(field_values(f, "phase")[0]), int(f["msg_id"][0]))
        if batch.values_per_pkt != self.vpp:
            raise ValueError(f"batch has {batch.values_per_pkt} values per packet, transport {self.vpp}")
        budget = self.cfg.budget_for(info.layer_first, info.layer_last) * info.budget_share \
            if info.budget is None else (0.0 if self.cfg.reliable else info.budget)
        handle = SendHandle(key)
        st = _Tx(key, dst, batch, info, handle, budget)
        if info.counts is not None and len(info.counts) != st.n_pkts:
            raise ValueError(f"{len(info.counts)} counts for {st.n_pkts} packets")
        with self._cond:
            if key in self._tx:
                raise TransportError(f"message {key_text(key)} is already in flight")
            self._tx[key] = st
            self._work.append(("new", st, None))
            self._cond.notify_all()
        return handle

    def recv(self, src: int, iteration: int, phase: int, msg_id: int, timeout: float | None = None) -> RecvResult:
        """Wait for message (src, iteration, phase, msg_id) to finish (STOP or FORCE_STOP)."""
        key = (src, iteration & 0xFFFF, phase, msg_id)

        def received() -> str:
            have = self._rx.get(key)
            return f"{have.n_received}/{have.n_pkts} packets" if have else "nothing"

        return wait_for_done(self._cond, self._rx_done, key, timeout, lambda: self._closing, received)

    def advance(self, iteration: int) -> None:
        """The caller moved on to `iteration`: messages more than STALE_WINDOW iterations older
        become stale (their packets are counted and dropped) and are forgotten."""
        with self._lock:
            self._current_iter = iteration & 0xFFFF
            for table in (self._finished, self._iter_loss, self._rx_done):
                for k in [k for k in list(table) if self._stale(k[1])]:
                    table.pop(k, None)
            for k in [k for k in list(self._rx) if self._stale(k[1])]:
                self.drops["abandoned"] += 1
                self._rx.pop(k, None)

    def take_message_rows(self) -> list[dict]:
        """The message records added since the last call, removed from `message_rows` (long-lived
        users such as the DDP hook drain them so memory stays bounded)."""
        with self._lock:
            rows, self.message_rows = self.message_rows, []
        return rows

    def stats(self) -> dict:
        with self._lock:
            return {"packets_sent": self.totals["pkts_sent"], "bytes_sent": self.totals["bytes_sent"],
                    "packets_retransmitted": self.totals["retx_sent"],
                    "packets_received": self.totals["pkts_rcvd"], "bytes_received": self.totals["bytes_rcvd"],
                    "duplicates": self.totals["dups"], "injected_drops": self.totals["injected_drops"],
                    "send_errors": dict(self.sender.error_codes),
                    "messages_sent": self.totals["msgs_sent"], "messages_received": self.totals["msgs_rcvd"],
                    "forced_sent": self.totals["forced_sent"], "forced_received": self.totals["forced_rcvd"],
                    "premature_bitmaps": self.totals["premature_bitmaps"],
                    "quiet_ms": {str(k): round(v * 1e3, 3) for k, v in self._quiet_s.items()},
                    "probes_sent": self.totals["probes_sent"], "probe_timeouts": self.totals["probe_timeouts"],
                    "duplicate_probes": self.totals["dup_probes"],
                    "srtt_ms": {str(k): round(v[0] * 1e3, 3) for k, v in self._rtt.items()},
                    "control_sent": self.totals["ctrl_sent"], "control_received": self.totals["ctrl_rcvd"],
                    "drops": dict(self.drops), "send_impl": self.sender.impl}

    def close(self) -> None:
        with self._cond:
            if self._closing:
                return
            self._closing = True
            self._cond.notify_all()
        self._wake()
        self._tx_thread.join(timeout=5)
        self._rx_thread.join(timeout=5)
        for c in list(self._conns.values()) + list(self._out.values()):
            c.sock.close()
        self._sel.close()
        self._close_sockets()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- drops ----------------------------------------------------------------------------------

    def _drop(self, cause: str, detail: str = "") -> None:
        self.drops[cause] += 1
        if cause not in self._logged:
            self._logged.add(cause)
            log.warning("rank %s: dropped %s%s (further drops of this kind are only counted)",
                        self.cfg.rank, cause, f": {detail}" if detail else "")

    def _stale(self, it16: int) -> bool:
        cur = self._current_iter
        return cur is not None and ((cur - it16) & 0xFFFF) > STALE_WINDOW and ((cur - it16) & 0xFFFF) < 0x8000

    # --- send thread ---------------------------------------------------------------------------

    def _tx_loop(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._work and not self._closing:
                        wait = self._check_deadlines()
                        if self._work:  # a timer fired: act now, not after the next one
                            break
                        self._cond.wait(wait)
                    if self._closing:
                        return
                    kind, st, arg = self._work.popleft()
                if kind == "new":
                    self._send_round(st, np.lexsort((np.arange(st.n_pkts), st.dp, -st.prio.astype(np.int16))), False)
                elif kind == "retx":
                    self._send_round(st, arg, True)
                elif kind == "reprobe":
                    self._reprobe(st)
                elif kind == "force":
                    self._force(st)
        except Exception as e:  # a bug here must not hang the agent silently
            log.exception("send thread failed")
            with self._cond:
                self._closing = True
                self._cond.notify_all()
            for st in list(self._tx.values()):
                self._finish_tx(st, st.missing, st.prot_missing, True, f"send thread failed: {e!r}")

    def _check_deadlines(self) -> float:
        """Force messages past their deadline, queue re-probes of PROBEs past their timeout; returns
        seconds until the next timer (max 0.5)."""
        now = time.monotonic()
        wait = 0.5
        for st in list(self._tx.values()):
            if st.deadline is None or st.state not in ("probing", "forcing"):
                continue
            if now >= st.deadline:
                if st.state == "probing":
                    log.warning("rank %s: message %s past its deadline after %d rounds: FORCE_STOP",
                                self.cfg.rank, key_text(st.key), st.rounds)
                    self._work.appendleft(("force", st, None))
                    st.state = "forcing"
                    st.deadline = now + self.cfg.deadline_ms / 1e3  # for the receiver's acknowledgement
                else:  # the receiver never acknowledged FORCE_STOP: give up on it
                    self._finish_tx(st, st.missing, st.prot_missing, True, "no answer to FORCE_STOP")
                continue
            if st.state == "probing" and now >= st.probe_due:
                st.probe_due = float("inf")  # until the re-probe is out
                self._work.appendleft(("reprobe", st, None))
                continue
            wait = min(wait, st.deadline - now, st.probe_due - now)
        return max(wait, 0.001)

    def _conn_to(self, dst: int, timeout: float | None = None) -> _Conn:
        conn = self._out.get(dst)
        if conn is not None and not conn.closed:
            return conn
        peer = self.peers[dst]
        timeout = self.cfg.connect_timeout_s if timeout is None else timeout
        s = connect_retrying(self.cfg.ip, (peer.ip, peer.control_port), timeout, lambda: self._closing,
                             f"control connection to rank {dst}", prepare=_control_socket_options)
        s.setblocking(False)
        conn = _Conn(s, dst)
        with self._lock:
            old = self._out.get(dst)
            if old is not None and not old.closed:  # another thread won the race
                s.close()
                return old
            self._out[dst] = conn
            self._pending_reg.append(conn)
        self._wake()
        return conn

    def _send_ctrl(self, conn: _Conn, msg: C.Control) -> None:
        if conn.send(C.encode(msg)):
            with self._lock:
                self._pending_reg.append(conn)  # ask the receive thread to watch for writability
            self._wake()
        self.totals["ctrl_sent"] += 1

    def _send_round(self, st: _Tx, order: np.ndarray, retx: bool) -> None:
        cfg = self.cfg
        if not retx:
            st.state = "sending"
            st.start_us = now_us()
            if cfg.per_packet:
                st.pkt_send_us = np.full(st.n_pkts, -1, dtype=np.int64)
                st.pkt_retx = np.zeros(st.n_pkts, dtype=np.int32)
            if not self._describe(st):
                return
        plan_order = order
        if cfg.inject_loss > 0:
            keep = self._rng.random(len(order)) >= cfg.inject_loss
            self.totals["injected_drops"] += int((~keep).sum())
            plan_order = order[keep]
        if len(plan_order):
            plan = plan_for(st.batch, plan_order, self._dests[st.dst], retransmission=retx)
            self._send_plan(plan, st)
        if retx:
            st.retx_pkts += len(order)
            self.totals["retx_sent"] += len(order)
            if cfg.per_packet:
                st.pkt_retx[order] += 1
        if cfg.per_packet and not retx:  # packets the injected loss skipped still count as sent
            st.pkt_send_us[order[st.pkt_send_us[order] < 0]] = now_us()
        st.round_prio = int(st.prio[order].min())
        st.round_pkts = len(order)
        st.rounds += 1
        st.attempt = 0
        st.probe_times = []
        self._probe(st)

    def _describe(self, st: _Tx) -> bool:
        """Send the message's DESCRIBE on the control connection; False (message finished with an
        error) when the receiver cannot be reached."""
        info = st.info
        try:
            conn = self._conn_to(st.dst)
        except TransportError as e:
            self._finish_tx(st, st.missing, st.prot_missing, True, str(e))
            return False
        f = header_fields(st.batch.headers[:1])
        self._send_ctrl(conn, C.Control(
            C.DESCRIBE, self.cfg.job_id, self.cfg.rank, st.dst, st.key[2], st.key[1], st.key[3], st.n_pkts,
            layer_first=info.layer_first, layer_last=info.layer_last, prio=int(field_values(f, "prio")[0]),
            step=info.step, rec_msg_id=info.rec_msg_id, n_values=int(st.batch.values.size),
            budget_ppm=st.budget_ppm, drop_prec=st.dp, counts=info.counts))
        return True

    def _send_plan(self, plan, st: _Tx) -> None:
        """Send `plan` in chunks of `send_batch` packets; with pacing, chunks of PACE_QUANTUM_S of
        frames at the pacing rate, each sent when the previous one's time is up."""
        pace = self.cfg.pacing_mbps * 1e6 / 8  # bytes per second
        stamps = st.pkt_send_us if self.cfg.per_packet else None
        if pace <= 0 and stamps is None:
            sent = self.sender.send(plan, 0, plan.n)
        else:
            frame = plan.wire_bytes.astype(np.float64) + ETH_HEADER
            per_chunk = self.sender.batch if pace <= 0 else \
                int(max(1, min(self.sender.batch, pace * PACE_QUANTUM_S / max(frame.mean(), 1))))
            sent = 0
            for i in range(0, plan.n, per_chunk):
                j = min(plan.n, i + per_chunk)
                if pace > 0:
                    now = time.monotonic()
                    if self._pace_next > now:
                        time.sleep(self._pace_next - now)
                    elif now - self._pace_next > PACE_SLACK_S:
                        self._pace_next = now  # idle: no credit for the past
                    # (a sleep that overshot by less than the slack is caught up by sending at once)
                    self._pace_next += float(frame[i:j].sum()) / pace
                sent += self.sender.send(plan, i, j)
                if stamps is not None:
                    seqs = plan.order[i:j]
                    stamps[seqs[stamps[seqs] < 0]] = now_us()
        self.totals["pkts_sent"] += sent
        self.totals["bytes_sent"] += int(plan.payload_bytes.sum())

    def _probe(self, st: _Tx) -> None:
        """Send the PROBE of the current round in band (attempt `st.attempt`) and arm its timeout."""
        st.probe_head.prio = st.round_prio
        frame = pack_probe(st.probe_head, Probe(st.rounds, st.attempt, st.round_pkts))
        now = time.monotonic()
        with self._cond:
            if st.state == "done":
                return
            st.state = "probing"
            if st.deadline is None:
                st.deadline = now + self.cfg.deadline_ms / 1e3
            st.probe_times.append(now)
            st.probe_due = min(st.deadline, now + self._rto(st.dst) * (1 << min(st.attempt, 16)))
            self._cond.notify_all()  # the send thread recomputes its next timer
        peer = self.peers[st.dst]
        anc = [(socket.IPPROTO_IP, socket.IP_TOS, struct.pack("i", tos_of(st.round_prio, 0)))]
        st.probes += 1  # counted first: the answer can arrive before sendmsg returns
        self.totals["probes_sent"] += 1
        try:
            self.udp_tx.sendmsg([frame], anc, 0, (peer.ip, peer.data_port))
        except OSError as e:  # ENOBUFS and the like: the PROBE timeout sends it again
            self.sender._count_error(e.errno or 0)
        if self.cfg.pacing_mbps > 0:
            self._pace_next += (len(frame) + 28 + ETH_HEADER) * 8 / (self.cfg.pacing_mbps * 1e6)

    def _reprobe(self, st: _Tx) -> None:
        """The PROBE of the current round went unanswered for its timeout: probe again (same round;
        a PROBE lost to a full queue is not a reason to resend data or count a round)."""
        with self._lock:
            if st.state != "probing" or st.attempt >= MAX_ATTEMPTS:
                return
            st.attempt += 1
        self.totals["probe_timeouts"] += 1
        self._probe(st)

    def _rto(self, dst: int) -> float:
        """PROBE timeout before backoff (seconds): max(floor, srtt + 4 rttvar) of PROBE -> answer
        times to `dst` (RFC 6298 with unambiguous samples: answers echo the PROBE's attempt and the
        time the receiver held it, which is subtracted), the floor until the first sample. The
        round's size adds nothing: the PROBE leaves after the round's packets have left the socket,
        so what can still be ahead of it is bounded by the send buffer and the queues on the path,
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

    def _force(self, st: _Tx) -> None:
        conn = self._out.get(st.dst)
        if conn is None or conn.closed:
            self._finish_tx(st, st.missing, st.prot_missing, True, "control connection lost")
            return
        self._send_ctrl(conn, C.Control(C.FORCE_STOP, self.cfg.job_id, self.cfg.rank, st.dst, st.key[2],
                                        st.key[1], st.key[3], st.n_pkts, round=st.rounds))

    def _finish_tx(self, st: _Tx, lost: int, prot_lost: int, forced: bool, error: str | None = None) -> None:
        with self._cond:
            if st.state == "done":
                return
            st.state = "done"
            self._tx.pop(st.key, None)
        done_us = now_us()
        res = SendResult(lost, prot_lost, st.retx_pkts, st.rounds, forced, st.start_us or done_us, done_us, error)
        if forced:
            self.totals["forced_sent"] += 1
            log.warning("rank %s: budget violation: message %s forced after %d rounds, %d of %d packets lost "
                        "(%d protected)%s", self.cfg.rank, key_text(st.key), st.rounds, lost, st.n_pkts,
                        prot_lost, f": {error}" if error else "")
        self.totals["msgs_sent"] += 1
        info = st.info
        row = {"host": self.cfg.host, "rank": record_rank(self.cfg.rank), "side": "sender",
               "peer": record_rank(st.dst), "iter": st.key[1], "msg_id": info.rec_msg_id,
               "phase": PHASE_NAMES[st.key[2]], "step": info.step, "layer_first": info.layer_first,
               "layer_last": info.layer_last, "prio": int(st.prio[0]), "bytes": int(st.batch.values.size * VALUE_BYTES),
               "pkts": st.n_pkts, "lost_pkts": lost, "retx_pkts": st.retx_pkts, "rounds": st.rounds,
               "forced": int(forced), "protected_lost": prot_lost, "start_us": res.start_us,
               "first_byte_us": None, "complete_us": done_us, "mct_us": done_us - res.start_us}
        with self._lock:
            self.message_rows.append(row)
            if self.cfg.per_packet and st.pkt_send_us is not None:
                self.packet_chunks.append({
                    "side": "sender", "src_rank": record_rank(self.cfg.rank), "dst_rank": record_rank(st.dst),
                    "phase": PHASE_NAMES[st.key[2]], "iter": st.key[1], "msg_id": info.rec_msg_id,
                    "seq": np.arange(st.n_pkts), "prio": st.prio, "drop_prec": st.dp,
                    "send_us": st.pkt_send_us, "recv_us": np.full(st.n_pkts, -1), "retx": st.pkt_retx})
        st.handle._finish(res)

    # --- receive thread --------------------------------------------------------------------------

    def _rx_loop(self) -> None:
        try:
            while not self._closing:
                timeout = 0.2 if not self._pending_probe else self.cfg.probe_quiet_ms / 2e3
                for key, events in self._sel.select(timeout):
                    what = key.data
                    if what == "udp":
                        self._rx_data(512)
                    elif what == "listen":
                        self._accept()
                    elif what == "wake":
                        self._on_wake()
                    else:
                        if events & selectors.EVENT_WRITE:
                            if what.flush():
                                self._watch(what, write=False)
                        if events & selectors.EVENT_READ:
                            self._on_readable(what)
                if self._pending_probe:
                    self._check_pending()
        except Exception:
            log.exception("receive thread failed")
            with self._cond:
                self._closing = True
                self._cond.notify_all()

    def _watch(self, conn: _Conn, write: bool) -> None:
        ev = selectors.EVENT_READ | (selectors.EVENT_WRITE if write else 0)
        try:
            self._sel.modify(conn.sock, ev, conn)
        except KeyError:
            self._sel.register(conn.sock, ev, conn)
            self._conns[conn.fd] = conn

    def _on_wake(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        with self._lock:
            regs = list(self._pending_reg)
            self._pending_reg.clear()
        for conn in regs:
            if not conn.closed:
                self._watch(conn, write=bool(conn.out))

    def _accept(self) -> None:
        while True:
            try:
                s, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            s.setblocking(False)
            _control_socket_options(s)
            self._watch(_Conn(s, None), write=False)

    def _close_conn(self, conn: _Conn, why: str | None = None) -> None:
        with conn.lock:
            conn.closed = True
        try:
            self._sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        self._conns.pop(conn.fd, None)
        conn.sock.close()
        if why:
            log.warning("rank %s: closed a control connection: %s", self.cfg.rank, why)

    def _on_readable(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._close_conn(conn, f"receive failed: {e.strerror or e}")
            return
        if not data:
            self._close_conn(conn)
            return
        bodies = conn.reader.feed(data)
        if bodies:
            self._rx_data(4096)  # data that arrived before this control message comes first
        for body in bodies:
            try:
                msg = C.decode(body)
            except MalformedPacket as e:
                self._drop(e.field, e.detail)
                continue
            self.totals["ctrl_rcvd"] += 1
            if msg.job_id != self.cfg.job_id:
                self._drop("control.job_id", f"job {msg.job_id}, expected {self.cfg.job_id}")
            elif msg.type == C.DESCRIBE:
                self._on_describe(conn, msg)
            elif msg.type == C.FORCE_STOP:
                self._on_force(conn, msg)
            else:
                self._on_reply(msg)
        if conn.reader.error is not None:
            e = conn.reader.error
            self._drop(e.field, e.detail)
            self._close_conn(conn, f"{e} (the stream cannot be resynchronised)")

    # data packets: the hot path -------------------------------------------------------------------

    def _rx_data(self, budget: int) -> None:
        """Read up to `budget` datagrams (non-blocking) and place them (PROBEs go to
        `_on_probe_packet`)."""
        sock = self.udp_rx
        buf = self._rxbuf if hasattr(self, "_rxbuf") else self._make_rxbuf()
        mv = self._rxmv
        unpack = HEADER.unpack_from
        vpp = self.vpp
        full = vpp * VALUE_BYTES
        job = self.cfg.job_id
        rx = self._rx
        peers = self.peers
        ver_bits, ver_hi = SLOTS["ver"].mask << VER_SHIFT, VERSION << VER_SHIFT
        phases = PHASE_NAMES
        per_packet = self.cfg.per_packet
        n_pk = n_by = 0
        for _ in range(budget):
            try:
                n = sock.recv_into(buf)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:  # e.g. ECONNREFUSED reported by ICMP: not fatal
                self._drop("socket_error", e.strerror or str(e))
                continue
            if n < HEADER_LEN:
                self._drop("length", f"{n} bytes, the DLCP header needs {HEADER_LEN}")
                continue
            vt, pdp, j, src, it, msg, _layer, mag, flags, seq, npk, off = unpack(buf, 0)
            if vt & ver_bits != ver_hi:
                self._drop("ver", f"version {vt >> VER_SHIFT}")
                continue
            typ = vt & TYPE_MASK
            if typ > TYPE_PROBE:
                self._drop("type", f"unknown type {typ}")
                continue
            phase = (pdp >> PHASE_SHIFT) & PHASE_MASK
            if phase not in phases:
                self._drop("phase", f"unknown phase {phase}")
                continue
            if j != job:
                self._drop("job_id", f"job {j}, expected {job}")
                continue
            if src not in peers:
                self._drop("src_rank", f"unknown sender rank {src}")
                continue
            if not 0 < npk <= C.MAX_MSG_PKTS or seq >= npk:
                self._drop("seq", f"seq {seq} of {npk} packets")
                continue
            if off != seq * vpp:
                self._drop("offset", f"{off} does not match seq {seq}")
                continue
            hl = HEADER_LEN + TELEMETRY_LEN if flags & FLAG_TELEMETRY else HEADER_LEN
            if typ == TYPE_PROBE:
                self._on_probe_packet((src, it, phase, msg), npk, seq, mv[:n], hl)
                continue
            plen = n - hl
            if plen != full and not (seq == npk - 1 and 0 < plen < full and plen % VALUE_BYTES == 0):
                self._drop("payload", f"{plen} payload bytes in packet {seq} of {npk}")
                continue
            key = (src, it, phase, msg)
            st = rx.get(key)
            if st is None:
                st = self._new_rx(key, npk)
                if st is None:
                    continue
            elif st.n_pkts != npk:
                self._drop("n_pkts", f"{npk}, message has {st.n_pkts}")
                continue
            if st.received[seq]:
                st.dups += 1
                self.totals["dups"] += 1
                continue
            st.bytes[off * VALUE_BYTES: off * VALUE_BYTES + plen] = mv[hl:n]
            st.received[seq] = 1
            st.n_received += 1
            n_pk += 1
            n_by += plen
            t = time.monotonic()
            if typ == TYPE_RETX:
                st.retx += 1
            else:
                st.n_orig += 1
                st.orig_last_mono = t
            if st.requested is not None and st.requested[seq]:
                st.req_left -= 1
                if typ != TYPE_RETX and not st.premature:
                    self._late_original(st)
            if st.first_byte_us is None:
                st.first_byte_us = now_us()
                st.first_mono = t
            st.last_mono = t
            if per_packet:
                st.recv_us[seq] = time.time_ns() // 1000
            if seq == npk - 1:
                st.last_len = plen // VALUE_BYTES
            if st.probe_round and st.desc is not None and self._round_complete(st):
                self._answer(st)
        self.totals["pkts_rcvd"] += n_pk
        self.totals["bytes_rcvd"] += n_by

    def _make_rxbuf(self):
        self._rxbuf = bytearray(65536)
        self._rxmv = memoryview(self._rxbuf)
        return self._rxbuf

    def _new_rx(self, key, n_pkts) -> _Rx | None:
        """State for a message seen for the first time, or None (counted) when it is stale/late."""
        if key in self._finished:
            self._drop("late", "packet of a finished message")
            return None
        if self._stale(key[1]):
            self._drop("stale_iter", f"iteration {key[1]}, current {self._current_iter}")
            return None
        st = _Rx(key, n_pkts, self.vpp, self.cfg.per_packet)
        self._rx[key] = st
        return st

    # control: receiver side -----------------------------------------------------------------------

    def _on_probe_packet(self, key, n_pkts: int, seq: int, frame, hl: int) -> None:
        """An in-band PROBE: answer it now if its round is complete, else once the message is quiet."""
        try:
            probe = unpack_probe(frame, hl)
        except MalformedPacket as e:
            self._drop(e.field, e.detail)
            return
        if seq:
            self._drop("probe.seq", f"PROBE with seq {seq}")
            return
        if key in self._finished:  # a re-probe that crossed our STOP: the STOP is on its way (TCP)
            self.totals["dup_probes"] += 1
            return
        st = self._rx.get(key)
        if st is None:
            st = self._new_rx(key, n_pkts)
            if st is None:
                return
        elif st.n_pkts != n_pkts:
            self._drop("n_pkts", f"{n_pkts}, message has {st.n_pkts}")
            return
        if probe.round <= st.answered or probe.round == st.probe_round:
            self.totals["dup_probes"] += 1  # a re-probe of a round already answered or waiting
            return
        st.rounds = max(st.rounds, probe.round)
        st.probe_round, st.probe_attempt = probe.round, probe.attempt
        st.probe_mono = time.monotonic()
        self._try_answer(st, st.probe_mono)

    def _on_describe(self, conn: _Conn, msg: C.Control) -> None:
        key = self._control_key(msg)
        if key is None:
            return
        if key in self._finished:
            self._drop("control.late", f"DESCRIBE of a finished message {key_text(key)}")
            return
        st = self._rx.get(key)
        if st is None:
            st = self._new_rx(key, msg.n_pkts)
            if st is None:
                return
        if st.n_pkts != msg.n_pkts:
            self._drop("control.n_pkts", f"{msg.n_pkts}, message has {st.n_pkts}")
            return
        if -(-msg.n_values // self.vpp) != msg.n_pkts or (
                st.last_len >= 0 and (msg.n_pkts - 1) * self.vpp + st.last_len != msg.n_values):
            self._drop("control.n_values", f"{msg.n_values} values do not fit {msg.n_pkts} packets")
            return
        st.desc, st.conn = msg, conn
        if st.probe_round:  # the PROBE came first (the DESCRIBE was delayed)
            self._try_answer(st, time.monotonic())

    def _on_force(self, conn: _Conn, msg: C.Control) -> None:
        key = self._control_key(msg)
        if key is None:
            return
        fin = self._finished.get(key)
        if fin is not None:  # FORCE_STOP crossed our STOP: same answer
            self._send_frame(conn, fin)
            return
        st = self._rx.get(key)
        if st is None or st.desc is None or st.n_pkts != msg.n_pkts:
            self._drop("control.sequence", f"FORCE_STOP for no described message {key_text(key)}")
            return
        st.rounds = max(st.rounds, msg.round)
        self._finish_rx(st, forced=True, conn=conn)

    def _control_key(self, msg: C.Control):
        """The message key of a control message addressed to this endpoint, or None (counted)."""
        if msg.dst_rank != self.cfg.rank:
            self._drop("control.dst_rank", f"addressed to rank {msg.dst_rank}, this is {self.cfg.rank}")
            return None
        if msg.src_rank not in self.peers:
            self._drop("control.src_rank", f"unknown sender rank {msg.src_rank}")
            return None
        return msg.key

    def _round_complete(self, st: _Rx) -> bool:
        """Every packet of the PROBE's round is in: nothing the answer could wait for."""
        return st.n_received == st.n_pkts or (st.requested is not None and st.req_left <= 0)

    def _try_answer(self, st: _Rx, now: float) -> None:
        if st.desc is not None and (self._round_complete(st) or self._quiet_enough(st, now)):
            self._answer(st)
        else:
            self._pending_probe.add(st.key)

    def _quiet_enough(self, st: _Rx, now: float) -> bool:
        """True when a PROBE whose round is incomplete may be answered: neither data of this message
        nor the PROBE itself arrived for the source's quiet time (or three mean gaps between the
        message's original packets, if they arrive slower than that). On one path the PROBE comes
        after its round's data, so the wait only covers data of slower paths (per-packet spraying)."""
        n = st.n_orig
        gap = (st.orig_last_mono - st.first_mono) / (n - 1) if n > 1 else 0.0
        quiet = min(QUIET_MAX_S, max(self._quiet_s.get(st.key[0], self._quiet_floor), 3 * gap))
        return now - max(st.last_mono, st.probe_mono) >= quiet

    def _late_original(self, st: _Rx) -> None:
        """A packet asked for in a BITMAP arrived as an original, not as RETX: it was in flight
        (on a slower path), so this source's quiet time was too short. Double it, once per BITMAP,
        like an RTO backing off."""
        st.premature = True
        st.late += 1
        src = st.key[0]
        q = self._quiet_s.get(src, self._quiet_floor)
        self._quiet_s[src] = min(QUIET_MAX_S, 2 * q)
        self.totals["premature_bitmaps"] += 1

    def _check_pending(self) -> None:
        now = time.monotonic()
        for key in list(self._pending_probe):
            st = self._rx.get(key)
            if st is None or not st.probe_round:
                self._pending_probe.discard(key)
            elif st.desc is not None and (self._round_complete(st) or self._quiet_enough(st, now)):
                self._answer(st)

    def _allowed_loss(self, st: _Rx, budget_ppm: int) -> int:
        n = st.n_pkts
        allowed = (budget_ppm * n) // C.PPM
        acc = self._iter_loss.get((st.key[0], st.key[1]), (0, 0))
        cap = int(np.floor(self.cfg.iter_budget * (acc[0] + n) + 1e-9)) - acc[1]
        return max(0, min(allowed, cap))

    def _answer(self, st: _Rx) -> None:
        """Answer the pending PROBE of `st` (its DESCRIBE is in): STOP or BITMAP."""
        self._pending_probe.discard(st.key)
        desc, conn = st.desc, st.conn
        recvd = np.frombuffer(st.received, dtype=np.uint8).astype(bool)
        missing = ~recvd
        n_missing = int(missing.sum())
        prot = missing & (desc.drop_prec == 0)
        n_prot = int(prot.sum())
        allowed = self._allowed_loss(st, desc.budget_ppm)
        if n_prot == 0 and n_missing <= allowed:
            self._finish_rx(st, forced=False, conn=conn)
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
        self._send_frame(conn, C.encode(C.Control(
            C.BITMAP, self.cfg.job_id, st.key[0], self.cfg.rank, st.key[2], st.key[1], st.key[3], st.n_pkts,
            round=rnd, attempt=st.probe_attempt, held_us=_held_us(st), missing=n_missing,
            protected_missing=n_prot, requested=request)))

    def _send_frame(self, conn: _Conn, frame: bytes) -> None:
        if conn.send(frame):
            self._watch(conn, write=True)
        self.totals["ctrl_sent"] += 1

    def _finish_rx(self, st: _Rx, forced: bool, conn: _Conn) -> None:
        probe = st.desc
        recvd = np.frombuffer(st.received, dtype=np.uint8).astype(bool)
        lost = int(st.n_pkts - st.n_received)
        prot_lost = int((~recvd & (probe.drop_prec == 0)).sum())
        key = st.key
        stop = C.encode(C.Control(C.STOP, self.cfg.job_id, key[0], self.cfg.rank, key[2], key[1], key[3],
                                  st.n_pkts, round=st.rounds, lost_pkts=lost, protected_lost=prot_lost,
                                  forced=forced, attempt=C.NO_ATTEMPT if forced else st.probe_attempt,
                                  held_us=0 if forced else _held_us(st)))
        self._send_frame(conn, stop)
        done_us = now_us()
        acc = self._iter_loss.setdefault((key[0], key[1]), [0, 0])
        acc[0] += st.n_pkts
        acc[1] += lost
        res = RecvResult(key[0], key[1], key[2], key[3], st.buf[: probe.n_values], recvd, probe.counts,
                         self.vpp, lost, prot_lost, forced, st.rounds)
        row = {"host": self.cfg.host, "rank": record_rank(self.cfg.rank), "side": "receiver",
               "peer": record_rank(key[0]), "iter": key[1], "msg_id": probe.rec_msg_id,
               "phase": PHASE_NAMES[key[2]], "step": probe.step, "layer_first": probe.layer_first,
               "layer_last": probe.layer_last, "prio": probe.prio, "bytes": probe.n_values * VALUE_BYTES,
               "pkts": st.n_pkts, "lost_pkts": lost, "retx_pkts": st.retx, "rounds": st.rounds,
               "forced": int(forced), "protected_lost": prot_lost, "start_us": st.start_us,
               "first_byte_us": st.first_byte_us, "complete_us": done_us, "mct_us": done_us - st.start_us}
        if forced:
            self.totals["forced_rcvd"] += 1
        self.totals["msgs_rcvd"] += 1
        if not st.late and key[0] in self._quiet_s:  # no premature answer: ease back to the floor
            self._quiet_s[key[0]] = max(self._quiet_floor, 0.9 * self._quiet_s[key[0]])
        with self._cond:
            self._rx.pop(key, None)
            self._pending_probe.discard(key)
            self._finished[key] = stop
            self._rx_done[key] = res
            self.message_rows.append(row)
            if st.recv_us is not None:
                self.packet_chunks.append({
                    "side": "receiver", "src_rank": record_rank(key[0]), "dst_rank": record_rank(self.cfg.rank),
                    "phase": PHASE_NAMES[key[2]], "iter": key[1], "msg_id": probe.rec_msg_id,
                    "seq": np.arange(st.n_pkts), "prio": np.full(st.n_pkts, probe.prio, np.uint8),
                    "drop_prec": probe.drop_prec, "send_us": np.full(st.n_pkts, -1), "recv_us": st.recv_us,
                    "retx": np.zeros(st.n_pkts, np.int8)})
            self._cond.notify_all()

    # control: sender side -------------------------------------------------------------------------

    def _on_reply(self, msg: C.Control) -> None:
        if msg.src_rank != self.cfg.rank:
            self._drop("control.src_rank", f"reply about rank {msg.src_rank}'s message, this is {self.cfg.rank}")
            return
        key = (msg.dst_rank, msg.iter, msg.phase, msg.msg_id)
        st = self._tx.get(key)
        if st is None and msg.type == C.STOP:
            self.drops["control.late"] += 1  # a second STOP (a re-probe or FORCE_STOP crossed it): harmless
            return
        if st is None or st.n_pkts != msg.n_pkts:
            self._drop("control.unexpected", f"{C.TYPE_NAMES[msg.type]} for no message in flight {key_text(key)}")
            return
        times = st.probe_times  # (the send thread replaces the list when the next round starts)
        if st.state == "probing" and msg.round == st.rounds and msg.attempt < len(times):
            rtt = time.monotonic() - times[msg.attempt] - msg.held_us / 1e6
            self._rtt_sample(st.dst, max(rtt, 0.0))
        if msg.type == C.STOP:
            self._finish_tx(st, msg.lost_pkts, msg.protected_lost, msg.forced)
            return
        # BITMAP
        if st.state != "probing" or msg.round != st.rounds:
            self._drop("control.unexpected", f"BITMAP of round {msg.round} while in round {st.rounds}")
            return
        st.missing, st.prot_missing = msg.missing, msg.protected_missing
        requested = np.flatnonzero(msg.requested)
        with self._cond:
            if st.rounds > self.cfg.r_max or not len(requested):
                log.warning("rank %s: message %s still misses %d packets (%d protected) after %d rounds: FORCE_STOP",
                            self.cfg.rank, key_text(key), msg.missing, msg.protected_missing, st.rounds)
                st.state = "forcing"
                st.deadline = time.monotonic() + self.cfg.deadline_ms / 1e3
                self._work.appendleft(("force", st, None))
            else:
                st.state = "retx"
                # protected first, then by priority (highest first), then by seq
                order = requested[np.lexsort((requested, -st.prio[requested].astype(np.int16),
                                              st.dp[requested] != 0))]
                self._work.appendleft(("retx", st, order))
            self._cond.notify_all()
