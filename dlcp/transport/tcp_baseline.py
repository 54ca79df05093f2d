"""Plain TCP for messages: the second baseline next to the `reliable` DLCP mode.

Same interface as `dlcp.transport.udp_driver.UdpTransport` (send / recv / advance / stats / records), so the
collectives and agents run unchanged with `dlcp.transport = "tcp"`. Each message goes as one frame on
a TCP connection per destination (to the peer's data port, TCP), with the IP TOS of the message's
first packet class; the receiver acknowledges each complete message, and the sender's completion
time is that acknowledgement. Nothing is lost, so loss budgets do not apply.

Frame: `HDR` (below) | counts (counts_len bytes) | n_values little-endian fp32.
"""

from __future__ import annotations

import collections
import logging
import socket
import struct
import threading

import numpy as np

from dlcp.records import now_us
from dlcp.transport.api import Peer, RecvResult, SendInfo, SendResult, TransportConfig, TransportError, key_text
from dlcp.transport.record_rows import message_row
from dlcp.transport.sockets import connect_retrying, set_socket_buffer
from dlcp.transport.sync import SendHandle, wait_for_done
from dlcp.transport.threadtime import set_realtime
from dlcp.wire.control_frames import MAX_MSG_PKTS, PS_RANK
from dlcp.wire.header import PHASE_NAMES, VALUE_BYTES, field_values, header_fields, tos_of
from dlcp.wire.tagging import n_packets

log = logging.getLogger("dlcp.transport.tcp_baseline")

TCP_VERSION = 1
KIND_MSG, KIND_ACK = 1, 2
# ver, kind, job, src, dst, phase, iter, msg_id, rec_msg_id, layer_first, layer_last, step, prio,
# n_values, counts_len
HDR = struct.Struct("!BBBBBBHHHHHBBII")


def _recv_exact(sock: socket.socket, view: memoryview) -> bool:
    """Fill `view`; False on a clean EOF before the first byte."""
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            if got == 0:
                return False
            raise ConnectionError(f"connection closed after {got} of {len(view)} bytes")
        got += n
    return True


class TcpTransport:
    def __init__(self, config: TransportConfig, peers):
        self.cfg = config
        self.vpp = config.values_per_pkt
        self.peers = {p.rank: p for p in (peers.values() if isinstance(peers, dict) else peers)}
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._done: dict = {}
        self._pending: dict = {}  # key -> (_Out, info, batch, start_us) awaiting ACK
        self._out: dict[int, socket.socket] = {}
        self._queue: collections.deque = collections.deque()
        self._closing = False
        self.message_rows: list[dict] = []
        self.packet_chunks: list[dict] = []
        self.drops: collections.Counter = collections.Counter()
        self.totals: collections.Counter[str] = collections.Counter()
        self._threads: list[threading.Thread] = []
        self._socks: list[socket.socket] = []
        try:
            self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.listener.bind((config.ip, config.data_port))
            self.listener.listen(64)
        except OSError as e:
            self.listener.close()
            raise TransportError(
                f"cannot open TCP data port {config.ip}:{config.data_port}: {e.strerror or e}"
            ) from None
        self.data_port = self.listener.getsockname()[1]
        self.control_port = self.data_port
        self._spawn(self._accept_loop, "tcp-accept")
        self._spawn(self._send_loop, "tcp-send")

    def _spawn(self, fn, name, *args) -> None:
        t = threading.Thread(target=self._run_thread, args=(fn, name, *args), name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def _run_thread(self, fn, name, *args) -> None:
        """A thread of this transport: at the configured priority, as the bounded-loss driver's."""
        if self.cfg.thread_rt_priority:
            set_realtime(self.cfg.thread_rt_priority, f"rank {self.cfg.rank}: {name} thread")
        fn(*args)

    # --- API (as Transport) -----------------------------------------------------------------------

    def add_peer(self, peer: Peer) -> None:
        self.peers = {**self.peers, peer.rank: peer}

    def connect(self, ranks=None, timeout: float | None = None) -> None:
        for r in self.peers if ranks is None else ranks:
            self._conn_to(r, timeout)

    def send(self, dst: int, batch, info: SendInfo) -> SendHandle:
        if dst not in self.peers:
            raise TransportError(f"send to unknown rank {dst}")
        f = header_fields(batch.headers[:1])
        key = (dst, int(f["iter"][0]), int(field_values(f, "phase")[0]), int(f["msg_id"][0]))
        handle = SendHandle(key)
        with self._cond:
            if key in self._pending:
                raise TransportError(f"message {key_text(key)} is already in flight")
            self._pending[key] = [handle, info, batch, 0]
            self._queue.append(key)
            self._cond.notify_all()
        return handle

    def recv(self, src: int, iteration: int, phase: int, msg_id: int, timeout: float | None = None) -> RecvResult:
        key = (src, iteration & 0xFFFF, phase, msg_id)
        return wait_for_done(
            self._cond, self._done, key, timeout, lambda: self._closing, lambda: "not the whole message"
        )

    def set_budget(self, budget: float | None) -> None:
        """Nothing to do: TCP delivers every byte, a budget has nothing to allow."""

    def advance(self, iteration: int) -> None:
        cur = iteration & 0xFFFF
        with self._lock:
            for k in [k for k in self._done if 2 < ((cur - k[1]) & 0xFFFF) < 0x8000]:
                del self._done[k]

    def stats(self) -> dict:
        with self._lock:
            return {
                "packets_sent": 0,
                "bytes_sent": self.totals["bytes_sent"],
                "packets_retransmitted": 0,
                "packets_received": 0,
                "bytes_received": self.totals["bytes_rcvd"],
                "messages_sent": self.totals["msgs_sent"],
                "messages_received": self.totals["msgs_rcvd"],
                "forced_sent": 0,
                "forced_received": 0,
                "drops": dict(self.drops),
                "send_impl": "tcp",
            }

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        for s in [self.listener, *self._out.values(), *self._socks]:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        for t in self._threads:
            t.join(timeout=2)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- sending ------------------------------------------------------------------------------------

    def _conn_to(self, dst: int, timeout: float | None = None) -> socket.socket:
        s = self._out.get(dst)
        if s is not None:
            return s
        peer = self.peers[dst]
        timeout = self.cfg.connect_timeout_s if timeout is None else timeout
        s = connect_retrying(
            self.cfg.ip, (peer.ip, peer.data_port), timeout, lambda: self._closing, f"TCP connection to rank {dst}"
        )
        s.settimeout(None)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        set_socket_buffer(s, socket.SO_SNDBUF, self.cfg.sndbuf_bytes)
        with self._lock:
            if dst in self._out:
                s.close()
                return self._out[dst]
            self._out[dst] = s
        self._spawn(self._ack_loop, f"tcp-ack-{dst}", s)
        return s

    def _send_loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if self._closing:
                    return
                key = self._queue.popleft()
                entry = self._pending[key]
            handle, info, batch, _ = entry
            dst = key[0]
            f = header_fields(batch.headers[:1])
            prio = int(field_values(f, "prio")[0])
            counts = b"" if info.counts is None else np.asarray(info.counts, np.uint8).tobytes()
            hdr = HDR.pack(
                TCP_VERSION,
                KIND_MSG,
                self.cfg.job_id,
                self.cfg.rank,
                dst,
                key[2],
                key[1],
                key[3],
                info.rec_msg_id,
                info.layer_first,
                info.layer_last,
                info.step,
                prio,
                batch.values.size,
                len(counts),
            )
            entry[3] = now_us()
            try:
                s = self._conn_to(dst)
                s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos_of(prio, 0))
                s.sendall(hdr + counts)
                s.sendall(memoryview(batch.values).cast("B"))
            except (OSError, TransportError) as e:
                self._finish(key, error=f"send failed: {e}")
                continue
            self.totals["bytes_sent"] += batch.values.size * VALUE_BYTES

    def _ack_loop(self, s: socket.socket) -> None:
        buf = bytearray(HDR.size)
        try:
            while _recv_exact(s, memoryview(buf)):
                ver, kind, job, src, dst, phase, it, msg = HDR.unpack(buf)[:8]
                if ver != TCP_VERSION or kind != KIND_ACK:
                    self.drops["tcp.ack"] += 1
                    continue
                self._finish((dst, it, phase, msg))
        except OSError:
            pass

    def _finish(self, key, error: str | None = None) -> None:
        with self._cond:
            entry = self._pending.pop(key, None)
        if entry is None:
            self.drops["tcp.unexpected_ack"] += 1
            return
        handle, info, batch, start = entry
        done = now_us()
        n_pkts = n_packets(batch.values.size, self.vpp)
        res = SendResult(0, 0, 0, 1, error is not None, start or done, done, error)
        f = header_fields(batch.headers[:1])
        with self._lock:
            self.totals["msgs_sent"] += 1
            self.message_rows.append(
                _row(
                    self.cfg,
                    "sender",
                    key[0],
                    key,
                    info.rec_msg_id,
                    info.step,
                    info.layer_first,
                    info.layer_last,
                    int(field_values(f, "prio")[0]),
                    batch.values.size,
                    n_pkts,
                    res.start_us,
                    None,
                    done,
                )
            )
        handle._finish(res)

    # --- receiving ----------------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._closing:
            try:
                s, _ = self.listener.accept()
            except OSError:
                return
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            set_socket_buffer(s, socket.SO_RCVBUF, self.cfg.rcvbuf_bytes)
            with self._lock:
                self._socks.append(s)
            self._spawn(self._recv_loop, "tcp-recv", s)

    def _recv_loop(self, s: socket.socket) -> None:
        hdr = bytearray(HDR.size)
        try:
            while _recv_exact(s, memoryview(hdr)):
                start = now_us()
                (ver, kind, job, src, dst, phase, it, msg, rec, lf, ll, step, prio, n_values, counts_len) = HDR.unpack(
                    hdr
                )
                bad = (
                    "version"
                    if ver != TCP_VERSION
                    else "kind"
                    if kind != KIND_MSG
                    else "job_id"
                    if job != self.cfg.job_id
                    else "dst_rank"
                    if dst != self.cfg.rank
                    else "phase"
                    if phase not in PHASE_NAMES
                    else "n_values"
                    if not 0 < n_values <= MAX_MSG_PKTS * self.vpp
                    else "counts_len"
                    if counts_len not in (0, n_packets(n_values, self.vpp))
                    else None
                )
                if bad:  # a TCP stream cannot be resynchronised: count, say so, close
                    self.drops[f"tcp.{bad}"] += 1
                    log.warning("rank %s: malformed TCP message (%s): closing the connection", self.cfg.rank, bad)
                    return
                counts = None
                if counts_len:
                    cb = bytearray(counts_len)
                    _recv_exact(s, memoryview(cb))
                    counts = np.frombuffer(cb, np.uint8).copy()
                values = np.empty(n_values, np.float32)
                if not _recv_exact(s, values.data.cast("B")):
                    raise ConnectionError("connection closed inside a message")
                done = now_us()
                key = (src, it, phase, msg)
                n_pkts = n_packets(n_values, self.vpp)
                res = RecvResult(src, it, phase, msg, values, np.ones(n_pkts, bool), counts, self.vpp, 0, 0, False, 1)
                s.sendall(
                    HDR.pack(TCP_VERSION, KIND_ACK, job, src, dst, phase, it, msg, rec, lf, ll, step, prio, n_values, 0)
                )
                with self._cond:
                    self.totals["msgs_rcvd"] += 1
                    self.totals["bytes_rcvd"] += n_values * VALUE_BYTES
                    self.message_rows.append(
                        _row(
                            self.cfg,
                            "receiver",
                            src,
                            key,
                            rec,
                            step,
                            lf,
                            ll,
                            prio,
                            n_values,
                            n_pkts,
                            start,
                            start,
                            done,
                        )
                    )
                    self._done[key] = res
                    self._cond.notify_all()
        except (OSError, ConnectionError) as e:
            if not self._closing:
                log.warning("rank %s: TCP data connection failed: %s", self.cfg.rank, e)


def _row(cfg, side, peer, key, rec_msg_id, step, lf, ll, prio, n_values, n_pkts, start, first, done) -> dict:
    return message_row(
        cfg.host,
        cfg.rank,
        side,
        peer,
        key,
        rec_msg_id=rec_msg_id,
        step=step,
        layer_first=lf,
        layer_last=ll,
        prio=prio,
        nbytes=n_values * VALUE_BYTES,
        pkts=n_pkts,
        lost_pkts=0,
        retx_pkts=0,
        rounds=1,
        forced=False,
        protected_lost=0,
        start_us=start,
        first_byte_us=first,
        complete_us=done,
    )


__all__ = ["PS_RANK", "TcpTransport"]
