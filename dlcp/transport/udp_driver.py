"""The bounded-loss transport on real sockets: the protocol core (core/) driven by two threads.

One `UdpTransport` per agent owns a UDP data socket (receive on `data_port`, send from a second
socket so sends may block on a full NIC queue without stalling reception), a TCP listener for the
control channel (`control_port`), one TCP connection per destination it sends to, and two threads:

- the **send thread** asks the sender core what goes next (`poll_transmit`: a slice of a round as
  the congestion window and pacing allow, or a round's PROBE after its data) and puts it on the UDP
  socket (`udpio`: sendmmsg, IP TOS per packet; blocking while the host's queue is full); it writes
  the DESCRIBE / FORCE_STOP frames the core asks for (opening the connection first), runs the
  sender's timers, and sleeps until the next timer or until the receive thread reports news;
- the **receive thread** reads datagrams (recvmmsg, with the ECN bits of each and how long it
  waited in the socket buffer), reads control frames from every connection (data that arrived before a control frame is
  taken in first), hands DESCRIBE / FORCE_STOP to the receiver core and BITMAP / STOP / FEEDBACK to
  the sender core, writes the frames they answer with, and runs the receiver's timers. Datagrams
  go through the C receive path (`_rxpath`: recvmmsg and the receive core shared with the ns-3
  hosts, dlcp/transport/c/rx_core.h), which fills messages itself and calls the receiver core only
  for what it decides on (rx_mirror.py); without it (not built, or DLCP_RX=python) each datagram
  goes through `ReceiverCore.on_datagram`.

Each core has its own lock (the send thread never waits for a batch of received packets). Protocol
decisions are the core's; this module only moves bytes and time (docs/transport.md).
"""

from __future__ import annotations

import logging
import os
import selectors
import socket
import struct
import threading
import time
from typing import cast

from dlcp.transport.api import Peer, RecvResult, SendInfo, TransportConfig, TransportError
from dlcp.transport.core.endpoint import for_receiver, merged_stats, parse_control
from dlcp.transport.core.outputs import DataSend, FrameSend, ProbeSend, RecvDone, SendDone
from dlcp.transport.core.receiver import ReceiverCore
from dlcp.transport.core.sender import SenderCore
from dlcp.transport.deadline_timer import DeadlineTimer
from dlcp.transport.rx_mirror import RxMirror, load_rxpath, rx_mode
from dlcp.transport.sockets import connect_retrying, control_socket_options, set_socket_buffer
from dlcp.transport.sync import SendHandle, wait_for_done
from dlcp.transport.threadtime import ThreadClock, set_realtime
from dlcp.transport.udpio import RECV_SLOT, BatchReceiver, BatchSender, send_vectors, sockaddr_in
from dlcp.wire import control_frames as C
from dlcp.wire.header import ECN_MASK, PRIO_CONTROL, MalformedPacket, tos_of

log = logging.getLogger("dlcp.transport.udp_driver")

_C_PATH_WARNED = False
RX_BURST = 512  # datagrams taken in per wake-up before control and timers get a turn
RX_BATCH = 64  # datagrams per recvmmsg
IDLE_S = 0.2  # longest sleep of either thread


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


class UdpTransport:
    """One endpoint of the bounded-loss transport. See the module docstring."""

    def __init__(self, config: TransportConfig, peers: dict[int, Peer] | list[Peer], rx_path: str | None = None):
        self.cfg = config
        self.peers = {p.rank: p for p in (peers.values() if isinstance(peers, dict) else peers)}
        self.vpp = config.values_per_pkt
        wall = time.time() - time.monotonic()
        self.sender = SenderCore(config, wall)
        self.receiver = ReceiverCore(config, self.peers, wall)
        self._rxpath, self._mirror = self._receive_path(rx_path or rx_mode())
        self._tx = threading.Condition(threading.Lock())  # the sender core, handles
        self._rx = threading.Condition(threading.Lock())  # the receiver core, finished receptions
        self._handles: dict = {}
        self._rx_done: dict = {}  # key -> RecvResult, until the caller takes it
        self._out: dict[int, _Conn] = {}
        self._conn_lock = threading.Lock()
        self._conns: dict[int, _Conn] = {}  # fd -> conn (all control connections)
        self._pending_reg: list = []
        self._closing = False
        self._control_received = 0
        self._clock = ThreadClock()
        self._open_sockets()
        self._rx_thread = threading.Thread(
            target=self._thread_main,
            args=("rx", "receive thread", self._rx_loop),
            name=f"dlcp-rx-{config.rank}",
            daemon=True,
        )
        self._tx_thread = threading.Thread(
            target=self._thread_main,
            args=("tx", "send thread", self._tx_loop),
            name=f"dlcp-tx-{config.rank}",
            daemon=True,
        )
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
            raise TransportError(
                f"cannot open data port {cfg.ip}:{cfg.data_port} / control port {cfg.control_port}: {e.strerror or e}"
            ) from None
        self.data_port = self.udp_rx.getsockname()[1]
        self.control_port = self.listener.getsockname()[1]
        self.batch_sender = BatchSender(self.udp_tx, cfg.send_impl, cfg.send_batch)
        self.batch_receiver = BatchReceiver(self.udp_rx, RX_BATCH)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.udp_rx, selectors.EVENT_READ, "udp")
        self._sel.register(self.listener, selectors.EVENT_READ, "listen")
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._rx_timer = DeadlineTimer()  # the receiver's timers, to the microsecond (epoll's are ms)
        self._sel.register(self._rx_timer, selectors.EVENT_READ, "timer")
        self._dests = {r: sockaddr_in(p.ip, p.data_port) for r, p in self.peers.items()}

    def _receive_path(self, mode: str):
        """(the C receive path, its mirror) in `mode` (rx_mirror.RX_MODES), or (None, None) in mode
        "python" or when the extension is not usable (said once per process)."""
        global _C_PATH_WARNED
        if mode == "python":
            return None, None
        try:
            module = load_rxpath()
        except ImportError as e:
            if not _C_PATH_WARNED:
                _C_PATH_WARNED = True
                log.warning("the C receive path is not usable (%s): datagrams go through Python", e)
            return None, None
        path = module.RxPath(batch=RX_BATCH)
        # the receive thread takes before it reads the core's timers, and its wait in C arms the
        # timer for the FEEDBACK delays C starts: C may start them
        return path, RxMirror(self.receiver, path, mode, starts_delays=True)

    def _take(self) -> None:
        """What the C receive path counted, into the receiver core (hold self._rx)."""
        if self._mirror is not None:
            self._mirror.take()

    def _publish(self, scan: bool = False) -> None:
        """After the receiver core acted: what the C path may take now (hold self._rx)."""
        if self._mirror is not None:
            self._mirror.publish(scan)

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
        with self._tx:
            self.peers = {**self.peers, peer.rank: peer}
            self._dests = {**self._dests, peer.rank: sockaddr_in(peer.ip, peer.data_port)}
        with self._rx:
            self.receiver.add_peer(peer.rank)

    def connect(self, ranks=None, timeout: float | None = None) -> None:
        """Open control connections to `ranks` (default: every peer), waiting until each peer is
        listening: after this, data sent to them will find their sockets bound."""
        for r in self.peers if ranks is None else ranks:
            self._conn_to(r, timeout)

    def send(self, dst: int, batch, info: SendInfo) -> SendHandle:
        """Queue the packets of `batch` for `dst`; returns at once. The batch (headers and values)
        must stay unchanged until the handle is done."""
        if dst not in self.peers:
            raise TransportError(f"send to unknown rank {dst}")
        with self._tx:
            key = self.sender.send(dst, batch, info, time.monotonic())
            handle = self._handles[key] = SendHandle(key)
            self._tx.notify_all()
        return handle

    def recv(self, src: int, iteration: int, phase: int, msg_id: int, timeout: float | None = None) -> RecvResult:
        """Wait for message (src, iteration, phase, msg_id) to finish (STOP or FORCE_STOP)."""
        key = (src, iteration & 0xFFFF, phase, msg_id)
        return wait_for_done(
            self._rx, self._rx_done, key, timeout, lambda: self._closing, lambda: self.receiver.progress(key)
        )

    def set_budget(self, budget: float | None) -> None:
        """A budget schedule's budget: for messages sent from now on, and a cap on those received."""
        with self._tx:
            self.sender.set_budget(budget)
        with self._rx:
            self.receiver.set_budget_cap(budget)

    def advance(self, iteration: int) -> None:
        """The caller moved on to `iteration`: older messages become stale (ReceiverCore.advance)."""
        with self._rx:
            self._take()
            self.receiver.advance(iteration)
            self._publish()
            for k in [k for k in self._rx_done if self.receiver.is_stale(k[1])]:
                del self._rx_done[k]

    @property
    def message_rows(self) -> list[dict]:
        with self._tx:
            rows = list(self.sender.rows)
        with self._rx:
            return rows + self.receiver.rows

    @property
    def packet_chunks(self) -> list[dict]:
        with self._tx:
            chunks = list(self.sender.packet_chunks)
        with self._rx:
            return chunks + self.receiver.packet_chunks

    def take_message_rows(self) -> list[dict]:
        """The message records added since the last call, removed (long-lived users such as the DDP
        hook drain them so memory stays bounded)."""
        with self._tx:
            rows, self.sender.rows = self.sender.rows, []
        with self._rx:
            rows += self.receiver.rows
            self.receiver.rows = []
        return rows

    def stats(self) -> dict:
        with self._tx:
            s, s_drops = self.sender.stats(), dict(self.sender.drops)
        with self._rx:
            self._take()
            r, r_drops = self.receiver.stats(), dict(self.receiver.drops)
        out = merged_stats(s, r, s_drops, r_drops)
        if self._rxpath is not None:
            out["rx_path"] = self._rxpath.timings()
        out.update(
            send_errors=dict(self.batch_sender.error_codes),
            send_impl=self.batch_sender.impl,
            control_received=self._control_received,
            threads=self._clock.times(),
        )
        return out

    def close(self) -> None:
        with self._tx:
            if self._closing:
                return
            self._closing = True
            self._tx.notify_all()
        with self._rx:
            self._rx.notify_all()
        self._wake()
        self._tx_thread.join(timeout=5)
        self._rx_thread.join(timeout=5)
        for c in list(self._conns.values()) + list(self._out.values()):
            c.sock.close()
        self._sel.close()
        self._rx_timer.close()
        self._close_sockets()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _thread_main(self, name: str, what: str, work) -> None:
        """Body of each of the two threads: its priority, and its times kept after it ends."""
        self._clock.started(name)
        prio = (self.cfg.rx_rt_priority if name == "rx" else 0) or self.cfg.thread_rt_priority
        if prio:
            set_realtime(prio, f"rank {self.cfg.rank}: {what}")
        try:
            work()
        finally:
            self._clock.ending(name)

    # --- send thread ---------------------------------------------------------------------------

    def _tx_loop(self) -> None:
        try:
            while True:
                with self._tx:
                    if self._closing:
                        return
                    now = time.monotonic()
                    sender = self.sender
                    if sender.next_timer() <= now:
                        sender.on_timer(now)
                    item = sender.poll_transmit(now)
                    outs = sender.take_outputs()
                    if item is None and not outs:
                        self._tx.wait(min(IDLE_S, max(0.0, sender.next_timer() - now)))
                        continue
                    dest = self._dests.get(item.dst) if item is not None else None
                self._tx_outputs(outs)
                if isinstance(item, DataSend):
                    self._send_data(item, dest)
                elif isinstance(item, ProbeSend):
                    self._send_probe(item)
        except Exception as e:  # a bug here must not hang the agent silently
            log.exception("send thread failed")
            with self._tx:
                self._closing = True
                self.sender.fail_all(f"send thread failed: {e!r}", time.monotonic())
                outs = self.sender.take_outputs()
            self._finish_handles(outs)

    def _send_data(self, item: DataSend, dest) -> None:
        rnd = item.round
        if rnd.prepared is None:
            rnd.prepared = send_vectors(rnd, dest)
        self.batch_sender.send(rnd.prepared, item.start, item.stop)

    def _send_probe(self, item: ProbeSend) -> None:
        peer = self.peers[item.dst]
        anc = [(socket.IPPROTO_IP, socket.IP_TOS, struct.pack("i", item.tos))]
        try:
            self.udp_tx.sendmsg([item.data], anc, 0, (peer.ip, peer.data_port))
        except OSError as e:  # ENOBUFS and the like: the PROBE timeout sends it again
            self.batch_sender._count_error(e.errno or 0)

    def _tx_outputs(self, outs: list) -> None:
        """Frames of the sender core (DESCRIBE, FORCE_STOP: opening the connection if needed) and
        finished messages."""
        for out in outs:
            if isinstance(out, FrameSend):
                try:
                    conn = self._conn_to(out.peer)
                except TransportError as e:
                    self._unreachable(out.peer, str(e))
                    continue
                if not self._write(conn, out.data):
                    self._unreachable(out.peer, "control connection lost")
        self._finish_handles(outs)

    def _unreachable(self, dst: int, why: str) -> None:
        with self._tx:
            self.sender.peer_unreachable(dst, why, time.monotonic())
            outs = self.sender.take_outputs()
        self._finish_handles(outs)

    def _finish_handles(self, outs: list) -> None:
        for out in outs:
            if isinstance(out, SendDone):
                with self._tx:
                    handle = self._handles.pop(out.key, None)
                if handle is not None:
                    handle._finish(out.result)

    def _conn_to(self, dst: int, timeout: float | None = None) -> _Conn:
        conn = self._out.get(dst)
        if conn is not None and not conn.closed:
            return conn
        peer = self.peers[dst]
        timeout = self.cfg.connect_timeout_s if timeout is None else timeout
        s = connect_retrying(
            self.cfg.ip,
            (peer.ip, peer.control_port),
            timeout,
            lambda: self._closing,
            f"control connection to rank {dst}",
            prepare=self._control_options,
        )
        s.setblocking(False)
        conn = _Conn(s, dst)
        with self._conn_lock:
            old = self._out.get(dst)
            if old is not None and not old.closed:  # another thread won the race
                s.close()
                return old
            self._out[dst] = conn
            self._pending_reg.append(conn)
        self._wake()
        return conn

    def _control_options(self, s: socket.socket) -> None:
        control_socket_options(s, self.cfg.time_scale)  # its kernel timers dilated too

    def _write(self, conn: _Conn, frame: bytes) -> bool:
        """Queue a frame on `conn`; the receive thread flushes what the socket did not take."""
        if conn.send(frame):
            with self._conn_lock:
                self._pending_reg.append(conn)
            self._wake()
        return not conn.closed

    # --- receive thread ------------------------------------------------------------------------

    def _rx_loop(self) -> None:
        serve = self._rxpath is not None and isinstance(self._sel, selectors.EpollSelector)
        try:
            while not self._closing:
                with self._rx:
                    self._rx_timer.arm(self.receiver.next_timer())
                if serve:
                    self._serve()
                    ready = self._sel.select(0)
                else:
                    ready = self._sel.select(IDLE_S)
                for key, events in ready:
                    what = key.data
                    if what == "udp":
                        self._rx_data(RX_BURST)
                    elif what == "timer":
                        self._rx_timer.clear()
                    elif what == "listen":
                        self._accept()
                    elif what == "wake":
                        self._on_wake()
                    else:
                        if events & selectors.EVENT_WRITE and what.flush():
                            self._watch(what, write=False)
                        if events & selectors.EVENT_READ:
                            self._on_readable(what)
                with self._rx:
                    self._take()  # what C absorbed while serving, before the timers look
                    now = time.monotonic()
                    if self.receiver.next_timer() <= now:
                        self.receiver.on_timer(now)
                        self._publish()
                    outs = self.receiver.take_outputs()
                self._rx_outputs(outs)
        except Exception:
            log.exception("receive thread failed")
            with self._tx:
                self._closing = True
                self._tx.notify_all()
            with self._rx:
                self._rx.notify_all()

    def _serve(self) -> None:
        """Wait in C (`_rxpath.serve`, without the GIL): the data socket's datagrams are absorbed
        there until one needs the core, which is handled here; returns when another descriptor
        needs Python. The receive timer fires for the FEEDBACK delays C starts meanwhile."""
        path, timer = self._rxpath, self._rx_timer
        try:
            ev = path.serve(
                self._sel.fileno(), self.udp_rx.fileno(), int(IDLE_S * 1000), RX_BURST, timer.fileno(), timer.deadline
            )
        except OSError as e:
            self._socket_error(e)
            return
        finally:
            timer.deadline = path.timer_at
        if ev is not None:
            self._rx_batch(ev)

    def _socket_error(self, e: OSError) -> None:
        """A receive call's error (e.g. ECONNREFUSED reported by ICMP): counted, not fatal."""
        with self._rx:
            self.receiver.count_drop("socket_error", e.strerror or str(e))

    def _rx_data(self, budget: int) -> None:
        """Take in up to `budget` waiting datagrams (each with its ECN bits) and act on the outcome."""
        if self._mirror is None:
            self._rx_data_python(budget)
            return
        path = self._rxpath
        fd = self.udp_rx.fileno()
        taken = 0
        while taken < budget:
            try:
                n = path.recv(fd)
            except OSError as e:
                self._socket_error(e)
                continue
            if not n:
                break
            taken += n
            self._rx_batch(path.next())  # the C path takes what it can; the rest, in order, goes to the core
            if n < RX_BATCH:
                break

    def _rx_batch(self, ev) -> None:
        """The rest of the C path's batch from event `ev` on (`_rxpath.next`'s tuples, None: the
        batch is done), through the core, then its outputs."""
        path, mirror, receiver = self._rxpath, self._mirror, self.receiver
        assert mirror is not None
        mv = memoryview(path.buffer)
        with self._rx:
            while ev is not None:
                if ev[0]:
                    mirror.decide(ev[1], ev[2])
                elif ev[2] < 0:
                    mirror.take()
                    receiver.count_drop("length", f"a datagram longer than {RECV_SLOT} bytes")
                else:
                    _, off, ln, ecn, queued, now = ev
                    mirror.datagram(mv[off : off + ln], ecn, now, queued)
                ev = path.next()
            mirror.take()
            outs = receiver.take_outputs()
        self._rx_outputs(outs)

    def _rx_data_python(self, budget: int) -> None:
        """_rx_data without the C path: every datagram through ReceiverCore.on_datagram."""
        rcv = self.batch_receiver
        mv = rcv.view
        receiver = self.receiver
        mono = time.monotonic
        taken = 0
        while taken < budget:
            try:
                n = rcv.recv()
            except OSError as e:
                self._socket_error(e)
                continue
            if not n:
                break
            taken += n
            wall = time.time()  # how long each datagram waited in the socket buffer: the host's queue
            with self._rx:
                for i, (ln, tos, arrived, trunc) in enumerate(zip(rcv.lengths, rcv.tos, rcv.arrived, rcv.truncated)):
                    if trunc:
                        receiver.count_drop("length", f"a datagram longer than {RECV_SLOT} bytes")
                        continue
                    off = i * RECV_SLOT
                    receiver.on_datagram(mv[off : off + ln], tos & ECN_MASK, mono(), wall - arrived if arrived else 0.0)
                outs = receiver.take_outputs()
            self._rx_outputs(outs)
            if n < rcv.batch:
                break

    def _rx_outputs(self, outs: list) -> None:
        """Frames of the receiver core (STOP, BITMAP, FEEDBACK) and finished messages."""
        done = False
        for out in outs:
            if isinstance(out, FrameSend):
                conn = out.channel
                if conn is not None:
                    self._write_now(cast(_Conn, conn), out.data)  # the channel this driver gave the core
            elif isinstance(out, RecvDone):
                done = True
        if done:
            with self._rx:
                for out in outs:
                    if isinstance(out, RecvDone):
                        self._rx_done[out.key] = out.result
                self._rx.notify_all()

    def _write_now(self, conn: _Conn, frame: bytes) -> None:
        """Write from the receive thread itself (no wake-up needed to watch for writability)."""
        if conn.send(frame):
            self._watch(conn, write=True)

    def _watch(self, conn: _Conn, write: bool) -> None:
        ev = selectors.EVENT_READ | (selectors.EVENT_WRITE if write else 0)
        try:
            self._sel.modify(conn.sock, ev, conn)
        except KeyError:
            self._sel.register(conn.sock, ev, conn)
            self._conns[conn.fd] = conn
        except (ValueError, OSError):  # closed meanwhile
            pass

    def _on_wake(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        with self._conn_lock:
            regs, self._pending_reg = self._pending_reg, []
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
            self._control_options(s)
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
            self._rx_data(4096)  # data that arrived before these control messages comes first
        sender_news = False
        for body in bodies:
            try:
                msg = parse_control(body, self.cfg.job_id)
            except MalformedPacket as e:
                with self._rx:
                    self.receiver.count_drop(e.field, e.detail)
                continue
            self._control_received += 1
            now = time.monotonic()
            if for_receiver(msg):
                with self._rx:
                    if msg.type == C.DESCRIBE:
                        self.receiver.on_describe(msg, conn, now)
                    else:
                        self.receiver.on_force_stop(msg, conn, now)
                    self._publish(scan=True)
                    outs = self.receiver.take_outputs()
                self._rx_outputs(outs)
            else:
                with self._tx:
                    self.sender.on_frame(msg, now)
                    outs = self.sender.take_outputs()
                sender_news = True
                if outs:
                    self._tx_outputs_from_rx(outs)
        if sender_news:
            with self._tx:
                self._tx.notify_all()  # a window opened, a retransmission round is queued
        if conn.reader.error is not None:
            err = conn.reader.error
            with self._rx:
                self.receiver.count_drop(err.field, err.detail)
            self._close_conn(conn, f"{err} (the stream cannot be resynchronised)")

    def _tx_outputs_from_rx(self, outs: list) -> None:
        """Sender frames produced while handling a reply (FORCE_STOP after the last round): the
        connection exists (the DESCRIBE went on it), so the receive thread never blocks here."""
        for out in outs:
            if isinstance(out, FrameSend):
                conn = self._out.get(out.peer)
                if conn is None or conn.closed:
                    self._unreachable(out.peer, "control connection lost")
                else:
                    self._write_now(conn, out.data)
        self._finish_handles(outs)
