"""Simulated hosts running the bounded-loss transport's protocol core (dlcp/transport/core/, the
sans-I/O sender and receiver of issue 12) in simulated time.

Per packet, C++ (`cpp/dlcp_host.h`, `DlcpHostIo`): the UDP data socket, the host's blocking send
queue in front of its NIC, TCP control connections, and most data packets' receive work
(`cpp/dlcp_rx.h`: the receive core the UDP driver shares, dlcp/transport/c/rx_core.h, driven by
the shared `RxMirror` of dlcp/transport/rx_mirror.py). Per other datagram and per control read, Python: the core's
`on_datagram` / `on_control`, then `step()` (after a datagram only when it produced output or
moved a timer) hands out what the core asks for (data slices, PROBEs, control frames, finished
messages), exactly as the virtual-time driver (dlcp/transport/virtual.py) and the UDP driver do.
The core's timers become simulator events by integer token (`DlcpTimers`). Clock: simulated
seconds since the start of the run; records carry them as microseconds (`wall_offset_s` 0), which
reports only ever subtract.
"""

from __future__ import annotations

import ipaddress
import math
import os
from dataclasses import fields, is_dataclass

from dlcp.transport.rx_mirror import RxMirror
from dlcp.transport.sockets import CONTROL_RTO_MIN_US  # the emulated control sockets' RTO floor

CORE_HINT = (
    "backend ns3 needs the transport's sans-I/O protocol core (dlcp/transport/core, issue 12), "
    "which this tree does not have yet"
)


TICK_S = 1e-9  # the simulator's time resolution
# Linux charges a full DLCP frame about this much socket buffer (skb truesize) and doubles
# SO_SNDBUF: a blocking UDP socket with sndbuf_bytes holds 2 * sndbuf_bytes / TRUESIZE packets in
# its host before it blocks (128 KiB: 113 packets). On jumbo links a frame is charged its extra
# bytes on top (an assumption: the emulator has no jumbo links to measure it on).
SKB_TRUESIZE = 2304
STANDARD_MTU = 1500


# DLCP_SIM_RX picks the hosts' receive path (a mode of dlcp/transport/rx_mirror.py): "cpp" (the
# default) passes up a message's first packet and each one a FEEDBACK may come due on; "c" counts
# up to the core's FEEDBACK decisions (DECIDE up-calls), which on ns-3 measured no cheaper
# (docs/notes/2026-11-27-datapath-bench.md); "python" sends every datagram up. Records are the same
# either way.
SIM_RX_MODES = {"cpp": "c-per-datagram", "c": "c", "python": "python"}


def sim_rx_mode() -> str:
    """The shared mirror's mode (rx_mirror.RX_MODES) for DLCP_SIM_RX; a bad value is one line naming it."""
    value = os.environ.get("DLCP_SIM_RX", "cpp")
    if value not in SIM_RX_MODES:
        raise ValueError(f"DLCP_SIM_RX={value!r}: one of {', '.join(SIM_RX_MODES)}")
    return SIM_RX_MODES[value]


def send_buffer_packets(sndbuf_bytes: int, host_queue_pkts: int, mtu: int = STANDARD_MTU) -> int:
    """Datagrams a host keeps in its NIC queue before its sender blocks (at most the queue less one
    slot, so the control connection always finds room)."""
    truesize = SKB_TRUESIZE + max(0, mtu - STANDARD_MTU)
    return max(1, min(2 * sndbuf_bytes // truesize, host_queue_pkts - 1))


def core_missing() -> str | None:
    """None when the protocol core can be imported, else the one-line reason."""
    import importlib.util

    try:
        found = importlib.util.find_spec("dlcp.transport.core.endpoint") is not None
    except ModuleNotFoundError:
        found = False
    return None if found else CORE_HINT


def transport_config(TransportConfig, dlcp: dict, **fixed):
    """A TransportConfig from the experiment's `dlcp` section: every key the config class has."""
    if is_dataclass(TransportConfig):
        names = {f.name for f in fields(TransportConfig)}
    else:  # a settings model
        names = set(TransportConfig.model_fields)
    kw = {k: v for k, v in dlcp.items() if k in names}
    kw.update(fixed)
    return TransportConfig(**kw)


def ip_int(ip: str) -> int:
    return int(ipaddress.IPv4Address(ip))


class Clock:
    """Simulated time and the core's timers as simulator events (one Python dispatcher)."""

    def __init__(self, ns):
        self.ns = ns
        self._pending: dict[int, object] = {}
        self._next = 0
        self._dispatch = self._fire  # cppyy does not keep the callable alive: this reference does
        ns.DlcpTimers.SetDispatcher(self._dispatch)
        self._now = ns.DlcpTimers.Now  # called several times per datagram: the cheapest way to the clock

    def now(self) -> float:
        return self._now()

    def at(self, t: float, fn) -> int:
        self._next += 1
        self._pending[self._next] = fn
        self.ns.DlcpTimers.At(t, self._next)
        return self._next

    def cancel(self, token: int) -> None:
        self._pending.pop(token, None)  # the event still fires, and finds nothing

    def _fire(self, token: int) -> None:
        fn = self._pending.pop(token, None)
        if fn is not None:
            fn()


class SimHost:
    """One endpoint: the core, its sockets, and the callbacks of its caller (the collective)."""

    def __init__(self, stack: HostStack, index: int, name: str, rank: int, cfg, on_sent, on_received):
        from dlcp.transport.core.endpoint import Endpoint
        from dlcp.wire.control_frames import FrameReader

        self.stack, self.index, self.name, self.rank = stack, index, name, rank
        self.job = getattr(cfg, "job_id", 1)  # ranks are a job's: its peers are its job's hosts
        self.endpoint = Endpoint(cfg, peers=(), wall_offset_s=0.0)
        self.on_sent, self.on_received = on_sent, on_received
        self.own_conn: dict[int, int] = {}  # peer rank -> connection this host opened
        self.readers: dict[int, object] = {}  # connection -> FrameReader
        self._reader = FrameReader
        self.timer_at = math.inf
        self.timer_token = None
        self._stepping = False
        self._again = False
        # a datagram or a control frame went through the core since the last step: it may have
        # created a message, which the receive path may then take packets of (RxMirror.publish)
        self._scan = False
        self.io = None  # DlcpHostIo, set by the stack
        self.tx_blocked = False  # its data socket is full: no new transmission until WRITABLE
        self.rxm = None  # RxMirror of its receive path, set by the stack

    def add_peer(self, rank: int) -> None:
        self.endpoint.receiver.add_peer(rank)

    def send(self, dst: int, batch, info) -> tuple:
        key = self.endpoint.send(dst, batch, info, self.stack.clock.now())
        self.step()
        return key

    # --- up-calls from C++ ---------------------------------------------------------------------

    def datagram(self, data: bytes, ecn: int) -> None:
        """A datagram the C++ path did not take. Most of these only fill a message: no output, no
        timer moved. Then the driver loop has nothing to do (a datagram reaches only the receiver
        half, so the sender's transmissions and timers are as the last step left them, and the
        armed timer is still the earliest), and skipping it saves most of a datagram's Python time."""
        rx, m = self.endpoint.receiver, self.rxm
        m.take()
        timer, pending = rx.next_timer(), rx.outputs_pending()
        self.endpoint.on_datagram(memoryview(data), ecn, self.stack.clock.now())
        m.open_after(data)
        if rx.outputs_pending() != pending or rx.next_timer() != timer:
            self._scan = True
            self.step()  # publishes
        else:
            m.publish(scan=True)

    def decide(self, src: int) -> None:
        """The C++ path took a packet of `src` after which its FEEDBACK may be due: the core's
        FEEDBACK rule decides (a FEEDBACK now, or its delay starts); the driver loop runs only if
        that made output or moved a timer, as after a datagram."""
        rx, m = self.endpoint.receiver, self.rxm
        m.take()
        timer, pending = rx.next_timer(), rx.outputs_pending()
        m.decide(src, self.stack.clock.now())
        if rx.outputs_pending() != pending or rx.next_timer() != timer:
            self.step()

    def writable(self) -> None:
        """The data socket took every datagram handed down: the next transmission may go."""
        self.tx_blocked = False
        self.step()

    def control(self, conn: int, data: bytes) -> None:
        self.rxm.take()
        reader = self.readers.setdefault(conn, self._reader())
        now = self.stack.clock.now()
        for body in reader.feed(data):
            self.endpoint.on_control(body, conn, now)
        self._scan = True
        self.step()

    # --- the driver loop -----------------------------------------------------------------------

    def step(self) -> None:
        """Let the core act on what happened; re-entrant calls (a callback sending the next
        message) fold into the loop instead of recursing."""
        if self._stepping:
            self._again = True
            return
        self.rxm.take()
        self._stepping = True
        try:
            while True:
                self._again = False
                self._step_once()
                if not self._again:
                    break
        finally:
            self._stepping = False
        self._rearm()
        self.rxm.publish(scan=self._scan)
        self._scan = False

    def _step_once(self) -> None:
        from dlcp.transport.core.outputs import DataSend, FrameSend, ProbeSend, RecvDone, SendDone

        ep, now = self.endpoint, self.stack.clock.now()
        due = ep.next_timer()
        if due <= now + TICK_S:  # a deadline within the simulator's last nanosecond has come
            ep.on_timer(max(now, due))
        # As the emulated send thread: hand the core's next transmission down, and ask for the one
        # after only once the socket took it all (a sender blocked in sendmmsg does not poll its
        # core, so the next message's DESCRIBE, and its start time, waits for the socket too).
        while not self.tx_blocked:
            tx = ep.poll_transmit(now)
            if tx is None:
                break
            if isinstance(tx, DataSend):
                self._data(tx)
            elif isinstance(tx, ProbeSend):
                self.io.SendData(self.stack.ip_of_rank[self.job, tx.dst], bytes(tx.data), tx.tos)
            self.tx_blocked = self.io.WouldBlock()
        for out in ep.take_outputs():
            if isinstance(out, FrameSend):
                self._frame(out)
            elif isinstance(out, SendDone):
                self.on_sent(self, out.key, out.result)
            elif isinstance(out, RecvDone):
                self.on_received(self, out.key, out.result)

    def _data(self, tx) -> None:
        from dlcp.transport.core.outputs import data_datagrams  # the virtual-time driver's datagrams, byte for byte

        ip = self.stack.ip_of_rank[self.job, tx.dst]
        send = self.io.SendData
        for data, tos in data_datagrams(tx):
            send(ip, data, tos)

    def _frame(self, out) -> None:
        conn = out.channel
        if conn is None:
            conn = self.own_conn.get(out.peer)
            if conn is None:
                conn = self.own_conn[out.peer] = int(self.io.Connect(self.stack.ip_of_rank[self.job, out.peer]))
        self.io.SendFrame(conn, bytes(out.data))

    def _rearm(self) -> None:
        t = self.endpoint.next_timer()
        if not math.isfinite(t):
            if self.timer_token is not None:
                self.stack.clock.cancel(self.timer_token)
                self.timer_token = None
            self.timer_at = math.inf
            return
        t = max(t, self.stack.clock.now())
        if t == self.timer_at and self.timer_token is not None:
            return
        if self.timer_token is not None:
            self.stack.clock.cancel(self.timer_token)
        self.timer_at = t
        self.timer_token = self.stack.clock.at(t, self._timer)

    def _timer(self) -> None:
        self.timer_token = None
        self.timer_at = math.inf
        self.step()


class HostStack:
    """Every simulated endpoint of a run and the one dispatcher C++ calls them through."""

    def __init__(self, ns, net, data_port: int, control_port: int, host_queue_pkts: int):
        self.ns = ns
        self.net = net
        self.clock = Clock(ns)
        self.data_port, self.control_port = data_port, control_port
        self.host_queue_pkts = host_queue_pkts
        self.rx_mode = sim_rx_mode()
        self.hosts: list[SimHost] = []
        self.ip_of_rank: dict[tuple[int, int], int] = {}  # (job id, wire rank) -> IPv4 address
        self._ios = []
        self._dispatch = self._up  # cppyy does not keep the callable alive: this reference does
        ns.DlcpHostIo.SetDispatcher(self._dispatch)

    def add(self, name: str, rank: int, cfg, on_sent, on_received) -> SimHost:
        h = SimHost(self, len(self.hosts), name, rank, cfg, on_sent, on_received)
        io = self.ns.CreateObject["DlcpHostIo"]()
        sndbuf = getattr(cfg, "sndbuf_bytes", 128 << 10)
        io.__deref__().Setup(
            self.net.nodes[name],
            h.index,
            self.data_port,
            self.control_port,
            self.net.host_devices[name],
            send_buffer_packets(sndbuf, self.host_queue_pkts, self.net.mtu),
            CONTROL_RTO_MIN_US / 1e6,
        )
        self._ios.append(io)
        h.io = io.__deref__()
        # the core starts the FEEDBACK delays here (no `starts_delays`): C++ starting them and
        # scheduling their ends cut the up-calls by a quarter but no run time, and moved which of
        # two events at one nanosecond goes first (docs/notes/2026-11-28-feedback-delay-in-c.md)
        h.rxm = RxMirror(h.endpoint.receiver, h.io.Rx(), self.rx_mode)
        self.ip_of_rank[h.job, rank] = ip_int(self.net.spec.hosts[name].ip)
        for other in self.hosts:
            if other.job == h.job:
                other.add_peer(rank)
                h.add_peer(other.rank)
        self.hosts.append(h)
        return h

    def take_all(self) -> None:
        """Hand every receiver what its C++ receive path still holds (before reading records)."""
        for h in self.hosts:
            h.rxm.take()

    def _up(self, index: int, kind: int, conn: int, data, ecn: int, peer: int) -> None:
        h = self.hosts[index]
        if kind == 0:
            h.datagram(bytes(data), ecn)
        elif kind == 1:
            h.control(int(conn), bytes(data))
        elif kind == 5:
            h.writable()
        elif kind == 6:
            h.decide(int(conn))
        elif kind == 3:
            h.readers.pop(int(conn), None)
            for rank, c in list(h.own_conn.items()):
                if c == conn:
                    del h.own_conn[rank]
