"""Frames through one simulated switch: the ns-3 side of the conformance harness
(tests/support/switch_harness.py, `Ns3SUT`).

    python -m simulation.ns3.inject SCENARIOS.json RESULTS.json

SCENARIOS.json is a list of {"name", "runtime" (a runtime document), "send": [{"port", "frame"
(hex), "n", "gap_us"}], "settle_s", "seed"}. Each scenario gets a fresh switch whose ports have no
device: what a port sends is captured with its simulated departure time. Frames of a burst arrive
`gap_us` apart (1 us when 0: a tester sending back to back), bursts one after another from t = 0.
RESULTS.json maps each name to {"sent", "t_send", "out": {port: [[t, hex], ...]}, "counters"}.
All scenarios run in one process (one ns-3 import) with `Simulator::Destroy()` between them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from simulation.ns3 import loader
from simulation.ns3.simulated_switch import Ns3Switch

BACK_TO_BACK_S = 1e-6


def run_frames(runtime: dict, sends: list[dict], settle_s: float, seed: int = 1) -> dict:
    ns = loader.compile_cpp("dlcp_switch")
    ns.RngSeedManager.SetSeed(max(1, seed))
    sw = Ns3Switch(runtime, source=f"runtime of {runtime.get('switch', '?')}")
    sw.add_ports()
    t = 0.0
    sent = 0
    for burst in sends:
        frame = bytes.fromhex(burst["frame"])
        gap = burst.get("gap_us", 0) / 1e6 or BACK_TO_BACK_S
        for _ in range(burst["n"]):
            ns.ScheduleInject(sw.obj, t, burst["port"], frame)
            sent += 1
            t += gap
    ns.Simulator.Stop(ns.Seconds(t + settle_s))
    ns.Simulator.Run()
    out: dict[int, list] = {}
    for when, port, f in sw.captured():
        out.setdefault(port, []).append([when, f.hex()])
    result = {"sent": sent, "t_send": 0.0, "out": out, "counters": sw.counter_dump()}
    ns.Simulator.Destroy()
    return result


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m simulation.ns3.inject SCENARIOS.json RESULTS.json", file=sys.stderr)
        return 2
    scenarios = json.loads(Path(argv[0]).read_text())
    results = {sc["name"]: run_frames(sc["runtime"], sc["send"], sc["settle_s"], sc.get("seed", 1)) for sc in scenarios}
    with open(argv[1], "w") as f:
        json.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
