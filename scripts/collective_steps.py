"""Print steps per phase of ring and MultiTree on the standard topologies, the worst link load per
step, the alpha-beta cost of a 4 MB all-reduce, and DS-Sync's rounds to the exact average.

    PYTHONPATH=. python scripts/collective_steps.py

Step counts are deterministic (no timing): one run gives the figures.
"""

from __future__ import annotations

from dlcp.comm.plans import alpha_beta_cost
from dlcp.comm.plans.dssync import dssync_groups, round_schedule, topology_groups
from dlcp.comm.plans.multitree import multitree_schedule
from dlcp.comm.plans.paths import Router
from dlcp.comm.plans.ring import ring_schedule
from dlcp.comm.plans.schedule import link_loads, spray_loads
from dlcp.comm.plans.topology_arg import parse_topology

TOPOLOGIES = [
    ("torus:4x4", None),
    ("torus:4x4", 50),
    ("mesh:4x4", None),
    ("mesh:4x4", 50),
    ("leaf_spine:2x2x4", None),
    ("star:8", None),
    ("torus:8x8", None),
]
M_BYTES, ALPHA, FABRIC_MBPS = 4e6, 100e-6, 50


def worst_load(loads, router) -> float:
    return max(n / router.capacity[ln] for load in loads for ln, n in load.items())


def main() -> None:
    beta = 8 / (FABRIC_MBPS * 1e6)
    print(
        f"cost: {M_BYTES / 1e6:g} MB all-reduce, alpha {ALPHA * 1e6:g} us, fabric {FABRIC_MBPS} Mbit/s "
        "(ideal = steps x (alpha + chunk x beta); contended = each step's busiest link)"
    )
    print(
        "ring, mt kN: steps per phase (MultiTree paths='spray'; 'pin k5' with paths='pinned');"
        " load / spray: ring's busiest link per step (chunks / capacity), pinned / sprayed; s: seconds, s*: with contention"
    )
    print(
        f"{'topology':18} {'host/fabric':>11} {'ring':>5} {'load':>5} {'spray':>5} {'mt k2':>6} {'mt k3':>6} {'mt k5':>6}"
        f" {'pin k5':>6} {'ring s':>7} {'mt k5 s':>8} {'ring s*':>8} {'mt k5 s*':>9}"
    )
    for topo, host in TOPOLOGIES:
        spec = parse_topology(topo, fabric_mbps=FABRIC_MBPS, host_mbps=host)
        router = Router(spec)
        ratio = next(iter(spec.hosts.values())).rate_mbps / FABRIC_MBPS
        ring = ring_schedule(spec)
        mts = {k: multitree_schedule(spec, k) for k in (2, 3, 5)}
        pinned = multitree_schedule(spec, 5, paths="pinned").steps_per_phase
        cost = [alpha_beta_cost(s, M_BYTES, ALPHA, beta, sp) for s in (ring, mts[5]) for sp in (None, spec)]
        print(
            f"{topo:18} {ratio:>11g} {ring.steps_per_phase:>5} "
            f"{worst_load(link_loads(ring), router):>5g} {worst_load(spray_loads(ring, router), router):>5g} "
            + " ".join(f"{mts[k].steps_per_phase:>6}" for k in (2, 3, 5))
            + f" {pinned:>6} {cost[0]:>7.3f} {cost[2]:>8.3f} {cost[1]:>8.3f} {cost[3]:>9.3f}"
        )
    spec = parse_topology("leaf_spine:2x4x4", fabric_mbps=FABRIC_MBPS)
    plan = topology_groups(spec, 4)
    per_it = [alpha_beta_cost(round_schedule(spec, plan, k), M_BYTES, ALPHA, beta, spec) for k in range(plan.period)]
    ring = alpha_beta_cost(ring_schedule(spec), M_BYTES, ALPHA, beta, spec)
    mt = alpha_beta_cost(multitree_schedule(spec, 2), M_BYTES, ALPHA, beta, spec)
    print(
        f"\nleaf_spine:2x4x4, 16 workers, same message, with contention: ring {ring:.3f} s, multitree k2 {mt:.3f} s;"
        f" DS-Sync groups of 4 per iteration {', '.join(f'{c:.3f}' for c in per_it)} s"
        f" (exact average after {plan.period} iterations: {sum(per_it):.3f} s)"
    )
    print("\nDS-Sync: workers group -> rounds to the exact average (groups all of `group`?)")
    for n, g in [(16, 4), (16, 2), (8, 4), (24, 6), (32, 4), (64, 8), (12, 4), (6, 2), (20, 4)]:
        p = dssync_groups(n, g)
        print(
            f"  N={n:<3} s={g:<2} rounds={p.period} equal_groups={p.exact_equal_groups} "
            f"group sizes per round={[len(it[0]) for it in p.iterations]}"
        )


if __name__ == "__main__":
    main()
