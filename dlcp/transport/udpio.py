"""Batched UDP I/O of DLCP packets: sendmmsg(2) / recvmmsg(2) through ctypes, sendmsg(2) /
recvmsg(2) as fallback.

A `SendVectors` describes the packets of one message in sending order as flat numpy arrays built in a
few vectorised steps: one `iovec` pair (header row, payload slice) per packet and one IP_TOS
control message per packet (DSCP from the packet's (prio, drop_prec)). Payloads are never copied
(only the 24-byte header rows, into sending order) and no Python object is created per packet:
`BatchSender.send` hands slices of these arrays to the kernel, 32 packets per system call by
default. The iovecs point into their header rows and the message values, so the vectors keep
references to both for as long as it lives.

Linux-only (sendmmsg, IP_TOS ancillary data on UDP sockets); `sendmsg` mode works wherever Python's
`socket.sendmsg` does and is kept for comparison (`dlcp bench transport --send-impl sendmsg`).

`BatchReceiver` takes up to `batch` datagrams per recvmmsg call into one buffer, each with the TOS
byte of its IPv4 header (IP_RECVTOS: the ECN bits) and the kernel's receive time (SO_TIMESTAMPNS:
how long it waited in the socket buffer): the receiver reports both for congestion feedback.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno as errno_mod
import os
import socket
import struct

import numpy as np

from dlcp.transport.api import SendImpl
from dlcp.transport.core.outputs import Round
from dlcp.wire.header import HEADER_LEN, TELEMETRY_LEN, VALUE_BYTES

_IOVEC = np.dtype([("base", "<u8"), ("len", "<u8")])
# struct mmsghdr on x86-64 / aarch64 Linux: struct msghdr (56 bytes) + unsigned int msg_len + pad
_MMSGHDR = np.dtype(
    [
        ("name", "<u8"),
        ("namelen", "<u4"),
        ("_pad0", "<u4"),
        ("iov", "<u8"),
        ("iovlen", "<u8"),
        ("control", "<u8"),
        ("controllen", "<u8"),
        ("flags", "<i4"),
        ("_pad1", "<u4"),
        ("len", "<u4"),
        ("_pad2", "<u4"),
    ]
)
assert _MMSGHDR.itemsize == 64
# one cmsghdr (len: size_t, level: int, type: int) + int data, padded to CMSG_SPACE(4) = 24
_CMSG = np.dtype([("len", "<u8"), ("level", "<i4"), ("type", "<i4"), ("tos", "<i4"), ("_pad", "<u4")])
_CMSG_LEN_INT = 16 + 4
assert _CMSG.itemsize == 24

_libc = None


def _libc_fn(name: str):
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        _libc.sendmmsg.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int]
        _libc.sendmmsg.restype = ctypes.c_int
        _libc.recvmmsg.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_void_p]
        _libc.recvmmsg.restype = ctypes.c_int
    return getattr(_libc, name)


def _sendmmsg_fn():
    return _libc_fn("sendmmsg")


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


class SendVectors:
    """Packets `order` of a message, ready for sendmmsg to one destination.

    `rows` holds the header of packet order[j] in row j (a copy in sending order, so a
    retransmission can carry type RETX without touching the batch). `wire_bytes[j]` is the IPv4
    datagram size of packet j (pacing, totals).
    """

    def __init__(
        self,
        rows: np.ndarray,
        values: np.ndarray,
        values_per_pkt: int,
        order: np.ndarray,
        tos: np.ndarray,
        dest: np.ndarray,
        telemetry: bool = False,
    ):
        n = len(order)
        if rows.shape != (n, HEADER_LEN):
            raise ValueError(f"{rows.shape[0]} header rows for {n} packets")
        self.rows = np.ascontiguousarray(rows, dtype=np.uint8)  # iovecs point into these arrays:
        self.values = values  # the vectors keep them alive
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


def send_vectors(rnd: Round, dest: np.ndarray) -> SendVectors:
    """SendVectors for the packets of round `rnd` that go on the wire, to `dest` (headers and TOS from
    `Round.header_rows`: RETX rewriting, ECN-capable marking)."""
    rows, tos = rnd.header_rows()
    batch = rnd.batch
    return SendVectors(rows, batch.values, batch.values_per_pkt, rnd.wire, tos, dest, bool(batch.telemetry))


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

    def send(self, vectors: SendVectors, start: int, stop: int) -> int:
        """Send packets start..stop-1 of `vectors`; returns how many the kernel accepted."""
        if self._fn is None:
            return self._send_loop(vectors, start, stop)
        fn = self._fn
        base = vectors.mmsg.ctypes.data
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

    def _send_loop(self, vectors: SendVectors, start: int, stop: int) -> int:
        # Python sendmsg per packet, same buffers (memoryviews over the same addresses)
        sent = 0
        hmv = vectors.rows.data.cast("B")
        vmv = vectors.values.data.cast("B")
        hbase = vectors.rows.ctypes.data
        vbase = vectors.values.ctypes.data
        dest = _dest_tuple(vectors.dest)
        tel = vectors.iov.shape[1] == 3
        for j in range(start, stop):
            ho = int(vectors.iov[j, 0]["base"]) - hbase
            vo = int(vectors.iov[j, -1]["base"]) - vbase
            vl = int(vectors.iov[j, -1]["len"])
            bufs: list[memoryview | bytes] = [hmv[ho : ho + HEADER_LEN], vmv[vo : vo + vl]]
            if tel:
                bufs.insert(1, bytes(TELEMETRY_LEN))
            anc = [(socket.IPPROTO_IP, socket.IP_TOS, struct.pack("i", int(vectors.tos[j])))]
            try:
                self.sock.sendmsg(bufs, anc, 0, dest)
                sent += 1
            except OSError as e:
                self._count_error(e.errno or 0)
        return sent


IP_RECVTOS = 13  # <linux/in.h>; socket.IP_RECVTOS where Python exports it
SO_TIMESTAMPNS = 35  # <asm-generic/socket.h>; its control message type is the same number
MSG_TRUNC = 0x20
RECV_SLOT = 2048  # bytes per datagram slot: a DLCP datagram is at most 24 + 8 + 1400 + 8 bytes
_RX_CMSG_SPACE = 64  # room for IP_TOS (CMSG_SPACE(1) = 24) and SCM_TIMESTAMPNS (CMSG_SPACE(16) = 32)


assert _MMSGHDR.fields is not None  # a structured dtype has fields (numpy types them Optional)
_MM_CONTROLLEN_OFF = _MMSGHDR.fields["controllen"][1]
_MM_RESET = struct.Struct("<Qi")  # controllen, flags
_MM_RESULT = struct.Struct("<Qi4xI")  # controllen, flags, (pad), msg_len
assert _MMSGHDR.fields["flags"][1] == _MM_CONTROLLEN_OFF + 8 and _MMSGHDR.fields["len"][1] == _MM_CONTROLLEN_OFF + 16
_CMSG_HDR = struct.Struct("<QiI")  # struct cmsghdr: len (size_t), level, type
_TIMESPEC = struct.Struct("<qq")


def read_cmsgs(buf, base: int, size: int) -> tuple[int, float]:
    """The TOS byte and the receive time (time.time() seconds) in the control messages at
    `buf[base: base + size]`; 0 and 0.0 for what is missing."""
    tos, arrived, off = 0, 0.0, 0
    while off + _CMSG_HDR.size <= size:
        clen, level, typ = _CMSG_HDR.unpack_from(buf, base + off)
        if clen < _CMSG_HDR.size or off + clen > size:
            break
        data = base + off + _CMSG_HDR.size
        if level == socket.IPPROTO_IP and typ == socket.IP_TOS:
            tos = buf[data]
        elif level == socket.SOL_SOCKET and typ == SO_TIMESTAMPNS and clen >= _CMSG_HDR.size + 16:
            sec, nsec = _TIMESPEC.unpack_from(buf, data)
            arrived = sec + nsec * 1e-9
        off += (clen + 7) & ~7  # CMSG_ALIGN
    return tos, arrived


class BatchReceiver:
    """Receives datagrams from a non-blocking UDP socket, up to `batch` per system call, each with
    its IPv4 TOS byte and receive time. After `recv()` returned n: datagram i is
    `view[i * RECV_SLOT: ... + lengths[i]]` (valid until the next call), `tos[i]` its TOS,
    `arrived[i]` when the kernel received it (time.time() seconds; 0.0 when unknown), `truncated[i]`
    whether it was longer than a slot."""

    def __init__(self, sock: socket.socket, batch: int = 64):
        sock.setsockopt(socket.IPPROTO_IP, getattr(socket, "IP_RECVTOS", IP_RECVTOS), 1)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.sock = sock
        self.fd = sock.fileno()
        self.batch = batch
        self.buf = np.zeros(batch * RECV_SLOT, dtype=np.uint8)
        self.view = self.buf.data
        self.cmsg = np.zeros(batch * _RX_CMSG_SPACE, dtype=np.uint8)
        self._fn = _libc_fn("recvmmsg") if sendmmsg_available() else None
        iov = np.zeros(batch, dtype=_IOVEC)
        iov["base"] = self.buf.ctypes.data + np.arange(batch, dtype=np.uint64) * RECV_SLOT
        iov["len"] = RECV_SLOT
        self.iov = iov
        mm = np.zeros(batch, dtype=_MMSGHDR)
        mm["iov"] = iov.ctypes.data + np.arange(batch, dtype=np.uint64) * _IOVEC.itemsize
        mm["iovlen"] = 1
        mm["control"] = self.cmsg.ctypes.data + np.arange(batch, dtype=np.uint64) * _RX_CMSG_SPACE
        mm["controllen"] = _RX_CMSG_SPACE
        self.mm = mm
        self._mm_view = mm.view(np.uint8).data
        self._mm_addr = mm.ctypes.data
        self._cmsg_view = self.cmsg.data
        self._used = 0
        self.lengths: list[int] = []
        self.tos: list[int] = []
        self.arrived: list[float] = []
        self.truncated: list[bool] = []

    def recv(self) -> int:
        """Take what is waiting (up to `batch` datagrams); 0 when nothing is. Raises OSError on a
        socket error other than "nothing to read"."""
        if self._fn is None:
            return self._recv_one()
        mmv = self._mm_view
        for i in range(self._used):  # the kernel overwrote controllen and flags of the headers it filled
            _MM_RESET.pack_into(mmv, i * _MMSGHDR.itemsize + _MM_CONTROLLEN_OFF, _RX_CMSG_SPACE, 0)
        self._used = 0
        n = self._fn(self.fd, self._mm_addr, self.batch, socket.MSG_DONTWAIT, None)
        if n < 0:
            err = ctypes.get_errno()
            if err in (errno_mod.EAGAIN, errno_mod.EWOULDBLOCK, errno_mod.EINTR):
                return 0
            raise OSError(err, os.strerror(err))
        self._used = n
        # Plain struct reads per datagram: a burst at emulated link rates brings 1-4 datagrams per
        # call, where numpy's fixed cost per call (~150 us) was most of the receive path's CPU.
        lengths, tos, arrived, truncated = [], [], [], []
        cmv = self._cmsg_view
        for i in range(n):
            controllen, flags, ln = _MM_RESULT.unpack_from(mmv, i * _MMSGHDR.itemsize + _MM_CONTROLLEN_OFF)
            lengths.append(ln)
            truncated.append(bool(flags & MSG_TRUNC))
            t, a = read_cmsgs(cmv, i * _RX_CMSG_SPACE, min(controllen, _RX_CMSG_SPACE))
            tos.append(t)
            arrived.append(a)
        self.lengths, self.tos, self.arrived, self.truncated = lengths, tos, arrived, truncated
        return n

    def _recv_one(self) -> int:
        try:
            n, anc, flags, _ = self.sock.recvmsg_into([self.view[:RECV_SLOT]], _RX_CMSG_SPACE)
        except (BlockingIOError, InterruptedError):
            return 0
        tos, arrived = 0, 0.0
        for level, typ, data in anc:
            if level == socket.IPPROTO_IP and typ == socket.IP_TOS and data:
                tos = data[0]
            elif level == socket.SOL_SOCKET and typ == SO_TIMESTAMPNS and len(data) >= 16:
                sec, nsec = struct.unpack("qq", data[:16])
                arrived = sec + nsec * 1e-9
        self.lengths, self.tos, self.arrived, self.truncated = [n], [tos], [arrived], [bool(flags & MSG_TRUNC)]
        return 1


def _dest_tuple(dest: np.ndarray) -> tuple[str, int]:
    raw = dest.tobytes()
    return socket.inet_ntoa(raw[4:8]), struct.unpack("!H", raw[2:4])[0]
