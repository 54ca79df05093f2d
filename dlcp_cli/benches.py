"""The benchmarks `dlcp bench NAME` knows. Each lives beside what it measures; those that need root
or Mininet are imported only when run, so `dlcp bench tagging` works anywhere."""

from __future__ import annotations

from collections.abc import Callable


def _tagging(argv):
    from dlcp.wire.tagging_bench import bench_tagging

    return bench_tagging(argv)


def _switch(argv):
    from emulation.benches.switch_forwarding import bench_switch

    return bench_switch(argv)


def _transport(argv):
    from emulation.benches.transport import main

    return main(argv)


def _incast(argv):
    from emulation.benches.incast import main

    return main(argv)


def _accuracy(argv):
    from dlcp.comm.accuracy_bench import bench_accuracy

    return bench_accuracy(argv)


def _schedulers(argv):
    import json
    import os
    import time
    from pathlib import Path

    from dlcp.comm.plans.collective import COLLECTIVES
    from dlcp.comm.schedulers import SCHEDULERS
    from dlcp.comm.schedulers_bench import parser, print_timeline, timeline_result
    from dlcp.comm.settings import CommSetup
    from dlcp.settings import flag_values
    from dlcp.tables import format_table

    ap = parser()
    ap.add_argument(
        "--emulated-repeats",
        type=int,
        default=0,
        metavar="N",
        help="also run the schedulers through Mininet N times each (root; hold the netns lock)",
    )
    ap.add_argument("--emulated-config", default="experiments/schedulers-allreduce.toml")
    baseline = CommSetup.model_fields["scheduler"].default
    ap.add_argument(
        "--emulated-vary",
        default="comm.scheduler=" + ",".join([baseline, *(s for s in SCHEDULERS.names() if s != baseline)]),
        metavar="KEY=V1,V2,...",
        help="the key the emulated runs compare; the first value is the baseline (default: every scheduler)",
    )
    ap.add_argument("--emulated-iterations", type=int, default=20)
    ap.add_argument(
        "--emulated-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a key of the emulated experiment (repeatable)",
    )
    ap.add_argument("--out", default="results/bench-schedulers", help="where the emulated runs go")
    args = ap.parse_args(argv)
    key, _, values = args.emulated_vary.partition("=")
    values = [v.strip() for v in values.split(",") if v.strip()]
    if not key.strip() or not values:
        raise SystemExit(f"dlcp bench schedulers: --emulated-vary {args.emulated_vary!r}: expected KEY=V1,V2,...")
    if args.emulated_repeats and os.geteuid() != 0:
        raise SystemExit("dlcp bench schedulers: --emulated-repeats needs root (Mininet)")
    t0 = time.perf_counter()
    try:
        result = timeline_result(
            args.profiles,
            args.workers,
            args.rate_gbps,
            args.latency_s,
            args.collective_profile,
            args.topologies,
            args.fabric_gbps,
            flag_values(args, COLLECTIVES),
            args.compute_scale,
        )
    except ValueError as e:
        raise SystemExit(f"dlcp bench schedulers: {e}") from None
    result["seconds"] = round(time.perf_counter() - t0, 2)
    print_timeline(result)
    if args.emulated_repeats:
        from emulation.benches.schedulers import emulated

        em = emulated(
            args.emulated_config,
            key.strip(),
            values,
            args.emulated_repeats,
            args.emulated_iterations,
            Path(args.out) / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()),
            overrides=args.emulated_set,
        )
        result["emulated"] = em
        print(
            f"\nemulated: {em['config']}, {em['repeats']} repeats x {em['iterations']} iterations; median over "
            f"repeats of each run's median iteration (slowest worker); ratio to {em['baseline']} with a 95 % interval"
        )
        print(format_table([{k: v for k, v in r.items() if k != "per_repeat_ms"} for r in em["rows"]]))
    if args.json:
        print(json.dumps(result))
    return 0


def _bmv2(argv):
    from emulation.benches.bmv2_forwarding import bench_bmv2

    return bench_bmv2(argv)


def _collectives(argv):
    from dlcp_cli.collectives_bench import bench_collectives

    return bench_collectives(argv)


def _sim(argv):
    from simulation.ns3.bench import bench_sim

    return bench_sim(argv)


def _datapath(argv):
    from dlcp.transport.datapath_bench import bench_udp, parser, print_udp

    ap = parser()
    ap.add_argument("--sim-workers", type=int, default=16, help="workers of the ns-3 runs")
    ap.add_argument("--sim-rounds", type=int, default=3, help="ns-3 runs per receive path, interleaved")
    args = ap.parse_args(argv)
    rows, result = bench_udp(args)
    if args.skip_ns3:
        print_udp(rows, result, args.json)
        return 0
    from simulation.ns3.bench import SIM_RX_PATHS, bench_rx_paths
    from simulation.ns3.loader import available

    print_udp(rows, result, False)
    why = available()
    if why is not None:
        print(f"\nns-3: skipped ({why})")
        sim_rows, sim = [], {"skipped": why}
    else:
        sim_rows, sim = bench_rx_paths(args.sim_workers, 2, args.sim_rounds)
        print()
    from dlcp.bench_output import emit

    emit(
        f"ns-3 hosts (DLCP_SIM_RX {', '.join(SIM_RX_PATHS)}), synthetic ring of one 1 MB message, 2 iterations: the simulation's "
        "CPU per datagram received (median (range) over interleaved runs)",
        sim_rows,
        {"bench": "datapath", "udp": result, "simulated": sim},
        args.json,
    )
    return 0


def _sweep(argv):
    from dlcp.runs.bench import bench_sweep

    return bench_sweep(argv)


# name -> (function taking argv and returning an exit code, one-line summary)
BENCHES: dict[str, tuple[Callable[[list[str]], int], str]] = {
    "tagging": (_tagging, "tag and packetise a large gradient (no root)"),
    "switch": (_switch, "built-in switch forwarding rate vs Linux bridge (root)"),
    "transport": (_transport, "goodput of one 25 MB message over an emulated link (root) and loopback"),
    "incast": (_incast, "N senders to one receiver through the built-in switch, cc on and off (root)"),
    "accuracy": (_accuracy, "test accuracy under packet loss per fill rule (in-process)"),
    "bmv2": (_bmv2, "packets/s of simple_switch_grpc running p4/dlcp.p4 (root, bmv2)"),
    "schedulers": (_schedulers, "iteration time per scheduler x profile x workers (timeline), the collectives' rows"),
    "collectives": (
        _collectives,
        "time, algbw and busbw (nccl-tests) per collective x workers x size x policy, ns-3 or emulated",
    ),
    "datapath": (_datapath, "CPU per datagram received, each receive path: UDP driver on loopback, ns-3 hosts"),
    "sim": (_sim, "simulated ring all-reduce from 16 to 128 workers on ns-3: cost per iteration (sim extra)"),
    "sweep": (_sweep, "a series of ns-3 runs on the local Dask cluster, 1 vs N workers: runs per minute, overhead"),
}


def run_bench(name: str, argv: list[str]) -> int:
    if name not in BENCHES:
        raise SystemExit(f"dlcp bench: unknown benchmark {name!r} (one of: {', '.join(BENCHES)})")
    return BENCHES[name][0](argv) or 0
