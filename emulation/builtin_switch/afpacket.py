"""AF_PACKET port sockets with batched I/O (recvmmsg / sendmmsg through ctypes).

Every frame carries a 10-byte virtio_net_hdr (PACKET_VNET_HDR): on receive it says whether the L4
checksum is still partial (CHECKSUM_PARTIAL from a host with TX offload) or the frame is a GSO
super-frame; forwarding the header unchanged lets the kernel finish the checksum or segment the
frame on the way out, so UDP checksums survive and TCP background traffic cannot break the switch.
Slots are 64 KiB so a GSO super-frame is never truncated. PACKET_IGNORE_OUTGOING keeps the switch
from seeing its own transmissions. SO_TIMESTAMPNS has the kernel stamp each frame as it arrives, so
the switch can tell how long a frame waited before it read it (its own keep-up figure).
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import struct

from dlcp.transport.udpio import SO_TIMESTAMPNS, read_cmsgs

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_STATISTICS = 6
PACKET_VNET_HDR = 15
PACKET_QDISC_BYPASS = 20
PACKET_IGNORE_OUTGOING = 23
SO_RCVBUFFORCE = 33
SO_SNDBUFFORCE = 32
MSG_DONTWAIT = 0x40
MSG_TRUNC = 0x20

VNET_LEN = 10
VNET_F_NEEDS_CSUM = 1
VNET_F_DATA_VALID = 2
SLOT = VNET_LEN + 65550  # a GSO super-frame: 64 KiB of IP plus the Ethernet header
ZERO_VNET = bytes(VNET_LEN)
SOCK_BUF_BYTES = 4 << 20
RXCTL = 64  # control bytes per message: one SCM_TIMESTAMPNS (CMSG_SPACE(16) = 32)


class IOVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class MsgHdr(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_void_p),
        ("namelen", ctypes.c_uint32),
        ("iov", ctypes.c_void_p),
        ("iovlen", ctypes.c_size_t),
        ("control", ctypes.c_void_p),
        ("controllen", ctypes.c_size_t),
        ("flags", ctypes.c_int),
    ]


class MMsgHdr(ctypes.Structure):
    _fields_ = [("hdr", MsgHdr), ("len", ctypes.c_uint32)]


assert ctypes.sizeof(MMsgHdr) == 64 and ctypes.sizeof(IOVec) == 16
_MSG_LEN_U32 = MMsgHdr.len.offset // 4  # msg_len as a uint32 index inside one 64-byte mmsghdr
_MSG_FLAGS_U32 = (MMsgHdr.hdr.offset + MsgHdr.flags.offset) // 4
_MSG_CONTROLLEN_U64 = (MMsgHdr.hdr.offset + MsgHdr.controllen.offset) // 8

_libc = ctypes.CDLL(None, use_errno=True)
_recvmmsg = _libc.recvmmsg
_recvmmsg.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_void_p]
_recvmmsg.restype = ctypes.c_int
_sendmmsg = _libc.sendmmsg
_sendmmsg.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int]
_sendmmsg.restype = ctypes.c_int

_STATS = struct.Struct("II")  # struct tpacket_stats: tp_packets, tp_drops


class MsgBatch:
    """`n` message slots of SLOT bytes each, with their mmsghdr/iovec arrays, reused for every call;
    with `control`, RXCTL bytes per message for the control messages of a receive."""

    def __init__(self, n: int, control: bool = False):
        self.n = n
        self.buf = bytearray(n * SLOT)
        self.iov_raw = bytearray(n * ctypes.sizeof(IOVec))
        self.msg_raw = bytearray(n * ctypes.sizeof(MMsgHdr))
        iov = (IOVec * n).from_buffer(self.iov_raw)
        msgs = (MMsgHdr * n).from_buffer(self.msg_raw)
        base = ctypes.addressof((ctypes.c_char * len(self.buf)).from_buffer(self.buf))
        for i in range(n):
            iov[i].base = base + i * SLOT
            iov[i].len = SLOT
            msgs[i].hdr.iov = ctypes.addressof(iov[i])
            msgs[i].hdr.iovlen = 1
        self.ctl = bytearray(n * RXCTL if control else 0)
        if control:
            ctl_base = ctypes.addressof((ctypes.c_char * len(self.ctl)).from_buffer(self.ctl))
            for i in range(n):
                msgs[i].hdr.control = ctl_base + i * RXCTL
                msgs[i].hdr.controllen = RXCTL
        self.msgs_addr = ctypes.addressof(msgs)
        self._keep = (iov, msgs)
        self.u32 = memoryview(self.msg_raw).cast("I")  # msg_len / msg_flags of each message
        self.u64 = memoryview(self.msg_raw).cast("Q")  # msg_controllen of each message
        self.filled = 0  # messages the last receive filled (their control lengths need resetting)
        self.iov_len = memoryview(self.iov_raw).cast("Q")  # [2 * i + 1] is iov_len of message i


def open_port_socket(intf: str) -> socket.socket:
    """A non-blocking AF_PACKET socket bound to `intf`, promiscuous, with vnet headers.

    Raises OSError (ENODEV) when the interface does not exist."""
    ifindex = socket.if_nametoindex(intf)
    # protocol 0 until bind: no frame of another interface can slip in before the bind
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        s.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
        s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        s.setsockopt(SOL_PACKET, PACKET_QDISC_BYPASS, 1)
        s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        for opt, fallback in ((SO_RCVBUFFORCE, socket.SO_RCVBUF), (SO_SNDBUFFORCE, socket.SO_SNDBUF)):
            try:
                s.setsockopt(socket.SOL_SOCKET, opt, SOCK_BUF_BYTES)
            except PermissionError:
                s.setsockopt(socket.SOL_SOCKET, fallback, SOCK_BUF_BYTES)
        s.bind((intf, ETH_P_ALL))
        s.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, struct.pack("iHH8s", ifindex, PACKET_MR_PROMISC, 0, b""))
        s.setblocking(False)
    except BaseException:
        s.close()
        raise
    return s


def new_kernel_drops(s: socket.socket) -> int:
    """Frames the kernel dropped (receive buffer full) since the last call; reading resets them."""
    try:
        _, drops = _STATS.unpack(s.getsockopt(SOL_PACKET, PACKET_STATISTICS, _STATS.size))
    except OSError:
        return 0
    return drops


class PortSocket:
    """Batched receive/send on a port socket (the Python engine's I/O)."""

    def __init__(self, sock: socket.socket, intf: str, rx: MsgBatch, tx: MsgBatch):
        self.sock = sock
        self.intf = intf
        self.fd = sock.fileno()
        self.rx = rx
        self.tx = tx

    def recv(self) -> int:
        """Receive up to rx.n frames into the rx batch; returns how many (0 when none are waiting).

        Raises OSError for anything but "nothing to read" (ENETDOWN when the link went away)."""
        u64 = self.rx.u64
        for i in range(self.rx.filled):  # the kernel left the messages it filled at the length it wrote
            u64[i * 8 + _MSG_CONTROLLEN_U64] = RXCTL
        n = _recvmmsg(self.fd, self.rx.msgs_addr, self.rx.n, MSG_DONTWAIT, None)
        if n < 0:
            e = ctypes.get_errno()
            if e in (errno.EAGAIN, errno.EINTR):
                return 0
            raise OSError(e, f"recvmmsg on {self.intf}: {os.strerror(e)}")
        self.rx.filled = n
        return n

    def frame(self, i: int):
        """(frame as a new bytearray, vnet header to send it with or None, truncated?) of message i."""
        rx = self.rx
        off = i * SLOT
        u32 = rx.u32
        ln = u32[i * 16 + _MSG_LEN_U32]
        buf = rx.buf
        flags = buf[off]
        vnet = None
        if flags & VNET_F_NEEDS_CSUM or buf[off + 1]:
            v = bytearray(buf[off : off + VNET_LEN])
            v[0] &= ~VNET_F_DATA_VALID & 0xFF  # only meaningful on receive
            vnet = bytes(v)
        return buf[off + VNET_LEN : off + ln], vnet, bool(u32[i * 16 + _MSG_FLAGS_U32] & MSG_TRUNC)

    def stamp(self, i: int) -> float:
        """When the kernel received message i (time.time() seconds), 0.0 when it did not say."""
        rx = self.rx
        return read_cmsgs(rx.ctl, i * RXCTL, min(rx.u64[i * 8 + _MSG_CONTROLLEN_U64], RXCTL))[1]

    def send(self, frames: list, vnets: list) -> int:
        """Send frames (with their vnet headers, None = plain); returns how many the kernel took.

        Raises OSError for anything but a full send buffer."""
        tx = self.tx
        buf = tx.buf
        iov_len = tx.iov_len
        count = min(len(frames), tx.n)
        for i in range(count):
            f = frames[i]
            off = i * SLOT
            v = vnets[i]
            buf[off : off + VNET_LEN] = ZERO_VNET if v is None else v
            ln = len(f)
            buf[off + VNET_LEN : off + VNET_LEN + ln] = f
            iov_len[2 * i + 1] = VNET_LEN + ln
        n = _sendmmsg(self.fd, tx.msgs_addr, count, MSG_DONTWAIT)
        if n < 0:
            e = ctypes.get_errno()
            if e in (errno.EAGAIN, errno.ENOBUFS, errno.EINTR):
                return 0
            raise OSError(e, f"sendmmsg on {self.intf}: {os.strerror(e)}")
        return n
