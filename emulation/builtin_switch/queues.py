"""Egress queues of one port: 8 FIFOs drained at the port rate in the order the port's queue
discipline picks (dlcp/queueing: strict priority by default), then the link (optional propagation
delay and random loss).

Time is virtual: the port is busy until `t_free`; a packet starts when `t_free <= now` and pushes
`t_free` on by its transmission time (frame bits / rate, or 1 / packet rate). A port that idled or
fell behind gets at most `max_lag_s` of catch-up, so a late wake-up never becomes a long burst.
On a rate-limited port a packet reaches the next hop at the end of its slot (then the propagation
delay), as on a store-and-forward link: each hop adds the packet's own transmission time, which
ns-3's point-to-point links add too and which sets the latency of short messages on an idle path.
The host's own link is the host's NIC shaper (HTB), which lets a frame go when its slot starts: a
frame that came in on a `host_nic` port carries that link's transmission time too, added to its
arrival at the next hop (on an idle path exactly the host link's store-and-forward delay; in a
paced burst too, as the shaper spaces the frames by that time).
"""

from __future__ import annotations

import random
from collections import deque

from dlcp.network import pipeline_names as P
from dlcp.network.runtime_file import DEFAULT_QUEUE_DEPTH_PKTS, PortConfig
from dlcp.transport.core.waits import WaitHistogram

# A queued packet: [frame, vnet header or None, qid, telemetry offset, enqueue time, enq_qdepth,
# in_tx] (enq_qdepth: packets ahead of it in its own priority queue when it was enqueued; in_tx: its
# transmission time on the host link it came in on, 0 from a switch, PortConfig.host_nic)
FRAME, VNET, QID, TEL, T_ENQ, ENQ_DEPTH, IN_TX = range(7)


def _frame_len(pkt: list) -> int:
    return len(pkt[FRAME])


class EgressPort:
    def __init__(
        self, cfg: PortConfig, rng: random.Random, max_lag_s: float = 0.002, late: WaitHistogram | None = None
    ):
        self.port = cfg.port
        self.depth = cfg.queue_depth_pkts or DEFAULT_QUEUE_DEPTH_PKTS  # null: this target's default
        self.queues: list[deque] = [deque() for _ in range(P.N_QUEUES)]
        self.scheduler = cfg.queueing.scheduler()  # which queue sends next
        self.backlog = 0  # packets in all 8 queues
        self.byte_time = 8.0 / cfg.rate_bps if cfg.rate_bps else None
        self.pkt_time = 1.0 / cfg.rate_pps if cfg.rate_pps else None
        self.ingress_byte_time = (self.byte_time or 0.0) if cfg.host_nic else 0.0  # bit rate only
        self.unlimited = self.byte_time is None and self.pkt_time is None
        self.t_free = 0.0
        self.ideal = 0.0  # t_free without the catch-up limit: when an ideal switch's link is free
        self.max_lag_s = max_lag_s
        self.delay_s = cfg.delay_us / 1e6
        self.loss = cfg.loss
        self.rng = rng
        self.in_flight: deque = deque()  # (due time, packet) on the emulated wire
        self.overflow_pkts = 0  # refused because a queue was at its physical depth
        self.lost_pkts = 0  # lost on the link (random loss)
        self.late = late if late is not None else WaitHistogram()  # the switch's wake-ups after a slot began

    def enqueue(self, pkt: list, qid: int) -> bool:
        q = self.queues[qid]
        if len(q) >= self.depth:
            self.overflow_pkts += 1
            return False
        q.append(pkt)
        self.backlog += 1
        return True

    def _pop(self):
        q = self.scheduler.pick(self.queues, _frame_len)
        if q < 0:
            return None
        self.backlog -= 1
        return self.queues[q].popleft()

    def dequeue_due(self, now: float, out: list, limit: int) -> list[float]:
        """Move up to `limit` packets whose slot has begun to `out`, highest queue first; returns
        when each one's transmission ends (`now` on an unlimited port)."""
        ends: list[float] = []
        if self.unlimited:
            while self.backlog and limit:
                out.append(self._pop())
                ends.append(now)
                limit -= 1
            return ends
        if self.t_free < now - self.max_lag_s:
            self.t_free = now
        while self.backlog and limit and self.t_free <= now:
            pkt = self._pop()
            slot = max(self.ideal, pkt[T_ENQ])  # when an ideal switch would have started it
            self.late.record(now - slot)
            tx = self.pkt_time if self.byte_time is None else len(pkt[FRAME]) * self.byte_time
            self.ideal = slot + tx
            self.t_free += tx
            out.append(pkt)
            ends.append(self.t_free)
            limit -= 1
        return ends

    def next_departure(self) -> float | None:
        if not self.backlog:
            return None
        return 0.0 if self.unlimited else self.t_free

    def link(self, pkts: list, ends: list[float], now: float, out: list) -> None:
        """Put dequeued packets on the link: random loss, then each reaches `out` at the end of its
        transmission (`ends`) plus the propagation delay, through the delay line unless that time
        has come and nothing is ahead of it."""
        for pkt, end in zip(pkts, ends):
            if self.loss and self.rng.random() < self.loss:
                self.lost_pkts += 1
                continue
            due = end + self.delay_s + pkt[IN_TX]  # the delay line stays in order, as a wire does
            if due > now or self.in_flight:
                self.in_flight.append((due, pkt))
            else:
                out.append(pkt)

    def arrived(self, now: float, out: list) -> None:
        """Packets whose propagation delay has elapsed."""
        fl = self.in_flight
        while fl and fl[0][0] <= now:
            out.append(fl.popleft()[1])

    def next_arrival(self) -> float | None:
        return self.in_flight[0][0] if self.in_flight else None
