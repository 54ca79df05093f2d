"""Veth pairs in the root namespace and raw frames through them, for switch tests and benchmarks
that need no Mininet: a switch process owns one end of each pair, the test sends and captures
whole Ethernet frames on the other end with AF_PACKET sockets (no IP stack involved)."""

from __future__ import annotations

import contextlib
import os
import select
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

ETH_P_ALL = 0x0003
SO_RCVBUFFORCE = 33  # <asm-generic/socket.h>; not exported by the socket module
IFNAMSIZ = 15


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {proc.stderr.strip()}")


def _quiet(ifname: str) -> None:
    """No IPv6 on a test interface: the kernel then sends nothing on it by itself."""
    Path(f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6").write_text("1")


@contextlib.contextmanager
def veth_pairs(pairs: list[tuple[str, str]]) -> Iterator[list[tuple[str, str]]]:
    """Create (a, b) veth pairs, up and quiet; delete them on exit, whatever happens."""
    made = []
    try:
        for a, b in pairs:
            if max(len(a), len(b)) > IFNAMSIZ:
                raise ValueError(f"interface name {a!r}/{b!r} longer than {IFNAMSIZ} characters")
            _ip("link", "add", a, "type", "veth", "peer", "name", b)
            made.append(a)
            for name in (a, b):
                _quiet(name)
                _ip("link", "set", name, "up")
        yield pairs
    finally:
        for a in made:
            subprocess.run(["ip", "link", "del", a], capture_output=True)


def raw_socket(ifname: str, rcvbuf: int = 4 << 20) -> socket.socket:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    try:  # past net.core.rmem_max (root only): bursts must not overflow the capture
        s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf)
    except PermissionError:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((ifname, 0))
    return s


def drain(s: socket.socket) -> None:
    """Discard whatever is queued on a socket."""
    s.setblocking(False)
    try:
        while True:
            s.recv(65535)
    except BlockingIOError:
        pass
    finally:
        s.setblocking(True)


def receive(s: socket.socket, quiet_s: float = 0.3, limit_s: float = 10.0, want: int | None = None,
            inbound_only: bool = True) -> list[tuple[float, bytes]]:
    """(monotonic arrival time, frame) until `quiet_s` passes without a frame, `want` frames came, or
    `limit_s` is over. Frames this socket's host itself sent are skipped."""
    out = []
    end = time.monotonic() + limit_s
    while time.monotonic() < end and (want is None or len(out) < want):
        r, _, _ = select.select([s], [], [], min(quiet_s, max(0.0, end - time.monotonic())))
        if not r:
            break
        frame, addr = s.recvfrom(65535)
        if inbound_only and addr[2] == socket.PACKET_OUTGOING:
            continue
        out.append((time.monotonic(), frame))
    return out


def unique_prefix(tag: str) -> str:
    """A short per-process prefix for interface names: `<tag><pid base 36>`."""
    pid, digits = os.getpid(), ""
    while pid:
        pid, r = divmod(pid, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[r] + digits
    return tag + digits
