"""`dlcp bench transport`: goodput of one large message over an emulated link and over loopback.

The emulated link is a veth pair between two network namespaces with TBF at `--link-mbps` on the
sender's side (root). Each transfer runs a receiver and a sender process (`--peer recv|send`, this
module), one DLCP message of `--size-mb` megabytes (tagged with the dlcp policy over 50 layers).
Goodput = delivered payload bits / message completion time (first packet sent -> STOP received).
A transfer whose message was forced (FORCE_STOP: data missing beyond its budget) delivers no
goodput: its row counts it under `forced` and its goodput comes from the other runs only (none if
every run was forced). The link rate counts Ethernet frames (TBF shapes skb lengths, which include
the MAC header), so the best possible fraction is 1400 / (1400 + 24 DLCP + 8 UDP + 20 IP + 14
Ethernet) = 95.5 %.

Variants on the link: DLCP as configured by default (congestion control on, no pacing; its 256 KB
send buffer makes the socket block while the TBF queue is full, as TCP's small queues do), DLCP
paced at the link rate, DLCP reliable (budget 0), plain TCP (the baseline), and DLCP with a 1 MB
send buffer (larger than the TBF queue: without congestion control the qdisc drops thousands of
packets; with it, the window keeps the queue within bounds). The headline `goodput_mbps` is the
default DLCP. Loopback: default DLCP between 127.0.0.2 and 127.0.0.1. Every row shows the median and
range of its runs (goodput over the runs not forced; lost and retransmitted packets and rounds
over every run), the forced runs, and the protected packets lost in all of them (must be 0);
`--json` also keeps every run's own figures (`per_run`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = str(Path(__file__).resolve().parents[2])
FRAME_OVERHEAD = 24 + 8 + 20 + 14


# --- one side of one transfer (runs in its own process) ----------------------------------------------


def peer_main(args) -> int:
    import numpy as np

    from dlcp.transport.api import Peer, SendInfo, TransportConfig
    from dlcp.transport.factory import make_transport
    from dlcp.wire.chunking import MessageId, packetize
    from dlcp.wire.header import PHASE_P2P
    from dlcp.wire.tagging import TaggingConfig, tag_message

    ru = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = ru.ru_utime + ru.ru_stime  # imports and set-up are not the transfer
    me, other = (0, 1) if args.peer == "send" else (1, 0)
    cfg = TransportConfig(
        rank=me,
        ip=args.ip,
        data_port=args.port,
        control_port=args.port + 1,
        pacing_mbps=args.pacing_mbps,
        reliable=args.reliable,
        send_impl=args.send_impl,
        deadline_ms=60_000,
        rcvbuf_bytes=32 << 20,
        transport=args.transport,
        cc=args.cc,
        **({"sndbuf_bytes": args.sndbuf_kb << 10} if args.sndbuf_kb else {}),
    )
    t = make_transport(cfg, [Peer(other, args.peer_ip, args.port, args.port + 1)])
    try:
        if args.peer == "recv":
            r = t.recv(0, 0, PHASE_P2P, 1, timeout=args.timeout)
            out = {"lost_pkts": r.lost_pkts, "stats": t.stats()}
        else:
            n = args.values
            g = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
            starts = np.linspace(0, n, 50, endpoint=False).astype(np.int64)
            tags = tag_message(g, starts, np.arange(50), 50, TaggingConfig(policy="dlcp"))
            batch = packetize(g, MessageId(job_id=1, src_rank=0, iter=0, msg_id=1, phase=PHASE_P2P), tags)
            t.connect(timeout=args.timeout)
            time.sleep(0.2)  # let the receiver's side settle (its accept, our TCP handshake)
            res = t.send(1, batch, SendInfo(rec_msg_id=1, layer_first=0, layer_last=49)).wait(args.timeout)
            n_pkts = len(batch)
            delivered = 0 if res.forced else n * 4 * (n_pkts - res.lost_pkts) / n_pkts
            out = {
                "mct_us": res.mct_us,
                "lost_pkts": res.lost_pkts,
                "protected_lost": res.protected_lost,
                "retx_pkts": res.retx_pkts,
                "rounds": res.rounds,
                "forced": res.forced,
                "pkts": n_pkts,
                "bytes": n * 4,
                "goodput_mbps": delivered * 8 / res.mct_us,
                "stats": t.stats(),
            }
    finally:
        t.close()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    out["cpu_s"] = ru.ru_utime + ru.ru_stime - cpu0
    print(json.dumps(out), flush=True)
    return 0


# --- orchestration --------------------------------------------------------------------------------------


def _free_port(ip: str) -> int:
    for _ in range(50):
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind((ip, 0))
        port = u.getsockname()[1]
        u.close()
        try:
            for p in (port, port + 1):
                s = socket.socket()
                s.bind((ip, p))
                s.close()
            return port
        except OSError:
            continue
    raise RuntimeError("no free port pair")


def transfer(
    values: int,
    recv_ip: str,
    send_ip: str,
    port: int,
    prefixes=([], []),
    pacing: float = 0.0,
    reliable: bool = False,
    transport: str = "dlcp",
    send_impl: str = "sendmmsg",
    sndbuf_kb: int = 0,
    timeout: float = 120.0,
    cc: str = "dctcp",
) -> dict:
    """One message from a sender process to a receiver process; returns the sender's figures."""
    common = [
        "--values",
        str(values),
        "--port",
        str(port),
        "--pacing-mbps",
        str(pacing),
        "--transport",
        transport,
        "--send-impl",
        send_impl,
        "--timeout",
        str(timeout),
        "--sndbuf-kb",
        str(sndbuf_kb),
        "--cc",
        cc,
    ] + (["--reliable"] if reliable else [])
    me = [sys.executable, "-m", "emulation.benches.transport"]
    env = dict(os.environ, PYTHONPATH=REPO)
    rcv = subprocess.Popen(
        prefixes[0] + me + ["--peer", "recv", "--ip", recv_ip, "--peer-ip", send_ip] + common,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    snd = None
    try:
        time.sleep(0.3)
        snd = subprocess.Popen(
            prefixes[1] + me + ["--peer", "send", "--ip", send_ip, "--peer-ip", recv_ip] + common,
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        s_out, s_err = snd.communicate(timeout=timeout + 30)
        if snd.returncode:
            rcv.kill()
        r_out, r_err = rcv.communicate(timeout=30)
    finally:
        for p in (snd, rcv):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    if snd.returncode or rcv.returncode:
        raise RuntimeError(
            f"transfer failed: sender {snd.returncode}: {s_err.strip()[-300:]} | "
            f"receiver {rcv.returncode}: {r_err.strip()[-300:]}"
        )
    out = json.loads(s_out.strip().splitlines()[-1])
    out["recv_cpu_s"] = json.loads(r_out.strip().splitlines()[-1])["cpu_s"]
    return out


PER_RUN = ("goodput_mbps", "mct_us", "forced", "lost_pkts", "protected_lost", "retx_pkts", "rounds")
SPREAD = ("lost_pkts", "retx_pkts", "rounds")  # per run: median with the range over the runs


def _row(name, results, link_mbps):
    """Goodput: median and range over the runs whose message was not forced (forced runs are only
    counted). Lost and retransmitted packets and rounds: median and range over every run, each run
    counted whole; protected packets lost: the total over the runs (must be 0). `per_run` keeps
    each run's own figures."""
    ok = [r for r in results if not r["forced"]]
    good = statistics.median(r["goodput_mbps"] for r in ok) if ok else None
    row = {
        "variant": name,
        "runs": len(results),
        "forced": sum(bool(r["forced"]) for r in results),
        "goodput_mbps": good,
        "min_mbps": min((r["goodput_mbps"] for r in ok), default=None),
        "max_mbps": max((r["goodput_mbps"] for r in ok), default=None),
        "fraction_of_link": good / link_mbps if link_mbps and good is not None else None,
        "mct_ms": statistics.median(r["mct_us"] for r in ok) / 1e3 if ok else None,
        "protected_lost": sum(r["protected_lost"] for r in results),
        "send_cpu_s": statistics.median(r["cpu_s"] for r in results),
        "recv_cpu_s": statistics.median(r["recv_cpu_s"] for r in results),
    }
    for k in SPREAD:
        values = [r[k] for r in results]
        row.update({k: statistics.median(values), f"{k}_min": min(values), f"{k}_max": max(values)})
    row["per_run"] = [{k: r[k] for k in PER_RUN} for r in results]
    return row


def table_rows(rows: list[dict]) -> list[dict]:
    """The printed table: each spread as "median (min-max)" (one value when every run agreed)."""

    def spread(r, k):
        lo, hi = r[f"{k}_min"], r[f"{k}_max"]
        return f"{r[k]:g}" if lo == hi else f"{r[k]:g} ({lo:g}-{hi:g})"

    out = []
    for r in rows:
        cells = {k: v for k, v in r.items() if k != "per_run" and not k.endswith(("_min", "_max"))}
        cells["goodput_mbps"] = "forced" if r["goodput_mbps"] is None else r["goodput_mbps"]
        cells.update({k: spread(r, k) for k in SPREAD})
        out.append(cells)
    return out


def main(argv: list[str]) -> int:
    from dlcp.bench_output import emit

    ap = argparse.ArgumentParser(prog="dlcp bench transport", description=__doc__.splitlines()[0])
    ap.add_argument("--link-mbps", type=float, default=200.0, help="emulated link rate (TBF), Mbit/s")
    ap.add_argument("--size-mb", type=float, default=25.0, help="message size in MB (10^6 bytes)")
    ap.add_argument("--repeats", type=int, default=3, help="transfers per variant (median reported)")
    ap.add_argument("--send-impl", default="sendmmsg", choices=("sendmmsg", "sendmsg"))
    ap.add_argument("--skip-link", action="store_true", help="loopback only (no root needed)")
    ap.add_argument("--cc", default="dctcp", choices=("dctcp", "none"), help="congestion control of every DLCP run")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.link_mbps <= 0 or args.size_mb <= 0 or args.repeats < 1:
        raise SystemExit("dlcp bench transport: --link-mbps and --size-mb must be > 0, --repeats >= 1")
    values = int(args.size_mb * 1e6 / 4)
    rows, link = [], {}
    runs = lambda **kw: [
        _progress(transfer(values, send_impl=args.send_impl, cc=args.cc, **kw), kw) for _ in range(args.repeats)
    ]

    port = _free_port("127.0.0.1")
    loop = _row("loopback dlcp", runs(recv_ip="127.0.0.1", send_ip="127.0.0.2", port=port), None)
    rows.append(loop)
    if args.skip_link or os.geteuid() != 0:
        if not args.skip_link:
            print(
                "dlcp bench transport: the emulated link needs root (network namespaces); loopback only",
                file=sys.stderr,
            )
    else:
        from emulation.benches import machine_to_itself
        from emulation.netns import RateLink

        with machine_to_itself("dlcp bench transport"), RateLink("tpb", args.link_mbps) as net:
            pre = (net.b.prefix(), net.a.prefix())
            kw = {"recv_ip": net.b.ip, "send_ip": net.a.ip, "port": 9910, "prefixes": pre}
            variants = [
                ("link dlcp", dict(kw)),
                ("link dlcp paced", dict(kw, pacing=args.link_mbps)),
                ("link dlcp reliable", dict(kw, reliable=True)),
                ("link tcp", dict(kw, transport="tcp")),
                ("link dlcp sndbuf 1MB", dict(kw, sndbuf_kb=1024)),
            ]
            for name, v in variants:
                link[name] = _row(name, runs(**v), args.link_mbps)
                rows.append(link[name])
            qdisc = net.qdisc_stats()
        print("sender qdisc after all link runs:\n" + qdisc.rstrip(), file=sys.stderr)
    headline = link.get("link dlcp")
    result = {
        "link_mbps": args.link_mbps,
        "cc": args.cc,
        "goodput_mbps": headline["goodput_mbps"] if headline else None,
        "fraction_of_link": headline["fraction_of_link"] if headline else None,
        "loopback_mbps": loop["goodput_mbps"],
        "size_mb": args.size_mb,
        "max_fraction": 1400 / (1400 + FRAME_OVERHEAD),
        "variants": {
            r["variant"]: {
                k: r[k]
                for k in (
                    "runs",
                    "forced",
                    "goodput_mbps",
                    "min_mbps",
                    "max_mbps",
                    "fraction_of_link",
                    "protected_lost",
                    *(f"{k}{end}" for k in SPREAD for end in ("", "_min", "_max")),
                    "per_run",
                )
            }
            for r in rows
        },
    }
    table = table_rows(rows)
    emit(
        f"one {args.size_mb:g} MB DLCP message (cc {args.cc}): goodput (median and range of {args.repeats}; a forced "
        f"run counts no goodput) over a {args.link_mbps:g} Mbit/s emulated link and over loopback (shared CPU: "
        f"figures are noisy)",
        table,
        result,
        args.json,
    )
    return 0


def _progress(res: dict, kw: dict) -> dict:
    where = "link" if kw.get("prefixes") else "loopback"
    print(
        f"  {where} {kw.get('transport', 'dlcp')} pacing={kw.get('pacing', 0)} reliable={kw.get('reliable', False)} "
        f"sndbuf_kb={kw.get('sndbuf_kb', 0) or 'default'}: {res['goodput_mbps']:.1f} Mbit/s, "
        f"{'FORCED, ' if res['forced'] else ''}lost {res['lost_pkts']}, protected lost {res['protected_lost']}, "
        f"retx {res['retx_pkts']}, rounds {res['rounds']}",
        file=sys.stderr,
        flush=True,
    )
    return res


def _peer_args(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--peer", choices=("send", "recv"), required=True)
    ap.add_argument("--ip", required=True)
    ap.add_argument("--peer-ip", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--values", type=int, required=True)
    ap.add_argument("--pacing-mbps", type=float, default=0.0)
    ap.add_argument("--reliable", action="store_true")
    ap.add_argument("--transport", default="dlcp")
    ap.add_argument("--send-impl", default="sendmmsg")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--sndbuf-kb", type=int, default=0, help="0 = the transport's default")
    ap.add_argument("--cc", default="dctcp")
    return ap.parse_args(argv)


if __name__ == "__main__":
    sys.exit(peer_main(_peer_args(sys.argv[1:])))
