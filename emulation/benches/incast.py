"""`dlcp bench incast`: N senders push to one receiver through the built-in switch at once.

Every sender and the receiver are network namespaces on veths to one built-in switch process
(`emulation/builtin_switch`, C engine); the switch port toward the receiver drains at `--link-mbps`
(8 strict-priority queues, the default admission thresholds, ECN marking at `--ecn-k`): that port
is the bottleneck. Each of `--rounds` rounds is a parameter-server step: every sender pushes one
`--size-kb` message (tagged with the dlcp policy over 10 layers, 1 % loss budget) at the same time,
the receiver answers each with a one-packet pull once it has every push, and the next round starts.
Each configuration (senders x cc) runs `--repeats` times, each in a fresh network.

Per run (keys of the `--json` rows: docs/transport.md, "Benchmarks"):
- goodput_fraction: payload bits delivered by the pushes of all rounds (a forced message counts
  nothing) / the rounds' durations (first push started -> last push finished) / link rate. The
  ceiling is 1400 / 1466 = 0.955 (headers);
- forced, protected_lost, lost, retx: totals over the pushes (sender side);
- mct_p99_over_ideal: the 99th percentile of push completion times over the ideal round, all
  senders' bytes at the link rate (N x size / rate): 1.0 would be a perfectly shared link;
- the bottleneck port's tail drops, early drops and CE marks (switch counters), the packets the
  receiver counted as marked because they waited in its socket buffer (`host_marked`), and
  `link_busy`: the bottleneck's transmitted frame bits over the whole run / its rate (what the link
  could not use shows whether senders or the receiving host left it idle).
A table row shows the median over repeats with the range; the JSON rows carry the median
(`goodput_fraction`, `mct_p99_over_ideal`), the worst repeat (`forced`, `protected_lost`) and the
spread (`*_min`, `*_max`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dlcp.exit_status import exit_text
from emulation.benches import machine_to_itself

REPO = str(Path(__file__).resolve().parents[2])
RECV_RANK = 0
N_LAYERS = 10
PAYLOAD_FRACTION = 1400 / (1400 + 24 + 8 + 20 + 14)


# --- one host of one run (its own process, inside its namespace) --------------------------------------


def peer_main(args) -> int:
    import numpy as np

    from dlcp.transport.api import Peer, SendInfo, TransportConfig
    from dlcp.transport.factory import make_transport
    from dlcp.wire.chunking import MessageId, packetize
    from dlcp.wire.header import PHASE_PULL, PHASE_PUSH
    from dlcp.wire.tagging import TaggingConfig, tag_message

    senders = list(range(1, args.senders + 1))
    cfg = TransportConfig(
        rank=args.rank,
        ip=args.ip,
        cc=args.cc,
        deadline_ms=5000,
        rcvbuf_bytes=32 << 20,
        **({} if args.host_mark_ms is None else {"host_mark_ms": args.host_mark_ms}),
    )
    peers = [Peer(r, f"10.0.1.{r + 1}") for r in senders] if args.rank == RECV_RANK else [Peer(RECV_RANK, "10.0.1.1")]
    t = make_transport(cfg, peers)
    out = {"rank": args.rank, "pushes": []}
    try:
        pull = np.zeros(1, np.float32)
        if args.rank == RECV_RANK:
            for it in range(args.rounds):
                for r in senders:
                    t.recv(r, it, PHASE_PUSH, 1, timeout=args.timeout)
                t.advance(it)
                tags = tag_message(pull, [0], [0], 1, TaggingConfig(policy="fifo"))
                handles = [
                    t.send(
                        r,
                        packetize(
                            pull, MessageId(job_id=1, src_rank=RECV_RANK, iter=it, msg_id=1, phase=PHASE_PULL), tags
                        ),
                        SendInfo(rec_msg_id=1),
                    )
                    for r in senders
                ]  # the pulls release the next round
                for h in handles:
                    h.wait(args.timeout)
        else:
            n = args.size_kb * 1000 // 4
            g = np.random.default_rng(args.rank).standard_normal(n, dtype=np.float32)
            tags = tag_message(
                g,
                np.linspace(0, n, N_LAYERS, endpoint=False).astype(np.int64),
                np.arange(N_LAYERS),
                N_LAYERS,
                TaggingConfig(policy="dlcp"),
            )
            t.connect(timeout=args.timeout)
            time.sleep(max(0.0, args.start_at - time.time()))
            for it in range(args.rounds):
                batch = packetize(g, MessageId(job_id=1, src_rank=args.rank, iter=it, msg_id=1, phase=PHASE_PUSH), tags)
                res = t.send(RECV_RANK, batch, SendInfo(rec_msg_id=1, layer_first=0, layer_last=N_LAYERS - 1)).wait(
                    args.timeout
                )
                out["pushes"].append(
                    {
                        "iter": it,
                        "start_us": res.start_us,
                        "complete_us": res.complete_us,
                        "bytes": n * 4,
                        "pkts": len(batch),
                        "lost": res.lost_pkts,
                        "protected_lost": res.protected_lost,
                        "retx": res.retx_pkts,
                        "forced": res.forced,
                        "rounds": res.rounds,
                    }
                )
                t.recv(RECV_RANK, it, PHASE_PULL, 1, timeout=args.timeout)
        out["stats"] = t.stats()
    finally:
        t.close()
    print(json.dumps(out), flush=True)
    return 0


# --- one run: namespaces, the switch, the hosts ----------------------------------------------------------


def _runtime(lab_prefix: str, senders: int, link_mbps: float, ecn_k: int) -> dict:
    from dlcp.network.switch_runtime import Port, Route, SwitchConfig, SwitchTopo, runtime_for

    ports, routes = [], []
    for k in range(senders + 1):  # port k + 1: host 10.0.1.(k + 1); port 1 is the receiver's
        ports.append(
            Port(
                k + 1,
                f"{lab_prefix}p{k + 1}",
                f"h{k}",
                _mac(k + 1),
                rate_mbps=link_mbps if k == 0 else None,
                queue_depth_pkts=128,
            )
        )
        routes.append(Route(f"10.0.1.{k + 1}/32", (k + 1,)))
    return runtime_for(
        SwitchTopo("s1", 1, tuple(ports), tuple(routes)),
        SwitchConfig(policy="dlcp", load_balancing="per_flow", ecn_k=ecn_k, target="builtin"),
    )


def _mac(port: int) -> str:
    return f"02:00:00:00:01:{port:02x}"


def run_once(senders: int, cc: str, args) -> dict:
    """One incast run in a fresh network; returns its figures."""
    from emulation.dataplane import BuiltinProcess
    from emulation.netns import Lab, sh

    with tempfile.TemporaryDirectory(prefix="dlcp-incast-") as tmp, Lab("ic") as lab:
        p = lab.prefix
        hosts = []
        for k in range(senders + 1):
            ns = lab.netns(f"h{k}")
            lab.veth(f"{p}h{k}", ns, f"{p}p{k + 1}", None)
            sh("ip", "link", "set", f"{p}h{k}", "address", _mac(k + 1), ns=ns)
            sh("ip", "addr", "add", f"10.0.1.{k + 1}/24", "dev", f"{p}h{k}", ns=ns)
            sh("tc", "qdisc", "replace", "dev", f"{p}h{k}", "root", "pfifo", "limit", "1000", ns=ns)
            for j in range(senders + 1):  # the switch forwards IPv4 only: no ARP
                if j != k:
                    sh(
                        "ip",
                        "neigh",
                        "replace",
                        f"10.0.1.{j + 1}",
                        "lladdr",
                        "02:00:00:00:00:fe",
                        "dev",
                        f"{p}h{k}",
                        "nud",
                        "permanent",
                        ns=ns,
                    )
            hosts.append(ns)
        rt_path = Path(tmp) / "s1-runtime.json"
        rt_path.write_text(json.dumps(_runtime(p, senders, args.link_mbps, args.ecn_k)))
        switch = BuiltinProcess(f"{p}sw", rt_path, Path(tmp))
        switch.start()
        procs = []
        with contextlib.ExitStack() as files:
            try:
                start_at = time.time() + 3.0 + 0.15 * senders
                common = [
                    "--senders",
                    str(senders),
                    "--size-kb",
                    str(args.size_kb),
                    "--rounds",
                    str(args.rounds),
                    "--cc",
                    cc,
                    "--timeout",
                    str(args.timeout),
                    "--start-at",
                    str(start_at),
                ] + ([] if args.host_mark_ms is None else ["--host-mark-ms", str(args.host_mark_ms)])
                env = dict(os.environ, PYTHONPATH=REPO)
                for k, ns in enumerate(hosts):
                    cmd = [
                        "ip",
                        "netns",
                        "exec",
                        ns,
                        "nice",
                        "-n",
                        "0",
                        sys.executable,
                        "-m",
                        "emulation.benches.incast",
                        "--peer",
                        "--rank",
                        str(k),
                        "--ip",
                        f"10.0.1.{k + 1}",
                        *common,
                    ]
                    # output to files: a host that logs a lot must not block on a pipe nobody reads yet
                    out_f = files.enter_context(open(Path(tmp) / f"h{k}.out", "w+"))
                    err_f = files.enter_context(open(Path(tmp) / f"h{k}.err", "w+"))
                    procs.append((subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out_f, stderr=err_f), out_f, err_f))
                    if k == 0:
                        time.sleep(0.3)  # the receiver listens first
                outs = _wait_hosts(procs, args.timeout + 60)
            finally:
                for pr, _, _ in procs:
                    if pr.poll() is None:
                        pr.kill()
                        pr.wait()
                switch.stop()
        counters = switch.counters() if switch.counters_path.exists() else {}
    return _figures(outs, senders, args, counters)


def _wait_hosts(procs: list, timeout: float) -> list[dict]:
    """Each host's JSON line (`procs`: (process, stdout file, stderr file)), once all have exited; the
    first host to fail (or the time limit) ends the run at once with that host's error, rather than
    after the others time out waiting for it."""

    def failed(k, pr, err_f):
        """First line: the host, how it ended and its last line of stderr (the error); then the tail."""
        err_f.seek(0)
        tail = err_f.read().strip()[-400:]
        last = tail.splitlines()[-1] if tail else "no output"
        return RuntimeError(f"host {k} {exit_text(pr.returncode)}: {last}\n{tail}")

    deadline = time.monotonic() + timeout
    while any(pr.poll() is None for pr, _, _ in procs):
        for k, (pr, _, err_f) in enumerate(procs):
            if pr.poll() not in (None, 0):
                raise failed(k, pr, err_f)
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"hosts {[k for k, (pr, _, _) in enumerate(procs) if pr.poll() is None]} still "
                f"running after {timeout:.0f} s"
            )
        time.sleep(0.1)
    outs = []
    for k, (pr, out_f, err_f) in enumerate(procs):
        if pr.returncode:
            raise failed(k, pr, err_f)
        out_f.seek(0)
        outs.append(json.loads(out_f.read().strip().splitlines()[-1]))
    return outs


def _figures(outs: list[dict], senders: int, args, counters: dict) -> dict:
    pushes = [p for o in outs for p in o["pushes"]]
    rounds: dict[int, list] = {}
    for p in pushes:
        rounds.setdefault(p["iter"], []).append(p)
    link_bps = args.link_mbps * 1e6
    span_s = sum((max(p["complete_us"] for p in ps) - min(p["start_us"] for p in ps)) / 1e6 for ps in rounds.values())
    delivered_bits = sum(8 * p["bytes"] * (p["pkts"] - p["lost"]) / p["pkts"] for p in pushes if not p["forced"])
    mct = sorted(p["complete_us"] - p["start_us"] for p in pushes)
    ideal_us = senders * args.size_kb * 1000 * 8 / link_bps * 1e6
    port = [q for q in counters.get("queues", []) if q["port"] == 1]
    run_s = (max(p["complete_us"] for p in pushes) - min(p["start_us"] for p in pushes)) / 1e6
    tx_bits = 8 * sum(p.get("tx_bytes", 0) for p in counters.get("ports", []) if p.get("port") == 1)
    windows = [w for o in outs[1:] for w in o["stats"].get("cc", {}).values()]
    return {
        "goodput_fraction": delivered_bits / span_s / link_bps if span_s else 0.0,
        "forced": sum(p["forced"] for p in pushes),
        "protected_lost": sum(p["protected_lost"] for p in pushes),
        "lost": sum(p["lost"] for p in pushes),
        "retx": sum(p["retx"] for p in pushes),
        "mct_p99_over_ideal": _percentile(mct, 0.99) / ideal_us,
        "tail_drops": sum(q["tail_drop_pkts"] for q in port),
        "early_drops": sum(q["early_drop_pkts"] for q in port),
        "ce_marked": sum(r["ce_marked_pkts"] for r in counters.get("ecn_marks", []) if r["port"] == 1),
        "host_marked": outs[0]["stats"].get("host_marked", 0),
        "link_busy": tx_bits / run_s / link_bps if run_s else 0.0,  # the bottleneck sending, of the run
        "window": {
            k: statistics.median(w[k] for w in windows if w.get(k) is not None)
            for k in (
                "cwnd",
                "alpha",
                "srtt_ms",
                "reductions_ecn",
                "reductions_loss",
                "reductions_undone",
                "declared_lost",
                "spurious_lost",
            )
            if any(w.get(k) is not None for w in windows)
        },
    }


def _percentile(sorted_values: list, q: float) -> float:
    if not sorted_values:
        return 0.0
    i = q * (len(sorted_values) - 1)
    lo = int(i)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (i - lo)


def _row(senders: int, cc: str, runs: list[dict], failures: list[str] = ()) -> dict:
    """A configuration's row over its runs that finished; `failures`: the errors of those that did
    not (a row whose every run failed has no figures)."""
    head = {"senders": senders, "cc": cc, "runs": len(runs), "failed": len(failures), "errors": list(failures)}
    if not runs:
        return head
    med = lambda k: statistics.median(r[k] for r in runs)
    return {
        **head,
        "goodput_fraction": med("goodput_fraction"),
        "goodput_fraction_min": min(r["goodput_fraction"] for r in runs),
        "goodput_fraction_max": max(r["goodput_fraction"] for r in runs),
        "forced": max(r["forced"] for r in runs),
        "protected_lost": max(r["protected_lost"] for r in runs),
        "mct_p99_over_ideal": med("mct_p99_over_ideal"),
        "mct_p99_over_ideal_min": min(r["mct_p99_over_ideal"] for r in runs),
        "mct_p99_over_ideal_max": max(r["mct_p99_over_ideal"] for r in runs),
        "lost": max(r["lost"] for r in runs),
        "retx": max(r["retx"] for r in runs),
        "tail_drops": max(r["tail_drops"] for r in runs),
        "early_drops": max(r["early_drops"] for r in runs),
        "ce_marked": med("ce_marked"),
        "host_marked": med("host_marked"),
        "link_busy": med("link_busy"),
    }


def main(argv: list[str]) -> int:
    from dlcp.bench_output import emit

    ap = argparse.ArgumentParser(prog="dlcp bench incast", description=__doc__.splitlines()[0])
    ap.add_argument("--senders", default="4,8,16", help="comma-separated sender counts")
    ap.add_argument("--cc", default="dctcp,none", help="comma-separated congestion control modes")
    ap.add_argument(
        "--link-mbps",
        type=float,
        default=50.0,
        help="rate of the switch port toward the receiver (50: the experiments' host links)",
    )
    ap.add_argument("--size-kb", type=int, default=500, help="push size per sender and round, kB (10^3 bytes)")
    ap.add_argument("--rounds", type=int, default=5, help="push rounds per run")
    ap.add_argument("--repeats", type=int, default=3, help="runs per configuration (median and range reported)")
    ap.add_argument("--ecn-k", type=int, default=None, help="switch ECN threshold (default: the switch default)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds one host may wait for a message")
    ap.add_argument(
        "--host-mark-ms",
        type=float,
        default=None,
        help="the receiver's host_mark_ms (default: the transport's default; 0: off)",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    sender_counts, ccs = check_args(args)
    if os.geteuid() != 0:
        raise SystemExit("dlcp bench incast: needs root (network namespaces and the built-in switch)")
    if args.ecn_k is None:
        from dlcp.network.pipeline_names import DEFAULT_ECN_K

        args.ecn_k = DEFAULT_ECN_K
    with machine_to_itself("dlcp bench incast"):
        rows = measure(sender_counts, ccs, args.repeats, lambda n, cc: run_once(n, cc, args))
    table = table_rows(rows)
    emit(
        f"incast: N senders push {args.size_kb} kB each per round to one receiver through a {args.link_mbps:g} "
        f"Mbit/s switch port, {args.rounds} rounds, median (range) of {args.repeats} runs; goodput ceiling "
        f"{PAYLOAD_FRACTION:.3f}",
        table,
        {
            "link_mbps": args.link_mbps,
            "size_kb": args.size_kb,
            "rounds": args.rounds,
            "ecn_k": args.ecn_k,
            "rows": rows,
        },
        args.json,
    )
    failed = sum(r["failed"] for r in rows)
    if failed:
        print(
            f"dlcp bench incast: {failed} run(s) failed (their errors are above); the rows cover the rest",
            file=sys.stderr,
        )
        return 1
    return 0


def check_args(args) -> tuple[list[int], list[str]]:
    """Every option checked before anything starts (SystemExit with one line); the sender counts
    and congestion control modes."""
    try:
        sender_counts = [int(x) for x in args.senders.split(",")]
    except ValueError:
        raise SystemExit(
            f"dlcp bench incast: --senders {args.senders!r} is not a comma-separated list of integers"
        ) from None
    ccs = args.cc.split(",")
    if not all(1 <= n <= 60 for n in sender_counts) or not set(ccs) <= {"dctcp", "none"}:
        raise SystemExit("dlcp bench incast: --senders takes 1..60 each, --cc takes dctcp and/or none")
    if args.link_mbps <= 0 or args.size_kb < 1 or args.rounds < 1 or args.repeats < 1:
        raise SystemExit("dlcp bench incast: --link-mbps, --size-kb, --rounds and --repeats must be positive")
    if args.host_mark_ms is not None and args.host_mark_ms < 0:
        raise SystemExit(f"dlcp bench incast: --host-mark-ms {args.host_mark_ms:g}: must be >= 0 (0: off)")
    if args.timeout <= 0:
        raise SystemExit(f"dlcp bench incast: --timeout {args.timeout:g}: must be > 0")
    return sender_counts, ccs


def measure(sender_counts: list[int], ccs: list[str], repeats: int, run) -> list[dict]:
    """`repeats` runs of each configuration (`run(senders, cc)`: one run's figures); a run that
    fails (a host, the switch, the time limit: RuntimeError) is printed and counted in its row, and
    the bench goes on, so the rows already measured are kept."""
    rows = []
    for n in sender_counts:
        for cc in ccs:
            runs, failures = [], []
            for i in range(repeats):
                try:
                    r = run(n, cc)
                except RuntimeError as e:
                    failures.append(str(e).splitlines()[0] if str(e) else type(e).__name__)
                    print(f"  {n} senders, cc {cc}, run {i + 1}: FAILED: {failures[-1]}", file=sys.stderr, flush=True)
                    continue
                print(
                    f"  {n} senders, cc {cc}, run {i + 1}: goodput {r['goodput_fraction']:.3f} of the link, "
                    f"forced {r['forced']}, protected lost {r['protected_lost']}, p99 MCT "
                    f"{r['mct_p99_over_ideal']:.2f}x ideal, retx {r['retx']}, tail drops {r['tail_drops']}, "
                    f"early drops {r['early_drops']}, CE {r['ce_marked']} (+{r['host_marked']} host), link busy "
                    f"{r['link_busy']:.3f}, senders' windows (median) {r['window']}",
                    file=sys.stderr,
                    flush=True,
                )
                runs.append(r)
            rows.append(_row(n, cc, runs, failures))
    return rows


def table_rows(rows: list[dict]) -> list[dict]:
    """The printed table: medians with their range, the worst repeat's counts, the failed runs."""
    span = lambda r, k, f: f"{r[k]:{f}} ({r[k + '_min']:{f}}-{r[k + '_max']:{f}})" if r["runs"] else None
    return [
        {
            "senders": r["senders"],
            "cc": r["cc"],
            "runs": r["runs"],
            "failed": r["failed"],
            "goodput_fraction": span(r, "goodput_fraction", ".3f"),
            "forced": r.get("forced"),
            "protected_lost": r.get("protected_lost"),
            "mct_p99_over_ideal": span(r, "mct_p99_over_ideal", ".2f"),
            "lost": r.get("lost"),
            "retx": r.get("retx"),
            "tail_drops": r.get("tail_drops"),
            "early_drops": r.get("early_drops"),
            "ce_marked": r.get("ce_marked"),
        }
        for r in rows
    ]


def _peer_args(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--peer", action="store_true", required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--ip", required=True)
    ap.add_argument("--senders", type=int, required=True)
    ap.add_argument("--size-kb", type=int, required=True)
    ap.add_argument("--rounds", type=int, required=True)
    ap.add_argument("--cc", required=True)
    ap.add_argument("--timeout", type=float, required=True)
    ap.add_argument("--start-at", type=float, required=True)
    ap.add_argument("--host-mark-ms", type=float, default=None)
    return ap.parse_args(argv)


if __name__ == "__main__":
    sys.exit(peer_main(_peer_args(sys.argv[1:])))
