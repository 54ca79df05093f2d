"""`python -m emulation.benches.blaster`: send one frame over and over from an interface (sendmmsg of
copies, nothing rebuilt in between), as fast as the kernel takes it or paced at `--rate-pps`, for
benchmarks that need a sender faster than the thing they measure. Prints `sending` when its start-up
is over (a caller times its measurement from there) and the frames sent on exit."""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import socket
import sys
import time

from emulation.builtin_switch.afpacket import IOVec, MMsgHdr, _sendmmsg

PACE_PERIOD_S = 0.0005  # a paced sender sends a burst every half millisecond


def blast(intf: str, frame: bytes, seconds: float, burst: int = 256, rate_pps: float | None = None) -> int:
    """Frames sent in `seconds`; with `rate_pps`, bursts on an absolute schedule (a late wake-up
    is made up by the next burst, never by more than 50 ms of backlog)."""
    if rate_pps:
        burst = max(1, min(burst, round(rate_pps * PACE_PERIOD_S)))
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
    now = time.monotonic()
    stop, due = now + seconds, now
    while now < stop:
        n = _sendmmsg(fd, addr, burst, 0)
        if n > 0:
            sent += n
        elif ctypes.get_errno() not in (11, 105, 4):  # EAGAIN, ENOBUFS, EINTR
            raise OSError(ctypes.get_errno(), f"sendmmsg on {intf}: {os.strerror(ctypes.get_errno())}")
        now = time.monotonic()
        if rate_pps:
            due = max(due + max(n, 1) / rate_pps, now - 0.05)
            if due > now:
                time.sleep(due - now)
                now = time.monotonic()
    return sent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m emulation.blaster", description=__doc__.splitlines()[0])
    ap.add_argument("--intf", required=True)
    ap.add_argument("--frame-hex", required=True, help="the Ethernet frame, hex")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rate-pps", type=float, help="pace the frames at this rate (default: as fast as possible)")
    ap.add_argument("--cpu", type=int)
    ap.add_argument(
        "--realtime",
        action="store_true",
        help="run under SCHED_RR: on a shared machine the offered load is then the sender's, not "
        "what other processes leave it",
    )
    args = ap.parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    if args.realtime:
        os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(5))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("sending", flush=True)
    sent = blast(args.intf, bytes.fromhex(args.frame_hex), args.seconds, rate_pps=args.rate_pps)
    print(f"sent {sent}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
