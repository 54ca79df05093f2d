"""The benchmarks `dlcp bench NAME` knows. Each lives beside what it measures; those that need root
or Mininet are imported only when run, so `dlcp bench tagging` works anywhere."""

from __future__ import annotations

from typing import Callable


def _tagging(argv):
    from dlcp.wire.tagging_bench import bench_tagging
    return bench_tagging(argv)


def _switch(argv):
    from emulation.benches.switch import bench_switch
    return bench_switch(argv)


def _transport(argv):
    from emulation.benches.transport import main
    return main(argv)


def _incast(argv):
    from emulation.benches.incast import main
    return main(argv)


def _accuracy(argv):
    from dlcp.workloads.trainer.accuracy_bench import bench_accuracy
    return bench_accuracy(argv)


def _bmv2(argv):
    from emulation.bmv2.bench import bench_bmv2
    return bench_bmv2(argv)


# name -> (function taking argv and returning an exit code, one-line summary)
BENCHES: dict[str, tuple[Callable[[list[str]], int], str]] = {
    "tagging": (_tagging, "tag and packetise a large gradient (no root)"),
    "switch": (_switch, "built-in dataplane forwarding rate vs Linux bridge (root)"),
    "transport": (_transport, "goodput of one 25 MB message over an emulated link (root) and loopback"),
    "incast": (_incast, "N senders to one receiver through the built-in switch, cc on and off (root)"),
    "accuracy": (_accuracy, "test accuracy under packet loss per fill policy (in-process)"),
    "bmv2": (_bmv2, "packets/s of simple_switch_grpc running p4/dlcp.p4 (root, bmv2)"),
}


def run_bench(name: str, argv: list[str]) -> int:
    if name not in BENCHES:
        raise SystemExit(f"dlcp bench: unknown benchmark {name!r} (one of: {', '.join(BENCHES)})")
    return BENCHES[name][0](argv) or 0
