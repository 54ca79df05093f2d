"""`dlcp bench bmv2`: packets/s that simple_switch_grpc forwards running p4/dlcp.p4 (logging off),
beside the same sender and receiver on a bare veth pair measured in the same run (the ceiling of
the measurement itself).

One process blasts full DLCP data frames into switch port 1 through an AF_PACKET socket, another
counts what comes out of port 2; the forwarded rate is the count over the sending time. Needs root
and bmv2; the machine's other load shows in the figures.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

from dlcp.bench_output import emit
from dlcp.network.switch_runtime import DATA_FRAME_BYTES, Port, Route, SwitchConfig, SwitchTopo, runtime_for
from dlcp.wire.header import MAX_PAYLOAD_BYTES, DlcpHeader, dscp_of
from emulation import netns
from emulation.benches import machine_to_itself
from emulation.bmv2 import build as p4build
from emulation.bmv2 import simple_switch as bmv2switch


def _frame() -> bytes:
    """One full DLCP data frame (1466 bytes) from 10.0.0.1 to 10.0.0.2, prio 3."""
    import ipaddress
    import struct

    payload = DlcpHeader(prio=3, seq=0, n_pkts=1).pack() + bytes(MAX_PAYLOAD_BYTES)
    udp = struct.pack("!HHHH", 40000, 9910, 8 + len(payload), 0) + payload  # checksum 0: none
    src, dst = ipaddress.IPv4Address("10.0.0.1").packed, ipaddress.IPv4Address("10.0.0.2").packed
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, dscp_of(3, 0) << 2, 20 + len(udp), 0, 0, 64, 17, 0, src, dst)
    s = sum(struct.unpack("!10H", ip))
    s = (s & 0xFFFF) + (s >> 16)
    ip = ip[:10] + struct.pack("!H", ~((s & 0xFFFF) + (s >> 16)) & 0xFFFF) + ip[12:]
    frame = bytes(6) + bytes.fromhex("000000000001") + b"\x08\x00" + ip + udp
    assert len(frame) == DATA_FRAME_BYTES
    return frame


def _count(ifname: str, seconds: float, length: int, ready, result) -> None:
    s = netns.raw_socket(ifname, rcvbuf=32 << 20)
    s.settimeout(0.2)
    n = 0
    ready.set()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            frame, addr = s.recvfrom(65535)
        except TimeoutError:
            continue
        if addr[2] != socket.PACKET_OUTGOING and len(frame) == length:
            n += 1
    result.put(n)


def _blast(ifname: str, seconds: float, frame: bytes, rate_pps: float | None = None) -> int:
    """Send for `seconds`, as fast as possible or paced to `rate_pps` (in batches of 64)."""
    s = netns.raw_socket(ifname)
    sent = 0
    start = time.monotonic()
    end = start + seconds
    while (now := time.monotonic()) < end:
        if rate_pps is not None:
            ahead = sent / rate_pps - (now - start)
            if ahead > 0:
                time.sleep(ahead)
        for _ in range(64):
            try:
                s.send(frame)
                sent += 1
            except OSError:  # ENOBUFS: the sender outran the device queue
                pass
    s.close()
    return sent


def measure(tx_if: str, rx_if: str, seconds: float, rate_pps: float | None = None) -> dict:
    frame = _frame()
    ctx = mp.get_context("spawn")  # the P4Runtime session's gRPC threads make fork() unsafe
    ready, result = ctx.Event(), ctx.Queue()
    counter = ctx.Process(target=_count, args=(rx_if, seconds + 1.0, len(frame), ready, result))
    counter.start()
    try:
        ready.wait(5)
        sent = _blast(tx_if, seconds, frame, rate_pps)
        received = result.get(timeout=seconds + 10)
    finally:
        counter.join(5)
        if counter.is_alive():
            counter.kill()
    kpps = received / seconds / 1e3
    return {"sent": sent, "received": received, "kpps": kpps, "Mbit_s": kpps * 1e3 * len(frame) * 8 / 1e6}


def bench_bmv2(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="dlcp bench bmv2", description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="sending time per measurement")
    ap.add_argument(
        "--offered-kpps",
        type=float,
        default=None,
        help="pace the sender (default: as fast as it can, which also loads the CPU bmv2 needs)",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("dlcp bench bmv2: needs root (veth pairs and raw sockets)")
    binary = bmv2switch.find_bmv2()
    if binary is None:
        raise SystemExit(f"dlcp bench bmv2: {bmv2switch.missing_bmv2_message()}")
    try:
        build = p4build.ensure_built()
    except p4build.P4BuildError as e:
        raise SystemExit(f"dlcp bench bmv2: {e}") from None

    pre = netns.unique_prefix("pb")
    pairs = [(f"{pre}s1", f"{pre}h1"), (f"{pre}s2", f"{pre}h2"), (f"{pre}d1", f"{pre}d2")]
    topo = SwitchTopo(
        f"{pre}s",
        1,
        (
            Port(1, pairs[0][0], "h1", "00:00:00:00:00:01", queue_depth_pkts=None),
            Port(2, pairs[1][0], "h2", "00:00:00:00:00:02", queue_depth_pkts=None),
        ),
        (Route("10.0.0.1/32", (1,)), Route("10.0.0.2/32", (2,))),
    )
    runtime = runtime_for(topo, SwitchConfig(policy="dlcp", load_balancing="spray_random"))
    with (
        machine_to_itself("dlcp bench bmv2"),
        netns.Lab("pb") as lab,
        tempfile.TemporaryDirectory(prefix="dlcp-bench-bmv2-") as run_dir,
    ):
        for a, b in pairs:
            lab.veth(a, None, b, None, offloads=True)
        rate = args.offered_kpps * 1e3 if args.offered_kpps else None
        direct = measure(pairs[2][0], pairs[2][1], args.seconds, rate)
        sw = bmv2switch.start_bmv2(
            f"{pre}s",
            runtime,
            {1: pairs[0][0], 2: pairs[1][0]},
            Path(run_dir),
            grpc_port=bmv2switch.free_port(),
            thrift_port=bmv2switch.free_port(),
        )
        try:
            through = measure(pairs[0][1], pairs[1][1], args.seconds, rate)
        finally:
            sw.stop(dump_counters=False)
    rows = [{"path": "veth, no switch", **direct}, {"path": "bmv2 p4/dlcp.p4", **through}]
    result = {
        "bmv2_kpps": through["kpps"],
        "direct_kpps": direct["kpps"],
        "frame_bytes": DATA_FRAME_BYTES,
        "seconds": args.seconds,
        "offered_kpps": args.offered_kpps,
        "bmv2": bmv2switch.bmv2_version(binary),
        "p4c": build.p4c_version,
    }
    offered = f"offered {args.offered_kpps:g} kpps" if args.offered_kpps else "unpaced sender"
    emit(
        f"bmv2 forwarding, {DATA_FRAME_BYTES}-byte DLCP frames, logging off, {offered}, {args.seconds:g} s "
        f"(shared {os.cpu_count()}-core machine: noisy)",
        rows,
        result,
        args.json,
    )
    return 0


if __name__ == "__main__":
    sys.exit(bench_bmv2(sys.argv[1:]))
