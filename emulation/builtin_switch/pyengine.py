"""The Python engine: the reference pipeline (dlcp/switch/pipeline.py) and the port disciplines
(dlcp/queueing) behind queues.py and afpacket.py, driven by a Python event loop.

Same interface as the C engine (`_fastpath.Engine`): add_port, run, port_gone, flush, counters.
It is what runs when the C extension is not built, with --engine python, and with --debug-log (one
line per packet). Slower (a few microseconds per packet) but the readable statement of what the
C engine does.
"""

from __future__ import annotations

import random
import select
import sys
import time

from dlcp.network.runtime_file import PortConfig
from dlcp.switch.pipeline import PARSER_ERROR, Pipeline
from dlcp.transport.core.waits import WaitHistogram
from emulation.builtin_switch.afpacket import MsgBatch, PortSocket
from emulation.builtin_switch.pcap import PcapWriter
from emulation.builtin_switch.queues import ENQ_DEPTH, FRAME, QID, T_ENQ, TEL, VNET, EgressPort

CONTROL_POLL_S = 0.05


class _Port:
    def __init__(self, cfg: PortConfig, sock: PortSocket | None, egress: EgressPort, pcap: PcapWriter | None):
        self.num = cfg.port
        self.sock = sock
        self.egress = egress
        self.pcap = pcap
        self.txq: list = []  # dequeued packets waiting for the kernel
        self.rx_pkts = self.rx_bytes = self.tx_pkts = self.tx_bytes = 0
        self.tx_errors = self.rx_truncated = 0
        self.t_in = 0.0  # host_nic: when the host's link would be free of the frames that came in so far


class PyEngine:
    def __init__(self, pipeline: Pipeline, batch: int = 64, debug_log: bool = False, max_lag_s: float = 0.002):
        self.pipeline = pipeline
        self.batch = batch
        self.debug = debug_log
        self.max_lag_s = max_lag_s
        self.rx = MsgBatch(batch, control=True)
        self.tx = MsgBatch(batch)
        self.ports: dict[int, _Port] = {}
        self.read_lag = WaitHistogram()  # how long frames waited in the kernel before they were read
        self.tx_late = WaitHistogram()  # how long after its slot began each packet started (every port)
        self.rx_burst = WaitHistogram()  # bytes still on a host's link as its next frame came, 1 us = 1 byte
        self.rng: random.Random = pipeline.rng

    def add_port(self, cfg: PortConfig, sock, pcap_path: str | None = None) -> None:
        """Attach a port: `sock` is its bound socket (afpacket.open_port_socket)."""
        self.ports[cfg.port] = _Port(
            cfg,
            PortSocket(sock, cfg.intf, self.rx, self.tx),
            EgressPort(cfg, self.rng, self.max_lag_s, self.tx_late),
            PcapWriter(pcap_path) if pcap_path else None,
        )

    def port_gone(self, port: int) -> None:
        self.ports[port].sock = None

    def flush(self) -> None:
        for p in self.ports.values():
            if p.pcap:
                p.pcap.flush()

    def close(self) -> None:
        for p in self.ports.values():
            if p.pcap:
                p.pcap.close()

    # --- the loop ----------------------------------------------------------------------------

    def run(self, seconds: float, wake_fds) -> tuple[int, int, int]:
        """Forward until `seconds` pass (0), a wake fd is readable (1) or a port's socket fails (2)."""
        monotonic = time.monotonic
        start = monotonic()
        deadline = start + seconds
        last_wake = start
        while True:
            now = monotonic()
            got = 0
            for p in self.ports.values():
                if p.sock is not None:
                    try:
                        got += self._receive(p, now)
                    except OSError as e:
                        return 2, p.num, e.errno or 0
            now = monotonic()
            sent = 0
            for p in self.ports.values():
                try:
                    sent += self._transmit(p, now)
                except OSError as e:
                    return 2, p.num, e.errno or 0
            if now >= deadline:
                return 0, -1, 0
            if got or sent:
                if wake_fds and now - last_wake >= CONTROL_POLL_S:
                    last_wake = now
                    if select.select(wake_fds, [], [], 0)[0]:
                        return 1, -1, 0
                continue
            if self._idle(deadline, wake_fds):
                return 1, -1, 0
            last_wake = monotonic()

    def _receive(self, p: _Port, now: float) -> int:
        sock = p.sock
        n = sock.recv()
        if not n:
            return 0
        pipe = self.pipeline
        ingress = pipe.ingress
        ports = self.ports
        in_byte_time = p.egress.ingress_byte_time  # the host link's, on a host_nic port
        read_at = time.time()
        for i in range(n):
            stamp = sock.stamp(i)
            if stamp:
                self.read_lag.record(read_at - stamp)
            f, vnet, truncated = sock.frame(i)
            ln = len(f)
            if in_byte_time:  # a host's link: how far ahead of its rate the host's frames came
                start = max(p.t_in, now)
                self.rx_burst.record((start - now) / in_byte_time * 1e-6)
                p.t_in = start + ln * in_byte_time
            p.rx_pkts += 1
            p.rx_bytes += ln
            if p.pcap is not None:
                p.pcap.write(f)
            if truncated:  # longer than any frame a port can carry: the parser cannot take it
                p.rx_truncated += 1
                pipe._drop(PARSER_ERROR, ln)
                continue
            r = ingress(f, p.num)
            if r is None:
                if self.debug:
                    print(f"port {p.num} len {ln} dropped: {pipe.drop_name()}", file=sys.stderr)
                continue
            eport, qid, color, tel = r
            ep = ports[eport].egress
            depth = len(ep.queues[qid])  # enq_qdepth: this packet's own priority queue, as bmv2 counts
            if self.debug:
                print(f"port {p.num} len {ln} -> port {eport} q{qid} c{color} depth {depth}", file=sys.stderr)
            if not ep.enqueue([f, vnet, qid, tel, now, depth, ln * in_byte_time], qid):
                pipe.release(eport, qid)  # admitted, but it never got a slot
        return n

    def _transmit(self, p: _Port, now: float) -> int:
        ep = p.egress
        if ep.backlog and not p.txq:
            due: list = []
            ends = ep.dequeue_due(now, due, self.batch)
            egress = self.pipeline.egress
            for pkt in due:
                wait_us = max(0, int((now - pkt[T_ENQ]) * 1e6))
                v = pkt[VNET]
                egress(pkt[FRAME], p.num, pkt[QID], pkt[TEL], pkt[ENQ_DEPTH], wait_us, v is not None and bool(v[0] & 1))
            ep.link(due, ends, now, p.txq)
        if ep.in_flight:
            ep.arrived(now, p.txq)
        if not p.txq:
            return 0
        if p.sock is None:  # the interface is gone
            p.tx_errors += len(p.txq)
            p.txq = []
            return 0
        sent = 0
        while p.txq:
            chunk = p.txq[: self.batch]
            try:
                n = p.sock.send([x[FRAME] for x in chunk], [x[VNET] for x in chunk])
            except OSError:
                p.tx_errors += len(chunk)
                del p.txq[: len(chunk)]
                raise
            for x in chunk[:n]:
                p.tx_bytes += len(x[FRAME])
                if p.pcap is not None:
                    p.pcap.write(x[FRAME])
            p.tx_pkts += n
            sent += n
            del p.txq[:n]
            if n < len(chunk):
                break
        return sent

    def _idle(self, deadline: float, wake_fds) -> bool:
        """Sleep until a frame, a departure, an arrival, a wake fd or the deadline; True = wake fd."""
        now = time.monotonic()
        until = deadline
        rlist, wlist = [], []
        for p in self.ports.values():
            ep = p.egress
            if p.sock is not None:
                rlist.append(p.sock.fd)
                if p.txq:
                    wlist.append(p.sock.fd)
            if ep.backlog and not p.txq:
                until = min(until, now if ep.unlimited else ep.t_free)
            t = ep.next_arrival()
            if t is not None:
                until = min(until, t)
        wait = until - time.monotonic()
        if wait <= 0:
            return False
        ready, _, _ = select.select(rlist + list(wake_fds), wlist, [], wait)
        return any(fd in ready for fd in wake_fds)

    # --- counters ----------------------------------------------------------------------------

    def sample(self) -> dict:
        return self.pipeline.sample()

    def counters(self) -> dict:
        c = self.pipeline.counters()
        c["ports"] = {
            num: {
                "rx_pkts": p.rx_pkts,
                "rx_bytes": p.rx_bytes,
                "tx_pkts": p.tx_pkts,
                "tx_bytes": p.tx_bytes,
                "tx_errors": p.tx_errors,
                "queue_overflow_pkts": p.egress.overflow_pkts,
                "link_loss_pkts": p.egress.lost_pkts,
                "rx_truncated": p.rx_truncated,
                "queued_pkts": p.egress.backlog,
                "pending_pkts": len(p.txq) + len(p.egress.in_flight),
            }
            for num, p in self.ports.items()
        }
        for prefix, h in (("rx_lag", self.read_lag), ("tx_late", self.tx_late), ("rx_burst", self.rx_burst)):
            c[f"{prefix}_bins"], c[f"{prefix}_n"], c[f"{prefix}_max_s"] = list(h.bins), h.count, h.max_s
        return c
