"""`dlcp bench datapath`, the UDP driver's half: CPU microseconds per datagram received, with every
receive path of the driver measured in the same run (rx_mirror.RX_MODES: "python", every datagram
through `ReceiverCore.on_datagram`, the baseline; "c-per-datagram", the C path passing up each
packet a FEEDBACK may come due on and each message's first; "c", the C path counting up to the
core's decisions).

One round: two `UdpTransport` endpoints on loopback in this process, the sender (always the
Python path: only the receiver's path varies) sending `messages` messages of `values` fp32 values
with congestion control on (so the receiver owes FEEDBACK every `feedback_every` packets). The
figure is the receive thread's CPU time (/proc schedstat, `threadtime.py`) over the datagrams it
received: everything that thread does per datagram (recvmmsg, the receive path, the core,
control frames, records). Its recvmmsg calls are timed too ("syscall": the extension times its
own; the Python path's libc call is timed in the thread's CPU time), and the C paths' receive core
("C core"); the rest is Python (the core or the mirror's takes and decisions, the datagrams passed
up, control frames, epoll). Rounds interleave the modes, so machine
noise spreads over all of them; each figure is the median over rounds with its range.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import time

import numpy as np

from dlcp.bench_output import emit
from dlcp.transport.api import Peer, SendInfo, TransportConfig
from dlcp.transport.rx_mirror import RX_MODES
from dlcp.transport.udp_driver import UdpTransport
from dlcp.wire.chunking import MessageId, packetize
from dlcp.wire.header import PHASE_P2P
from dlcp.wire.tagging import TaggingConfig, tag_message

BASELINE = "python"


def _free_ports(ip: str) -> int:
    """A port p with p (UDP and TCP) and p + 1 (TCP) free on `ip`."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.bind((ip, 0))
            port = u.getsockname()[1]
        try:
            for p in (port, port + 1):
                with socket.socket() as s:
                    s.bind((ip, p))
            return port
        except OSError:
            continue
    raise RuntimeError(f"no free port pair on {ip}")


def _batch(values: int, msg_id: int):
    g = np.random.default_rng(msg_id).standard_normal(values, dtype=np.float32)
    starts = np.linspace(0, values, 50, endpoint=False).astype(np.int64)
    tags = tag_message(g, starts, np.arange(50), 50, TaggingConfig(policy="dlcp"))
    return packetize(g, MessageId(job_id=1, src_rank=0, iter=0, msg_id=msg_id, phase=PHASE_P2P), tags)


def _time_recvmmsg(t: UdpTransport) -> list[float]:
    """The Python path's recvmmsg calls (udpio.BatchReceiver's libc function), timed in the receive
    thread's CPU time: a one-item list that grows as they run (the C path times its own)."""
    total = [0.0]
    fn, clock = t.batch_receiver._fn, time.thread_time
    if fn is None:
        return total

    def timed(*a):
        t0 = clock()
        try:
            return fn(*a)
        finally:
            total[0] += clock() - t0

    t.batch_receiver._fn = timed
    return total


def udp_round(mode: str, values: int, messages: int, timeout: float = 60.0) -> dict:
    """One round in receive path `mode`: the receiver's figures (see the module docstring)."""
    rip, sip = "127.0.0.1", "127.0.0.2"
    rport, sport = _free_ports(rip), _free_ports(sip)

    def config(rank: int, ip: str, port: int) -> TransportConfig:
        return TransportConfig(
            rank=rank,
            ip=ip,
            data_port=port,
            control_port=port + 1,
            deadline_ms=60_000,
            rcvbuf_bytes=32 << 20,
            cc="dctcp",
        )

    rcv = UdpTransport(
        config(1, rip, rport),
        [Peer(0, sip, sport, sport + 1)],
        rx_path=mode,
    )
    syscall_s = _time_recvmmsg(rcv) if mode == "python" else None
    snd = None
    try:
        snd = UdpTransport(
            config(0, sip, sport),
            [Peer(1, rip, rport, rport + 1)],
            rx_path="python",
        )
        snd.connect(timeout=timeout)
        batches = [_batch(values, m + 1) for m in range(messages)]
        for m, batch in enumerate(batches):
            snd.send(1, batch, SendInfo(rec_msg_id=m + 1, layer_first=0, layer_last=49)).wait(timeout)
            rcv.recv(0, 0, PHASE_P2P, m + 1, timeout=timeout)
        st = rcv.stats()
    finally:  # the receiver first: it has nothing to say when the sender's connection goes
        rcv.close()
        if snd is not None:
            snd.close()
    return _receiver_figures(mode, st, syscall_s)


def _receiver_figures(mode: str, st: dict, syscall_s: list[float] | None) -> dict:
    """A round's figures from the receiver's stats (see the module docstring); `syscall_s`: the
    Python path's timed recvmmsg calls."""
    n = st["packets_received"] + st["duplicates"]
    out = {"mode": mode, "datagrams": n, "us_per_datagram": st["threads"]["rx"]["cpu_s"] * 1e6 / n}
    path = st.get("rx_path")
    if syscall_s is not None:
        out["syscall_us"] = syscall_s[0] * 1e6 / n
    if path:
        out["syscall_us"] = path["syscall_s"] * 1e6 / n
        out["c_core_us"] = path["absorb_s"] * 1e6 / n
        out["taken_in_c"] = path["absorbed"] / n
        out["python_wakes"] = path["serve_returns"] / n  # the receive thread's returns from its wait in C
    return out


def _paced_datagrams(packets: int, messages: int, values_per_pkt: int) -> list[bytes]:
    """`messages` messages of `packets` full data packets each, as a sender puts them on the wire."""
    from dlcp.wire.header import DlcpHeader

    payload = bytes(4 * values_per_pkt)
    return [
        DlcpHeader(src_rank=0, job_id=1, iter=0, msg_id=m + 1, n_pkts=packets, seq=q, offset=q * values_per_pkt).pack()
        + payload
        for m in range(messages)
        for q in range(packets)
    ]


def paced_round(mode: str, packets: int, messages: int, interval_us: float, timeout: float = 30.0) -> dict:
    """One paced round in receive path `mode`: datagrams from a plain UDP socket, one every
    `interval_us` (a host behind a link that delivers a frame at a time, as the demo's hosts at
    50 Mbit/s: 240 us), so each wakes the receive thread on its own and nothing is batched. The
    receiver's figures as `udp_round`'s, and its receive thread's returns into Python per datagram
    (the C paths' `serve`; the Python path wakes in Python for every one)."""
    rip = "127.0.0.1"
    cfg = TransportConfig(rank=1, ip=rip, data_port=0, control_port=0, rcvbuf_bytes=32 << 20)
    rcv = UdpTransport(cfg, [Peer(0, "127.0.0.2", 9, 10)], rx_path=mode)
    syscall_s = _time_recvmmsg(rcv) if mode == "python" else None
    frames = _paced_datagrams(packets, messages, cfg.values_per_pkt)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.2", 0))
            dst = (rip, rcv.data_port)
            t0 = time.perf_counter()
            for i, frame in enumerate(frames):
                wait = t0 + i * interval_us * 1e-6 - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                s.sendto(frame, dst)
        deadline = time.monotonic() + timeout
        while rcv.stats()["packets_received"] < len(frames) and time.monotonic() < deadline:
            time.sleep(0.01)
        st = rcv.stats()
    finally:
        rcv.close()
    return _receiver_figures(mode, st, syscall_s)


def _median_range(xs: list[float], digits: int = 2) -> str:
    return f"{statistics.median(xs):.{digits}f} ({min(xs):.{digits}f}-{max(xs):.{digits}f})"


def udp_rows(rounds: list[dict]) -> tuple[list[dict], dict]:
    """Table rows per mode (median and range over rounds) and the JSON result."""
    by_mode: dict[str, list[dict]] = {}
    for r in rounds:
        by_mode.setdefault(r["mode"], []).append(r)
    base = statistics.median(r["us_per_datagram"] for r in by_mode[BASELINE])
    rows, result = [], {}
    for mode, rs in by_mode.items():
        us = [r["us_per_datagram"] for r in rs]
        ratios = [base / u for u in us]
        row = {
            "driver": "udp",
            "receive path": mode,
            "rounds": len(rs),
            "us/datagram": _median_range(us),
            f"x less than {BASELINE}": _median_range(ratios),
            "syscall us": _median_range([r["syscall_us"] for r in rs]) if "syscall_us" in rs[0] else "-",
            "C core us": _median_range([r["c_core_us"] for r in rs]) if "c_core_us" in rs[0] else "-",
            "taken in C": f"{statistics.median(r['taken_in_c'] for r in rs):.1%}" if "taken_in_c" in rs[0] else "-",
        }
        row["returns into Python / datagram"] = (
            _median_range([r["python_wakes"] for r in rs], 3) if "python_wakes" in rs[0] else "-"
        )
        rows.append(row)
        result[mode] = {
            "us_per_datagram": us,
            "speedup_vs_baseline": statistics.median(ratios),
            "datagrams": [r["datagrams"] for r in rs],
            **{k: [r[k] for r in rs] for k in ("syscall_us", "c_core_us", "taken_in_c", "python_wakes") if k in rs[0]},
        }
    return rows, result


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dlcp bench datapath", description=__doc__.split("\n\n")[0])
    ap.add_argument("--values", type=int, default=1 << 21, help="fp32 values per message (default 2 Mi: 8 MB)")
    ap.add_argument("--messages", type=int, default=2, help="messages per round")
    ap.add_argument("--rounds", type=int, default=5, help="rounds per receive path, interleaved")
    ap.add_argument(
        "--modes", default="python,c-per-datagram,c", help=f"receive paths, of {', '.join(RX_MODES)} (with {BASELINE})"
    )
    ap.add_argument(
        "--paced-us",
        type=float,
        default=240.0,
        help="the paced half: one datagram every this many us (default 240: a frame at 50 Mbit/s; 0: skip it)",
    )
    ap.add_argument("--paced-packets", type=int, default=30, help="packets per message in the paced half")
    ap.add_argument("--paced-messages", type=int, default=40, help="messages per paced round")
    ap.add_argument("--skip-ns3", action="store_true", help="the UDP driver only")
    ap.add_argument("--json", action="store_true", help="one JSON object as the last line")
    return ap


def bench_udp(args) -> tuple[list[dict], dict]:
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in RX_MODES]
    if bad or BASELINE not in modes:
        raise SystemExit(
            f"dlcp bench datapath: --modes {args.modes!r}: modes of {', '.join(RX_MODES)}, with {BASELINE}"
        )
    rounds, paced = [], []
    t0 = time.perf_counter()
    for _ in range(args.rounds):
        for mode in modes:
            rounds.append(udp_round(mode, args.values, args.messages))
            if args.paced_us > 0:
                paced.append(paced_round(mode, args.paced_packets, args.paced_messages, args.paced_us))
    rows, result = udp_rows(rounds)
    if paced:
        paced_rows, result["paced"] = udp_rows(paced)
        result["paced"]["interval_us"] = args.paced_us
        rows = [*rows, *({**r, "driver": f"udp, paced {args.paced_us:g} us"} for r in paced_rows)]
    result["seconds"] = round(time.perf_counter() - t0, 1)
    return rows, result


def print_udp(rows: list[dict], result: dict, as_json: bool) -> None:
    emit(
        "UDP driver on loopback, in bulk and paced: receive thread CPU per datagram received (median (range) over "
        "interleaved rounds)",
        rows,
        {"udp": result},
        as_json,
    )
