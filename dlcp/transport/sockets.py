"""Socket helpers both drivers share (the UDP driver and the plain-TCP baseline): connecting with
retries, socket buffers beyond the sysctl limits, the control connection's options."""

from __future__ import annotations

import socket
import time

from dlcp.transport.api import TransportError
from dlcp.wire.header import PRIO_CONTROL, tos_of

TCP_RTO_MIN_US = 45  # socket options (Linux 6.16)
TCP_DELACK_MAX_US = 46
CONTROL_RTO_MIN_US = 10_000  # the system's: times the dilation on the emulated sockets
KERNEL_TIMER_MAX_US = 200_000  # the kernel refuses larger values of either option


def connect_retrying(
    local_ip: str, addr: tuple[str, int], timeout: float, closing, what: str, prepare=None
) -> socket.socket:
    """A TCP connection from `local_ip` to `addr`, retried until `timeout` s (peers start within
    seconds of each other); `prepare(sock)` sets options before connecting. Raises TransportError
    naming `what` and the address."""
    deadline = time.monotonic() + timeout
    while True:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if prepare is not None:
            prepare(s)
        try:
            s.bind((local_ip, 0))
            s.settimeout(max(0.1, min(2.0, deadline - time.monotonic())))
            s.connect(addr)
            return s
        except OSError as e:
            s.close()
            if time.monotonic() >= deadline or closing():
                raise TransportError(
                    f"no {what} at {addr[0]}:{addr[1]} after {timeout:.0f} s: {e.strerror or e}"
                ) from None
            time.sleep(0.05)


def set_socket_buffer(sock: socket.socket, opt: int, size: int) -> None:
    """Socket buffer of `size` bytes; as root beyond net.core.[rw]mem_max (SO_*BUFFORCE)."""
    force = {socket.SO_RCVBUF: 33, socket.SO_SNDBUF: 32}[opt]  # SO_RCVBUFFORCE, SO_SNDBUFFORCE
    try:
        sock.setsockopt(socket.SOL_SOCKET, force, size)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, opt, size)


def control_timer_us(time_scale: float = 1.0) -> int:
    """The control connections' RTO floor and delayed-ACK cap under time dilation `time_scale`
    (dlcp/experiment/dilation.py): the system's 10 ms times D, at most the kernel's 200 ms."""
    return min(KERNEL_TIMER_MAX_US, round(CONTROL_RTO_MIN_US * time_scale))


def control_socket_options(s: socket.socket, time_scale: float = 1.0) -> None:
    """Priority 7, no Nagle, and (Linux >= 6.16) a 10 ms floor instead of 200 ms for the TCP
    retransmission timeout: where control shares a lossy queue (the fifo baseline), a lost DESCRIBE,
    BITMAP or STOP segment otherwise stalls its message for at least 200 ms.

    The floor also caps the delayed ACK (the kernel derives one from the other; set here too), and
    both are kernel timers of the system's time scale: unscaled against a network D times slower,
    the delayed ACK fired D times more often per frame: the workers of experiments/dilation-check
    sent 20 % more control packets into the PS's congested switch port at D = 4 and 50 % more at
    D = 8, where the queue counts packets (ECN marks, tail drops)."""
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos_of(PRIO_CONTROL, 0))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    timer = control_timer_us(time_scale)
    for opt in (TCP_RTO_MIN_US, TCP_DELACK_MAX_US):
        try:
            s.setsockopt(socket.IPPROTO_TCP, opt, timer)
        except OSError:  # older kernels: the default timers
            pass
