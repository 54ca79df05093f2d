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
    n = st["packets_received"] + st["duplicates"]
    out = {"mode": mode, "datagrams": n, "us_per_datagram": st["threads"]["rx"]["cpu_s"] * 1e6 / n}
    path = st.get("rx_path")
    if syscall_s is not None:
        out["syscall_us"] = syscall_s[0] * 1e6 / n
    if path:
        out["syscall_us"] = path["syscall_s"] * 1e6 / n
        out["c_core_us"] = path["absorb_s"] * 1e6 / n
        out["taken_in_c"] = path["absorbed"] / n
    return out


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
        rows.append(row)
        result[mode] = {
            "us_per_datagram": us,
            "speedup_vs_baseline": statistics.median(ratios),
            "datagrams": [r["datagrams"] for r in rs],
            **{k: [r[k] for r in rs] for k in ("syscall_us", "c_core_us", "taken_in_c") if k in rs[0]},
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
    rounds = []
    t0 = time.perf_counter()
    for _ in range(args.rounds):
        for mode in modes:
            rounds.append(udp_round(mode, args.values, args.messages))
    rows, result = udp_rows(rounds)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    return rows, result


def print_udp(rows: list[dict], result: dict, as_json: bool) -> None:
    emit(
        "UDP driver on loopback: receive thread CPU per datagram received (median (range) over interleaved rounds)",
        rows,
        {"udp": result},
        as_json,
    )
