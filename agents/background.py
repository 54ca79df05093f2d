"""Background traffic inside a Mininet host: the congestion DLCP is for.

Kinds (agent config `background.kind`):
- `udp_cbr`: UDP datagrams at a constant rate;
- `udp_onoff`: bursts at `rate_mbps` for `on_ms`, silence for `off_ms` (microbursts into a port);
  with `pattern = "exponential"` each burst and silence lasts an exponentially distributed time
  with those means, drawn from the flow's seed. Strictly periodic sources phase-lock with a
  training loop of near-commensurate period, so a run samples only a few burst alignments and
  its tail depends on where it happened to start;
- `tcp`: one long TCP flow, as fast as TCP lets it;
- `sink`: the receiving end on the destination host (discards UDP, drains TCP).
All at DSCP `dscp` (0 = background priority by default). Totals go to records/hN-background<i>.json.

Senders start with the other agents but send only once the runner releases them (it writes
progress/background-go, whose content is the Unix time it did so, once every worker finished its
first iteration); `start_s` counts from there. Starting the process then instead would lose its
start-up (Python and imports, seconds on a busy 2-core machine) from the measured iterations:
started late, the background missed the first third of the demo's. The record keeps when the
release came (`released_unix`) and when the first datagram went out (`start_unix`), so the report
can tell a late start (dlcp/reporting/keepup_check.py).

    python -m agents.background --config <run>/agents/hN-background.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import selectors
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from agents.common import stop_on_first_signal
from dlcp.experiment.agent_config import BackgroundAgentConfig, BackgroundFlow, Sink, load_agent_config
from dlcp.experiment.releases import BACKGROUND_GO, wait_for_release
from dlcp.settings import ConfigError


class Stop(Exception):
    """SIGTERM/SIGINT: finish cleanly and write totals."""


def load_config(path: str) -> BackgroundAgentConfig:
    try:
        return load_agent_config(path, "background")
    except ConfigError as e:
        raise SystemExit(f"background: {path}: {e}") from None


def _udp_socket(dscp: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    return s


def onoff_periods(bg: BackgroundFlow) -> Iterator[tuple[float, float]]:
    """(on seconds, off seconds) of each burst of a udp_onoff flow, in order, forever."""
    on_s, off_s = bg.on_ms / 1e3, bg.off_ms / 1e3
    if bg.pattern == "periodic":
        while True:
            yield on_s, off_s
    rng = random.Random(bg.seed)
    while True:
        yield rng.expovariate(1 / on_s), rng.expovariate(1 / off_s)


def send_udp(bg: BackgroundFlow, stop_at: float | None, totals: dict) -> None:
    """Paced UDP: `rate_mbps` during on-periods (always on for udp_cbr)."""
    s = _udp_socket(bg.dscp)
    payload = bytes(bg.packet_bytes)
    dst = (bg.dst_ip, bg.port)
    gap = len(payload) * 8 / (bg.rate_mbps * 1e6)  # seconds between datagrams
    periods = onoff_periods(bg) if bg.kind == "udp_onoff" else None
    on_s, off_s = next(periods) if periods else (None, 0.0)
    period_start = next_send = time.monotonic()
    while stop_at is None or time.monotonic() < stop_at:
        now = time.monotonic()
        if on_s is not None and now - period_start >= on_s:
            period_start = now + off_s
            next_send = period_start
            time.sleep(off_s)
            on_s, off_s = next(periods)
            continue
        if now < next_send:
            time.sleep(min(next_send - now, 0.002))
            continue
        try:
            s.sendto(payload, dst)
            totals["pkts"] += 1
            totals["bytes"] += len(payload)
        except OSError:  # ENOBUFS from the host NIC queue: the NIC dropped it, like hardware would
            totals["send_errors"] += 1
        next_send += gap
        if next_send < now - 0.05:  # fell far behind (descheduled): do not burst to catch up
            next_send = now


def send_tcp(bg: BackgroundFlow, stop_at: float | None, totals: dict) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            s = socket.create_connection((bg.dst_ip, bg.port), timeout=2)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"background: no TCP sink at {bg.dst_ip}:{bg.port}") from None
            time.sleep(0.2)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, bg.dscp << 2)
    s.settimeout(1.0)
    chunk = bytes(64 * 1024)
    while stop_at is None or time.monotonic() < stop_at:
        try:
            totals["bytes"] += s.send(chunk)
        except TimeoutError:
            continue
    s.close()


def sink(bg: Sink, totals: dict) -> None:
    """Discard UDP datagrams and drain TCP connections on `port` until stopped."""
    sel = selectors.DefaultSelector()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    udp.bind(("0.0.0.0", bg.port))
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.bind(("0.0.0.0", bg.port))
    tcp.listen(16)
    for s in (udp, tcp):
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
    buf = bytearray(1 << 16)
    while True:
        for key, _ in sel.select(timeout=1.0):
            s = key.fileobj
            try:
                if s is tcp:
                    conn, _ = tcp.accept()
                    conn.setblocking(False)
                    sel.register(conn, selectors.EVENT_READ)
                    continue
                n = s.recv_into(buf)
            except BlockingIOError:
                continue
            except OSError:
                n = 0
            if n == 0 and s is not udp:  # TCP peer closed
                sel.unregister(s)
                s.close()
                continue
            totals["bytes"] += n
            totals["pkts"] += 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    bg, host = cfg.background, cfg.host
    stop_on_first_signal(Stop)
    totals = {"host": host, "kind": bg.kind, "pkts": 0, "bytes": 0, "send_errors": 0, "start_unix": time.time()}
    try:
        if bg.kind == "sink":
            sink(bg, totals)
        else:
            totals.update(start_unix=None, start_s=bg.start_s)
            totals["released_unix"] = wait_for_release(cfg.run_dir, BACKGROUND_GO)
            time.sleep(bg.start_s)
            stop_s = bg.stop_s
            stop_at = time.monotonic() + (stop_s - bg.start_s) if stop_s else None
            totals["start_unix"] = time.time()
            (send_tcp if bg.kind == "tcp" else send_udp)(bg, stop_at, totals)
    except Stop:
        pass
    except OSError as e:
        print(f"background {host}: {e}", file=sys.stderr)
        return 1
    finally:
        totals["end_unix"] = time.time()
        started = totals["start_unix"]  # None: stopped before it was released
        totals["mbps"] = totals["bytes"] * 8 / max(totals["end_unix"] - started, 1e-9) / 1e6 if started else 0.0
        records = Path(cfg.run_dir) / "records"
        records.mkdir(parents=True, exist_ok=True)
        name = f"{host}-sink{bg.port}" if bg.kind == "sink" else f"{host}-background{bg.index}"
        tmp = records / f".{name}.json.tmp"
        tmp.write_text(json.dumps(totals, indent=1))
        os.replace(tmp, records / f"{name}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
