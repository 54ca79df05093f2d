"""A virtual-time driver for the protocol core: endpoints on a tiny deterministic network.

No sockets, threads or sleeps: a discrete-event loop moves real DLCP datagrams (the bytes the UDP
driver would send) and control frames between `core.Endpoint`s in simulated seconds. Same seed,
same run. Tests use it to put the protocol through loss, reordering, duplication, delay, lost
PROBEs and answers, and a congested bottleneck, exactly and fast.

The network: each host sends through its own uplink (`host_mbps`, unbounded FIFO: the socket buffer
and NIC queue of a host that blocks rather than drops) into one switch, which forwards every packet
to the port of its destination host. A port has 8 queues drained at `link_mbps` (frame bits:
payload + 66 bytes of headers) in the order of the switch's queue discipline (`queueing`: strict
priority unless told otherwise), admission as the DLCP switch does it (drop precedence c > 0
dropped early once the queue holds k_c packets, everything at `qmax`; policy "fifo": one queue,
tail drop only), and marks CE on ECN-capable packets admitted while their queue holds `ecn_k` or
more (docs/pipeline.md): the switch's own rules and disciplines (dlcp/queueing). After the queue: `delay_us` of propagation plus up to `jitter_us` of random
extra delay (which reorders packets). Faults, applied as a packet enters the switch: `loss`
(random), `dup` (random duplication), the predicate `drop(pkt)` (a `VPacket`) and `delay(pkt)`,
extra seconds for that packet on the wire (a slower path, a queue elsewhere). Control frames
travel in order per pair of hosts after `control_delay_us`, as priority 7 overtakes data queues;
`drop_control(frame)` (a `VFrame`) loses one on purpose, `control_delay(frame)` holds one back
(and, the channel being a TCP stream, the frames behind it).

A host added with `rx_path="c"` receives through the C receive path the UDP driver and the ns-3
hosts use (dlcp/transport/rx_mirror.py), so the protocol scenarios hold it to the same results.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dlcp.queueing.admission import ADMIT, EARLY_DROP, admit, marks_ce
from dlcp.queueing.registry import N_QUEUES, QueueingConfig, Scheduler, configure
from dlcp.transport.api import SendInfo, TransportConfig
from dlcp.transport.core.endpoint import Endpoint
from dlcp.transport.core.outputs import DataSend, FrameSend, ProbeSend, RecvDone, SendDone, data_datagrams
from dlcp.transport.rx_mirror import RX_DECIDE, RX_TAKEN
from dlcp.wire import control_frames as C
from dlcp.wire.header import (
    ECN_CE,
    ECN_MASK,
    HEADER_LEN,
    TELEMETRY_LEN,
    TYPE_PROBE,
    VALUE_BYTES,
    unpack_from,
    unpack_probe,
)

FRAME_OVERHEAD = 14 + 20 + 8  # Ethernet + IPv4 + UDP around a DLCP datagram


@dataclass(slots=True)
class VPacket:
    """What the `drop` predicate sees of a datagram entering the switch."""

    src: int
    dst: int
    type: int
    seq: int
    msg_id: int
    iter: int
    phase: int
    prio: int
    drop_prec: int
    transmission: int  # 0 the first time this (src, dst, iter, phase, msg, seq) enters the switch
    probe_round: int = 0  # PROBEs: round and attempt
    probe_attempt: int = 0

    @property
    def probe(self) -> bool:
        return self.type == TYPE_PROBE


@dataclass(slots=True)
class VFrame:
    """What the `drop_control` predicate sees of a control frame."""

    src: int
    dst: int
    msg: C.Control
    index: int  # 0 for the first frame of this type about this message, 1 for the next, ...

    @property
    def type_name(self) -> str:
        return C.TYPE_NAMES[self.msg.type]


@dataclass
class SwitchModel:
    """The switch every packet crosses (see the module docstring)."""

    link_mbps: float | None = None  # drain rate of each port; None = no limit
    policy: str = "dlcp"  # "dlcp": 8 priorities, early drop by color; "fifo": one queue, tail drop
    qmax: int = 64
    k: tuple[int, int, int] = (48, 32, 16)  # early-drop thresholds of drop precedence 1, 2, 3
    ecn_k: int | None = None  # CE mark at this occupancy (None: never)
    delay_us: float = 0.0
    jitter_us: float = 0.0
    queueing: QueueingConfig = field(default_factory=lambda: configure("strict"))  # every port's discipline


@dataclass
class Faults:
    loss: float = 0.0
    dup: float = 0.0
    drop: Callable[[VPacket], bool] | None = None
    delay: Callable[[VPacket], float] | None = None  # extra seconds
    drop_control: Callable[[VFrame], bool] | None = None
    control_delay: Callable[[VFrame], float] | None = None  # extra seconds


@dataclass
class _Pkt:
    data: bytes
    tos: int
    src: int
    dst: int
    prio: int
    color: int
    qid: int = 0
    extra_s: float = 0.0


@dataclass
class _Port:
    scheduler: Scheduler
    queues: list = field(default_factory=lambda: [collections.deque() for _ in range(N_QUEUES)])
    busy: bool = False
    backlog: int = 0


def _frame_bytes(pkt: _Pkt) -> int:
    return len(pkt.data) + FRAME_OVERHEAD


class VirtualHost:
    """One endpoint on the network: the core and what came out of it. `rx_path`: "python" (every
    datagram through the core) or a mode of dlcp/transport/rx_mirror.py (the C receive path)."""

    def __init__(self, net: VirtualNetwork, cfg: TransportConfig, rx_path: str = "python"):
        self.net = net
        self.rank = cfg.rank
        self.endpoint = Endpoint(cfg, wall_offset_s=0.0)
        self.rxpath: Any = None  # the extension's RxPath
        self.mirror: Any = None  # its RxMirror
        if rx_path != "python":
            from dlcp.transport.rx_mirror import RxMirror, load_rxpath  # the extension, only when asked for

            self.rxpath = load_rxpath().RxPath()
            self.mirror = RxMirror(self.endpoint.receiver, self.rxpath, rx_path)
        self.sent: dict = {}  # key -> SendResult
        self.received: dict = {}  # key -> RecvResult
        self.uplink: collections.deque = collections.deque()
        self.uplink_busy = False
        self.timer_at = math.inf
        self.spins = 0

    def send(self, dst: int, batch, info: SendInfo) -> tuple:
        key = self.endpoint.send(dst, batch, info, self.net.now)
        self.net._step(self)
        return key

    def add_peer(self, rank: int) -> None:
        self.endpoint.receiver.add_peer(rank)

    def take(self) -> None:
        """What the C receive path counted, into the receiver (before the receiver does anything)."""
        if self.mirror is not None:
            self.mirror.take()

    def publish(self, scan: bool = False) -> None:
        if self.mirror is not None:
            self.mirror.publish(scan)

    def advance(self, iteration: int) -> None:
        self.take()
        self.endpoint.receiver.advance(iteration)
        self.publish()

    def stats(self) -> dict:
        self.take()
        return self.endpoint.stats()

    @property
    def rows(self) -> list[dict]:
        return self.endpoint.sender.rows + self.endpoint.receiver.rows


class VirtualNetwork:
    def __init__(
        self,
        switch: SwitchModel | None = None,
        faults: Faults | None = None,
        host_mbps: float | None = None,
        control_delay_us: float = 20.0,
        seed: int = 0,
    ):
        self.switch = switch or SwitchModel()
        self.faults = faults or Faults()
        self.host_mbps = host_mbps
        self.control_delay_s = control_delay_us / 1e6
        self.rng = random.Random(seed)
        self.now = 0.0
        self.hosts: dict[int, VirtualHost] = {}
        self._events: list = []
        self._seq = itertools.count()
        self._ports: dict[int, _Port] = {}
        self._occupancy: collections.Counter = collections.Counter()  # (port, qid) -> packets
        self._seen: collections.Counter = collections.Counter()  # data packet identity -> times seen
        self._frames_seen: collections.Counter = collections.Counter()
        self._control_at: dict = {}  # (src, dst) -> when the last frame on that channel arrives
        # tail_drops, early_drops, ce_marked, fault_drops, ...
        self.counters: collections.Counter[str] = collections.Counter()

    def add_host(self, cfg: TransportConfig, rx_path: str = "python") -> VirtualHost:
        h = VirtualHost(self, cfg, rx_path)
        for other in self.hosts.values():
            other.add_peer(h.rank)
            h.add_peer(other.rank)
        self.hosts[h.rank] = h
        return h

    # --- the event loop ------------------------------------------------------------------------

    def run(self, until=None, max_time: float = 600.0) -> None:
        """Process events until `until()` is true, nothing is left to do, or `max_time` (simulated s)."""
        while self._events:
            if until is not None and until():
                return
            t, _, fn, args = heapq.heappop(self._events)
            if t > max_time:
                raise TimeoutError(f"virtual network still busy after {max_time} simulated seconds")
            self.now = max(self.now, t)
            fn(*args)

    def _at(self, t: float, fn, *args) -> None:
        heapq.heappush(self._events, (t, next(self._seq), fn, args))

    def _step(self, h: VirtualHost) -> None:
        """Let an endpoint act on what happened: timers, transmissions, frames, completions."""
        ep, now = h.endpoint, self.now
        h.take()
        if ep.next_timer() <= now:
            ep.on_timer(now)
        while True:
            tx = ep.poll_transmit(now)
            if tx is None:
                break
            self._transmit(h, tx)
        for out in ep.take_outputs():
            if isinstance(out, FrameSend):
                self._frame(h.rank, out)
            elif isinstance(out, SendDone):
                h.sent[out.key] = out.result
            elif isinstance(out, RecvDone):
                h.received[out.key] = out.result
        h.publish(scan=True)
        t = ep.next_timer()
        if not math.isfinite(t):
            h.timer_at = math.inf
        elif max(t, now) != h.timer_at:
            h.timer_at = max(t, now)
            self._at(h.timer_at, self._timer, h, h.timer_at)

    def _timer(self, h: VirtualHost, t: float) -> None:
        if h.timer_at != t:
            return  # a newer timer replaced this one
        h.timer_at = math.inf
        self._step(h)
        if h.timer_at == t:  # due again at once: the core's timer made no progress
            h.spins += 1
            if h.spins > 1000:
                raise RuntimeError(f"rank {h.rank}: timer at {t} s keeps firing without progress")
        else:
            h.spins = 0

    # --- data path -----------------------------------------------------------------------------

    def _transmit(self, h: VirtualHost, tx) -> None:
        if isinstance(tx, ProbeSend):
            h.uplink.append(_Pkt(tx.data, tx.tos, h.rank, tx.dst, 0, 0))
        else:
            self._data(h, tx)
        if not h.uplink_busy:
            self._uplink_next(h)

    def _data(self, h: VirtualHost, tx: DataSend) -> None:
        for data, tos in data_datagrams(tx):
            h.uplink.append(_Pkt(data, tos, h.rank, tx.dst, 0, 0))

    def _uplink_next(self, h: VirtualHost) -> None:
        if not h.uplink:
            h.uplink_busy = False
            return
        h.uplink_busy = True
        pkt = h.uplink.popleft()
        dt = 0.0 if not self.host_mbps else (len(pkt.data) + FRAME_OVERHEAD) * 8 / (self.host_mbps * 1e6)
        self._at(self.now + dt, self._uplink_done, h, pkt)

    def _uplink_done(self, h: VirtualHost, pkt: _Pkt) -> None:
        self._ingress(pkt)
        self._uplink_next(h)

    def _ingress(self, pkt: _Pkt) -> None:
        """The switch: faults, classification, admission, ECN, enqueue."""
        hdr = unpack_from(pkt.data)
        f = self.faults
        ident = (pkt.src, pkt.dst, hdr.iter, hdr.phase, hdr.msg_id, hdr.seq, hdr.type == TYPE_PROBE)
        seen = self._seen[ident]
        self._seen[ident] += 1
        extra = 0.0
        if f.drop is not None or f.delay is not None:
            vp = VPacket(
                pkt.src, pkt.dst, hdr.type, hdr.seq, hdr.msg_id, hdr.iter, hdr.phase, hdr.prio, hdr.drop_prec, seen
            )
            if vp.probe:
                p = unpack_probe(pkt.data, HEADER_LEN + (TELEMETRY_LEN if hdr.has_telemetry else 0))
                vp.probe_round, vp.probe_attempt = p.round, p.attempt
            if f.drop is not None and f.drop(vp):
                self.counters["fault_drops"] += 1
                return
            if f.delay is not None:
                extra = float(f.delay(vp))
        if f.loss and self.rng.random() < f.loss:
            self.counters["fault_drops"] += 1
            return
        copies = 2 if f.dup and self.rng.random() < f.dup else 1
        self.counters["duplicated"] += copies - 1
        sw = self.switch
        qid, color = (0, 0) if sw.policy == "fifo" else (hdr.prio, hdr.drop_prec)
        for _ in range(copies):
            occ = self._occupancy[(pkt.dst, qid)]
            verdict = admit(occ, color, sw.qmax, *sw.k)
            if verdict != ADMIT:
                self.counters["early_drops" if verdict == EARLY_DROP else "tail_drops"] += 1
                continue
            tos = pkt.tos
            if sw.ecn_k is not None and marks_ce(tos, occ, sw.ecn_k):
                tos = (tos & ~ECN_MASK) | ECN_CE
                self.counters["ce_marked"] += 1
            self._occupancy[(pkt.dst, qid)] = occ + 1
            q = _Pkt(pkt.data, tos, pkt.src, pkt.dst, hdr.prio, color, qid, extra)
            port = self._port(pkt.dst)
            port.queues[qid].append(q)
            port.backlog += 1
            if not port.busy:
                self._egress_next(pkt.dst)

    def _port(self, dst: int) -> _Port:
        port = self._ports.get(dst)
        if port is None:
            port = self._ports[dst] = _Port(self.switch.queueing.scheduler())
        return port

    def _egress_next(self, dst: int) -> None:
        port = self._port(dst)
        if not port.backlog:
            port.busy = False
            return
        port.busy = True
        pkt = port.queues[port.scheduler.pick(port.queues, _frame_bytes)].popleft()
        port.backlog -= 1
        rate = self.switch.link_mbps
        dt = 0.0 if not rate else _frame_bytes(pkt) * 8 / (rate * 1e6)
        self._at(self.now + dt, self._egress_done, dst, pkt)

    def _egress_done(self, dst: int, pkt: _Pkt) -> None:
        self._occupancy[(dst, pkt.qid)] -= 1
        sw = self.switch
        delay = sw.delay_us / 1e6 + (self.rng.random() * sw.jitter_us / 1e6 if sw.jitter_us else 0.0) + pkt.extra_s
        self._at(self.now + delay, self._deliver, pkt)
        self._egress_next(dst)

    def _deliver(self, pkt: _Pkt) -> None:
        h = self.hosts.get(pkt.dst)
        if h is None:
            return
        if h.mirror is None:
            h.endpoint.on_datagram(memoryview(pkt.data), pkt.tos & ECN_MASK, self.now)
        else:
            r = h.rxpath.feed(pkt.data, pkt.tos & ECN_MASK, self.now)
            if r == RX_TAKEN:
                return  # it only filled a message: no output, no timer moved
            if r == RX_DECIDE:
                h.mirror.decide(h.rxpath.DecideSrc(), self.now)
            else:
                h.mirror.datagram(memoryview(pkt.data), pkt.tos & ECN_MASK, self.now)
        self._step(h)

    # --- control channel -----------------------------------------------------------------------

    def _frame(self, src: int, out: FrameSend) -> None:
        body = out.data[C.LEN.size :]
        f = self.faults
        at = self.now + self.control_delay_s
        if f.drop_control is not None or f.control_delay is not None:
            msg = C.decode(body)
            ident = (src, out.peer, msg.type, msg.key)
            vf = VFrame(src, out.peer, msg, self._frames_seen[ident])
            self._frames_seen[ident] += 1
            if f.drop_control is not None and f.drop_control(vf):
                self.counters["control_drops"] += 1
                return
            if f.control_delay is not None:
                at += float(f.control_delay(vf))
        at = max(at, self._control_at.get((src, out.peer), 0.0))  # one stream: no overtaking
        self._control_at[(src, out.peer)] = at
        self._at(at, self._control, src, out.peer, body)

    def _control(self, src: int, dst: int, body: bytes) -> None:
        h = self.hosts.get(dst)
        if h is None:
            return
        h.take()
        h.endpoint.on_control(body, src, self.now)
        self._step(h)


def payload_bytes(batch) -> int:
    """Payload bytes of a PacketBatch (goodput figures)."""
    return int(batch.values.size) * VALUE_BYTES
