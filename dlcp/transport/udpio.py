"""Batched UDP sends of pre-built DLCP packets: sendmmsg(2) through ctypes, sendmsg(2) as fallback.

A `SendPlan` describes the packets of one message in sending order as flat numpy arrays built in a
few vectorised steps: one `iovec` pair (header row, payload slice) per packet and one IP_TOS
control message per packet (DSCP from the packet's (prio, drop_prec)). Payloads are never copied
(only the 24-byte header rows, into sending order) and no Python object is created per packet:
`BatchSender.send` hands slices of these arrays to the kernel, 32 packets per system call by
default. The iovecs point into the plan's header rows and the message values, so the plan keeps
references to both for as long as it lives.

Linux-only (sendmmsg, IP_TOS ancillary data on UDP sockets); `sendmsg` mode works wherever Python's
`socket.sendmsg` does and is kept for comparison (`dlcp bench transport --send-impl sendmsg`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno as errno_mod
import os
import socket
import struct
from typing import Literal, get_args

import numpy as np

from dlcp.wire.header import (
    FLAG_PROTECTED,
    HEADER_LEN,
    TELEMETRY_LEN,
    TYPE_RETX,
    VALUE_BYTES,
    field_values,
    header_fields,
    set_field_values,
    tos_of,
)

SendImpl = Literal["sendmmsg", "sendmsg"]
SEND_IMPLS = get_args(SendImpl)

_IOVEC = np.dtype([("base", "<u8"), ("len", "<u8")])
# struct mmsghdr on x86-64 / aarch64 Linux: struct msghdr (56 bytes) + unsigned int msg_len + pad
_MMSGHDR = np.dtype([
    ("name", "<u8"), ("namelen", "<u4"), ("_pad0", "<u4"),
    ("iov", "<u8"), ("iovlen", "<u8"),
    ("control", "<u8"), ("controllen", "<u8"),
    ("flags", "<i4"), ("_pad1", "<u4"),
    ("len", "<u4"), ("_pad2", "<u4"),
])
assert _MMSGHDR.itemsize == 64
# one cmsghdr (len: size_t, level: int, type: int) + int data, padded to CMSG_SPACE(4) = 24
_CMSG = np.dtype([("len", "<u8"), ("level", "<i4"), ("type", "<i4"), ("tos", "<i4"), ("_pad", "<u4")])
_CMSG_LEN_INT = 16 + 4
assert _CMSG.itemsize == 24

_libc = None


def _sendmmsg_fn():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        _libc.sendmmsg.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int]
        _libc.sendmmsg.restype = ctypes.c_int
    return _libc.sendmmsg


def sendmmsg_available() -> bool:
    try:
        _sendmmsg_fn()
        return os.uname().sysname == "Linux" and struct.calcsize("P") == 8
    except (OSError, AttributeError):
        return False


def sockaddr_in(ip: str, port: int) -> np.ndarray:
    """A struct sockaddr_in as a 16-byte array (kept alive by whoever points at it)."""
    raw = struct.pack("=H", socket.AF_INET) + struct.pack("!H", port) + socket.inet_aton(ip) + bytes(8)
    return np.frombuffer(raw, dtype=np.uint8).copy()


_ZERO_TELEMETRY = np.zeros(TELEMETRY_LEN, dtype=np.uint8)


class SendPlan:
    """Packets `order` of a message, ready for sendmmsg to one destination.

    `rows` holds the header of packet order[j] in row j (a copy in sending order, so a
    retransmission can carry type RETX without touching the batch). `wire_bytes[j]` is the IPv4
    datagram size of packet j (pacing, totals).
    """

    def __init__(self, rows: np.ndarray, values: np.ndarray, values_per_pkt: int, order: np.ndarray,
                 tos: np.ndarray, dest: np.ndarray, telemetry: bool = False):
        n = len(order)
        if rows.shape != (n, HEADER_LEN):
            raise ValueError(f"{rows.shape[0]} header rows for {n} packets")
        self.rows = np.ascontiguousarray(rows, dtype=np.uint8)  # iovecs point into these arrays:
        self.values = values  # the plan keeps them alive
        self.dest = dest
        self.n = n
        self.order = np.asarray(order, dtype=np.int64)
        lo = self.order * values_per_pkt
        plen = (np.minimum(values_per_pkt, values.size - lo) * VALUE_BYTES).astype(np.uint64)
        n_iov = 3 if telemetry else 2
        iov = np.zeros((n, n_iov), dtype=_IOVEC)
        iov[:, 0]["base"] = self.rows.ctypes.data + np.arange(n, dtype=np.uint64) * HEADER_LEN
        iov[:, 0]["len"] = HEADER_LEN
        if telemetry:
            iov[:, 1]["base"] = _ZERO_TELEMETRY.ctypes.data
            iov[:, 1]["len"] = TELEMETRY_LEN
        iov[:, -1]["base"] = values.ctypes.data + lo.astype(np.uint64) * VALUE_BYTES
        iov[:, -1]["len"] = plen
        self.iov = iov
        cm = np.zeros(n, dtype=_CMSG)
        cm["len"] = _CMSG_LEN_INT
        cm["level"] = socket.IPPROTO_IP
        cm["type"] = socket.IP_TOS
        cm["tos"] = tos
        self.cmsg = cm
        self.tos = cm["tos"]
        mm = np.zeros(n, dtype=_MMSGHDR)
        mm["name"] = dest.ctypes.data
        mm["namelen"] = dest.size
        mm["iov"] = iov.ctypes.data + np.arange(n, dtype=np.uint64) * (n_iov * _IOVEC.itemsize)
        mm["iovlen"] = n_iov
        mm["control"] = cm.ctypes.data + np.arange(n, dtype=np.uint64) * _CMSG.itemsize
        mm["controllen"] = _CMSG.itemsize
        self.mmsg = mm
        self.payload_bytes = plen
        # IPv4 datagram: IP 20 + UDP 8 + DLCP header (+ telemetry) + payload
        self.wire_bytes = plen + (28 + HEADER_LEN + (TELEMETRY_LEN if telemetry else 0))


def plan_for(batch, order, dest: np.ndarray, retransmission: bool = False) -> SendPlan:
    """SendPlan for packets `order` of PacketBatch `batch` to `dest`.

    A retransmission goes out as RETX with drop precedence 0 and the PROTECTED flag: the receiver
    asked for exactly these packets because the message cannot finish within budget without them,
    so a switch must not early-drop them again (they still tail-drop when a queue is full).
    """
    order = np.asarray(order, dtype=np.int64)
    rows = batch.headers[order]  # a copy, in sending order
    f = header_fields(rows)  # a view: writes land in rows
    if retransmission:
        set_field_values(f, "type", TYPE_RETX)
        set_field_values(f, "drop_prec", 0)
        set_field_values(f, "flags", field_values(f, "flags") | FLAG_PROTECTED)
    tos = tos_of(field_values(f, "prio").astype(np.int32), field_values(f, "drop_prec").astype(np.int32))
    return SendPlan(rows, batch.values, batch.values_per_pkt, order, tos, dest, bool(batch.telemetry))


class BatchSender:
    """Sends SendPlans on one blocking UDP socket, `batch` packets per sendmmsg call.

    Errors on individual packets (ENOBUFS when a qdisc is full, EPERM from a firewall, ...) skip
    that packet and are counted in `errors`; the caller sees how many packets went out.
    """

    def __init__(self, sock: socket.socket, impl: SendImpl = "sendmmsg", batch: int = 32):
        if impl == "sendmmsg" and not sendmmsg_available():
            impl = "sendmsg"
        self.sock = sock
        self.fd = sock.fileno()
        self.impl = impl
        self.batch = max(1, batch)
        self.errors = 0
        self.error_codes: dict[str, int] = {}
        self._fn = _sendmmsg_fn() if impl == "sendmmsg" else None

    def _count_error(self, err: int) -> None:
        self.errors += 1
        name = errno_mod.errorcode.get(err, str(err))
        self.error_codes[name] = self.error_codes.get(name, 0) + 1

    def send(self, plan: SendPlan, start: int, stop: int) -> int:
        """Send packets start..stop-1 of `plan`; returns how many the kernel accepted."""
        if self._fn is None:
            return self._send_loop(plan, start, stop)
        fn = self._fn
        base = plan.mmsg.ctypes.data
        sent = 0
        i = start
        while i < stop:
            k = min(self.batch, stop - i)
            r = fn(self.fd, base + i * 64, k, 0)
            if r < 0:
                err = ctypes.get_errno()
                if err == errno_mod.EINTR:
                    continue
                self._count_error(err)  # the first packet of the batch failed: skip it
                i += 1
                continue
            sent += r
            i += r
        return sent

    def _send_loop(self, plan: SendPlan, start: int, stop: int) -> int:
        # Python sendmsg per packet, same buffers (memoryviews over the same addresses)
        sent = 0
        hmv = memoryview(plan.rows).cast("B")
        vmv = memoryview(plan.values).cast("B")
        hbase = plan.rows.ctypes.data
        vbase = plan.values.ctypes.data
        dest = _dest_tuple(plan.dest)
        tel = plan.iov.shape[1] == 3
        for j in range(start, stop):
            ho = int(plan.iov[j, 0]["base"]) - hbase
            vo = int(plan.iov[j, -1]["base"]) - vbase
            vl = int(plan.iov[j, -1]["len"])
            bufs = [hmv[ho: ho + HEADER_LEN], vmv[vo: vo + vl]]
            if tel:
                bufs.insert(1, bytes(TELEMETRY_LEN))
            anc = [(socket.IPPROTO_IP, socket.IP_TOS, struct.pack("i", int(plan.tos[j])))]
            try:
                self.sock.sendmsg(bufs, anc, 0, dest)
                sent += 1
            except OSError as e:
                self._count_error(e.errno or 0)
        return sent


def _dest_tuple(dest: np.ndarray) -> tuple[str, int]:
    raw = dest.tobytes()
    return socket.inet_ntoa(raw[4:8]), struct.unpack("!H", raw[2:4])[0]
