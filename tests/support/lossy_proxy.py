"""A proxy for transport tests: forwards DLCP datagrams (data and in-band PROBEs) to a target,
dropping, duplicating, reordering, delaying and queueing them as told, and relays the control
connection. Real sockets on 127.0.0.1, no root.

Ordering: before relaying control bytes toward the receiver, the proxy takes in every datagram it
has received (loopback delivery is synchronous, so everything the sender sent before a control
message is already in the proxy's socket) and forwards it unless a delay line or queue holds it.
Control bytes are never held: like priority-7 control traffic they overtake queued data.

`rate_pps` turns the proxy into a slow switch port: datagrams wait in 8 FIFO queues by their DLCP
priority and leave at `rate_pps`, highest priority first (strict priority, as the built-in switch).

`drop_control(frame) -> bool` removes whole control frames from the relayed streams (either
direction); `frame` has `msg` (the decoded control message), `type_name` and `index` (0 for the first
frame of that type about that message), like dlcp.transport.virtual.VFrame, so the same predicates
serve both.
"""

from __future__ import annotations

import collections
import heapq
import selectors
import socket
import threading
import time
from dataclasses import dataclass

import numpy as np

from dlcp.wire import control_frames as C
from dlcp.wire import header as H


@dataclass
class Pkt:
    type: int
    seq: int
    n_pkts: int
    msg_id: int
    iter: int
    phase: int
    src: int
    protected: bool
    transmission: int  # 0 = first time this proxy sees this (src, iter, phase, msg, seq) (PROBEs apart)
    prio: int = 0

    @property
    def probe(self) -> bool:
        return self.type == H.TYPE_PROBE


@dataclass
class Frame:
    msg: C.Control
    index: int

    @property
    def type_name(self) -> str:
        return C.TYPE_NAMES[self.msg.type]


class LossyProxy:
    """`drop(pkt) -> bool` decides per data packet and `drop_probe(pkt) -> bool` per PROBE; `loss`
    adds seeded random loss (data and PROBEs), `dup` duplicates a fraction, `reorder` shuffles windows
    of that many packets, `hold_ms` delays every packet (a queue that the control channel overtakes),
    `data_lag_ms` delays data packets but not PROBEs (data sprayed onto a slower path), `rate_pps`
    queues them by priority (a slow strict-priority port)."""

    def __init__(
        self,
        target: tuple[str, int],
        control_target: tuple[str, int] | None = None,
        drop=None,
        loss: float = 0.0,
        dup: float = 0.0,
        reorder: int = 0,
        seed: int = 0,
        hold_ms: float = 0.0,
        drop_probe=None,
        data_lag_ms: float = 0.0,
        rate_pps: float = 0.0,
        drop_control=None,
    ):
        self.target = target
        self.control_target = control_target
        self.drop = drop
        self.drop_probe = drop_probe
        self.drop_control = drop_control
        self.frames_seen: collections.Counter = collections.Counter()
        self.control_dropped: list[Frame] = []
        self.loss, self.dup, self.reorder = loss, dup, reorder
        self.hold_s = hold_ms / 1e3
        self.lag_s = data_lag_ms / 1e3
        self.held: list = []  # heap of (due, n, datagram)
        self._n_held = 0
        self.rate_pps = rate_pps
        self.queues = [collections.deque() for _ in range(8)]
        self._next_tx = 0.0
        self.arrivals: list[Pkt] = []  # what left the proxy toward the target, in order (rate_pps only)
        self.window: list[bytes] = []
        self.rng = np.random.default_rng(seed)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE (root)
        except OSError:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.setblocking(False)
        self.port = self.sock.getsockname()[1]
        self.out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.listener.setblocking(False)
        self.control_port = self.listener.getsockname()[1]
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.sock, selectors.EVENT_READ, ("udp", None))
        self.sel.register(self.listener, selectors.EVENT_READ, ("listen", None))
        self.seen: dict = {}
        self.dropped: list[Pkt] = []
        self.forwarded = 0
        self.duplicated = 0
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _classify(self, data: bytes) -> Pkt | None:
        if len(data) < H.HEADER_LEN:
            return None
        h = H.header_fields(np.frombuffer(data[: H.HEADER_LEN], np.uint8))
        typ, phase, prio = (int(H.field_values(h, name)[0]) for name in ("type", "phase", "prio"))
        src, it, msg, flags, seq, n_pkts = (
            int(h[name][0]) for name in ("src_rank", "iter", "msg_id", "flags", "seq", "n_pkts")
        )
        probe = typ == H.TYPE_PROBE
        k = (src, it, phase, msg, seq, probe)
        t = self.seen.get(k, 0)
        self.seen[k] = t + 1
        return Pkt(typ, seq, n_pkts, msg, it, phase, src, bool(flags & H.FLAG_PROTECTED), t, prio)

    def _run(self) -> None:
        while not self._stop:
            busy = self.held or any(self.queues)
            for key, _ in self.sel.select(0.0005 if busy else 0.002):
                kind, peer = key.data
                if kind == "udp":
                    self._drain_udp()
                elif kind == "listen":
                    self._accept()
                else:
                    self._relay(key.fileobj, peer, toward_receiver=(kind == "from_sender"))
            self._flush()
            self._release()

    def _drain_udp(self) -> None:
        while True:
            try:
                data = self.sock.recv(65536)
            except BlockingIOError:
                break
            p = self._classify(data)
            rule = None if p is None else (self.drop_probe if p.probe else self.drop)
            if p is not None and ((rule is not None and rule(p)) or (self.loss and self.rng.random() < self.loss)):
                self.dropped.append(p)
                continue
            copies = 2 if self.dup and self.rng.random() < self.dup else 1
            self.duplicated += copies - 1
            self.window.extend([(data, p)] * copies)
            if len(self.window) >= max(1, self.reorder):
                self._flush()

    def _flush(self) -> None:
        if self.reorder > 1:
            self.rng.shuffle(self.window)
        now = time.monotonic()
        for d, p in self.window:
            delay = self.hold_s + (self.lag_s if p is not None and not p.probe else 0.0)
            if delay:
                self._n_held += 1
                heapq.heappush(self.held, (now + delay, self._n_held, d, p))
            else:
                self._enqueue(d, p)
        self.window.clear()

    def _enqueue(self, d: bytes, p: Pkt | None) -> None:
        if self.rate_pps:
            self.queues[p.prio if p is not None else 0].append((d, p))
        else:
            self.out.sendto(d, self.target)
            self.forwarded += 1

    def _release(self) -> None:
        now = time.monotonic()
        while self.held and self.held[0][0] <= now:
            _, _, d, p = heapq.heappop(self.held)
            self._enqueue(d, p)
        if not self.rate_pps:
            return
        if now - self._next_tx > 0.002:
            self._next_tx = now  # an idle port earns no credit
        while self._next_tx <= now:
            q = next((q for q in reversed(self.queues) if q), None)
            if q is None:
                return
            d, p = q.popleft()
            self.out.sendto(d, self.target)
            self.forwarded += 1
            if p is not None:
                self.arrivals.append(p)
            self._next_tx += 1.0 / self.rate_pps

    def _accept(self) -> None:
        try:
            a, _ = self.listener.accept()
        except BlockingIOError:
            return
        b = socket.create_connection(self.control_target)
        a.setblocking(True)
        b.setblocking(True)
        self.sel.register(a, selectors.EVENT_READ, ("from_sender", (b, C.FrameReader())))
        self.sel.register(b, selectors.EVENT_READ, ("from_receiver", (a, C.FrameReader())))

    def _relay(self, src: socket.socket, peer, toward_receiver: bool) -> None:
        dst, reader = peer
        try:
            data = src.recv(65536)
        except OSError:
            data = b""
        if not data:
            for s in (src, dst):
                try:
                    self.sel.unregister(s)
                except (KeyError, ValueError):
                    pass
                s.close()
            return
        if toward_receiver:  # data sent before this control message goes first
            self._drain_udp()
            self._flush()
        if self.drop_control is None:
            dst.sendall(data)
            return
        for body in reader.feed(data):  # frame by frame, so whole frames can go missing
            msg = C.decode(body)
            ident = (msg.type, msg.key)
            fr = Frame(msg, self.frames_seen[ident])
            self.frames_seen[ident] += 1
            if self.drop_control(fr):
                self.control_dropped.append(fr)
                continue
            dst.sendall(C.LEN.pack(len(body)) + body)

    def close(self) -> None:
        self._stop = True
        self._thread.join(timeout=2)
        for key in list(self.sel.get_map().values()):
            key.fileobj.close()
        self.sel.close()
        self.out.close()
