"""`python -m emulation.blaster`: send one frame over and over from an interface, as fast as the
kernel takes it (sendmmsg of 256 copies per call, nothing rebuilt in between), for benchmarks that
need a sender faster than the thing they measure. Prints the frames sent on exit."""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import socket
import sys
import time

from emulation.refswitch.afpacket import IOVec, MMsgHdr, _sendmmsg


def blast(intf: str, frame: bytes, seconds: float, burst: int = 256) -> int:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    s.setsockopt(263, 20, 1)  # PACKET_QDISC_BYPASS
    s.bind((intf, 0))
    buf = ctypes.create_string_buffer(frame, len(frame))
    iov = (IOVec * burst)()
    msgs = (MMsgHdr * burst)()
    for i in range(burst):
        iov[i].base = ctypes.addressof(buf)
        iov[i].len = len(frame)
        msgs[i].hdr.iov = ctypes.addressof(iov[i])
        msgs[i].hdr.iovlen = 1
    fd, addr = s.fileno(), ctypes.addressof(msgs)
    sent = 0
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        n = _sendmmsg(fd, addr, burst, 0)
        if n > 0:
            sent += n
        elif ctypes.get_errno() not in (11, 105, 4):  # EAGAIN, ENOBUFS, EINTR
            raise OSError(ctypes.get_errno(), f"sendmmsg on {intf}: {os.strerror(ctypes.get_errno())}")
    return sent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m emulation.blaster", description=__doc__.splitlines()[0])
    ap.add_argument("--intf", required=True)
    ap.add_argument("--frame-hex", required=True, help="the Ethernet frame, hex")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--cpu", type=int)
    args = ap.parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    sent = blast(args.intf, bytes.fromhex(args.frame_hex), args.seconds)
    print(f"sent {sent}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
