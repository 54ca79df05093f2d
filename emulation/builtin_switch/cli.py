"""`python -m emulation.builtin_switch`: run one built-in switch switch until SIGTERM / SIGINT."""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from dlcp.network.runtime_file import RuntimeFileError, load_runtime
from dlcp.wire.header import DATA_PORT
from emulation.builtin_switch.process import ENGINES, Options, Switch


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m emulation.builtin_switch",
        description="Built-in DLCP dataplane: one switch on AF_PACKET sockets, pipeline of docs/pipeline.md. "
        "Counters are written at exit (SIGTERM/SIGINT) and on SIGUSR1 or the control socket's "
        "'dump' command.",
    )
    ap.add_argument("--runtime", required=True, help="sN-runtime.json (tables, ports)")
    ap.add_argument("--name", default="", help="switch name (default: the runtime file's 'switch')")
    ap.add_argument("--counters", help="where to write the counter dump (JSON)")
    ap.add_argument("--control", help="path of a Unix control socket (commands: ping, counters, dump)")
    ap.add_argument("--pcap-dir", help="directory for pcap files (<intf>.pcap, both directions)")
    ap.add_argument(
        "--pcap-port",
        type=int,
        action="append",
        default=[],
        metavar="PORT",
        help="capture this port (repeatable; needs --pcap-dir)",
    )
    ap.add_argument("--debug-log", action="store_true", help="one line per packet on stderr (slow)")
    ap.add_argument("--batch", type=int, default=64, help="frames per recvmmsg/sendmmsg (default 64)")
    ap.add_argument("--seed", type=int, help="seed of the random choices (spray_random, link loss)")
    ap.add_argument("--data-port", type=int, default=DATA_PORT, help=f"DLCP UDP port (default {DATA_PORT})")
    ap.add_argument(
        "--samples",
        metavar="PATH",
        help="append a queue sample (occupancy, its peak, packet counts per port) as a JSON line "
        "every --sample-period seconds",
    )
    ap.add_argument("--sample-period", type=float, default=0.1, metavar="S", help="default 0.1 s")
    ap.add_argument("--cpu", type=int, help="pin the process to this CPU")
    ap.add_argument(
        "--engine",
        choices=ENGINES,
        default="auto",
        help="c: the fast path; python: the reference engine; auto (default): c when built",
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.pcap_port and not args.pcap_dir:
        print("builtin_switch: --pcap-port needs --pcap-dir", file=sys.stderr)
        return 2
    if args.sample_period <= 0:
        print(f"builtin_switch: --sample-period must be > 0, got {args.sample_period}", file=sys.stderr)
        return 2
    if not 1 <= args.batch <= 1024:
        print(f"builtin_switch: --batch must be 1..1024, got {args.batch}", file=sys.stderr)
        return 2
    try:
        runtime = load_runtime(args.runtime)
    except RuntimeFileError as e:
        print(f"builtin_switch: {e}", file=sys.stderr)
        return 2
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    opts = Options(
        name=args.name,
        counters_path=args.counters,
        control_path=args.control,
        pcap_dir=args.pcap_dir,
        pcap_ports=tuple(args.pcap_port),
        debug_log=args.debug_log,
        batch=args.batch,
        seed=args.seed,
        data_port=args.data_port,
        engine=args.engine,
        samples_path=args.samples,
        sample_period_s=args.sample_period,
    )
    try:
        sw = Switch(runtime, opts)
    except RuntimeFileError as e:
        print(f"builtin_switch: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:
        print(e.code, file=sys.stderr)
        return 2
    try:
        sw.open()
    except SystemExit as e:
        print(e.code, file=sys.stderr)
        sw.close()
        return 1
    status = 0
    try:
        sw.run()
    except Exception:  # noqa: BLE001 (a bug: say where, but still leave the counters behind)
        traceback.print_exc()
        status = 1
    finally:
        path = sw.dump()
        ports = sw.snapshot()["ports"]
        print(
            f"builtin_switch {sw.name} stopped: rx {sum(p['rx_pkts'] for p in ports)} "
            f"tx {sum(p['tx_pkts'] for p in ports)} pkts; counters {path or '(not written)'}",
            file=sys.stderr,
        )
        sw.close()
    return status
