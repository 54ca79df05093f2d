"""Ring all-reduce as a step schedule, and its registration as the collective `ring` (the default;
the schedulers plan with the analytic ring cost of CostModel.from_link).

P ranks, P chunks. Reduce-scatter step s (0..P-2): rank r sends chunk (r - s) mod P to r + 1,
which adds it to its own. All-gather step s: rank r sends chunk (r + 1 - s) mod P to r + 1, which
keeps it. P - 1 steps per phase. Paths: every step has the same (r -> r+1) pairs, so one path per
pair, chosen by Router.balanced_paths (the ring's best pinned choice among equal-cost paths).
"""

from __future__ import annotations

from dlcp.comm.plans.collective import CollectiveEntry, FixedSchedule, register_collective, spec_for, worker_hosts
from dlcp.comm.plans.paths import Router, rank_hosts
from dlcp.comm.plans.schedule import Schedule, Transfer
from dlcp.comm.plans.topology_arg import topology_label
from dlcp.network.topology import TopologySpec


def ring_steps(members: list[int]) -> list[list[tuple[int, int, int, str]]]:
    """(src, dst, chunk, op) per step of a ring over `members` in ring order; chunk i of
    len(members) cuts. Reduce-scatter then all-gather, len(members) - 1 steps each."""
    P = len(members)
    rs = [[(members[i], members[(i + 1) % P], (i - s) % P, "reduce") for i in range(P)] for s in range(P - 1)]
    ag = [[(members[i], members[(i + 1) % P], (i + 1 - s) % P, "copy") for i in range(P)] for s in range(P - 1)]
    return rs + ag


def ring_schedule(spec: TopologySpec, hosts: list[str] | None = None) -> Schedule:
    """The ring over ranks 0..P-1 (hosts: the host of each rank; default the topology's workers)."""
    hosts = list(hosts or rank_hosts(spec))
    P = len(hosts)
    router = Router(spec)
    pair_path = dict(
        zip(
            ((r, (r + 1) % P) for r in range(P)),
            router.balanced_paths((hosts[r], hosts[(r + 1) % P]) for r in range(P)),
        )
    )
    steps = [
        [Transfer(src, dst, chunk, P, op, pair_path[(src, dst)]) for src, dst, chunk, op in step]
        for step in ring_steps(list(range(P)))
    ]
    return Schedule("ring", tuple(hosts), steps, {"reduce_scatter": (0, P - 1), "all_gather": (P - 1, 2 * P - 2)})


def plan_json(spec: TopologySpec, hosts: list[str] | None = None) -> dict:
    """What `dlcp schedule --collective ring` prints: the ring order, paths and steps per phase."""
    sched = ring_schedule(spec, hosts)
    P = sched.ranks
    return {
        "collective": "ring",
        "topology": topology_label(spec),
        "hosts": list(sched.hosts),
        "ring": list(range(P)),
        "paths": {f"{r}->{(r + 1) % P}": list(sched.steps[0][r].path) for r in range(P)} if P > 1 else {},
        "steps_per_phase": sched.steps_per_phase,
    }


def ring_plan(workers: int, spec: TopologySpec | None = None) -> FixedSchedule:
    spec = spec_for(workers, spec)
    return FixedSchedule("ring", ring_schedule(spec, worker_hosts(spec, workers)))


register_collective(
    CollectiveEntry(
        name="ring",
        description="ring all-reduce: reduce-scatter then all-gather, P-1 steps each, to the next rank",
        plan=lambda options, workers, spec: ring_plan(workers, spec),
        describe=lambda options, workers, spec: plan_json(spec_for(workers, spec)),
        link_cost=True,
    )
)
