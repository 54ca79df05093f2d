"""Ring all-reduce as a step schedule, and its registration as the collective `ring` (the default;
the schedulers plan with the analytic ring cost of CostModel.from_link).

P ranks, P chunks, the ranks in a ring order m_0 .. m_{P-1}. Reduce-scatter step s (0..P-2): the
rank at position i sends chunk (i - s) mod P to the next position, which adds it to its own.
All-gather step s: position i sends chunk (i + 1 - s) mod P to the next, which keeps it. P - 1
steps per phase. Paths: every step has the same pairs, so one path per pair, chosen by
Router.balanced_paths (the ring's best pinned choice among equal-cost paths).

Ring orders (`[comm.ring] order`):
- `rank` (default): ranks 0, 1, ..., P-1. The workers are placed interleaved across edge switches
  (dlcp/network/topology.py), so on a leaf-spine every hop of this ring crosses the spines: each
  leaf sends its hosts_per_leaf flows over its uplinks.
- `locality`: ranks grouped by edge switch (`paths.locality_order`), as NCCL orders its rings by
  the topology it detects: the ring crosses from one edge switch to the next once, so each leaf
  sends one flow up and receives one, whatever its number of hosts.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from dlcp.comm.plans.collective import CollectiveEntry, FixedSchedule, register_collective, spec_for, worker_hosts
from dlcp.comm.plans.paths import Router, locality_order, rank_hosts
from dlcp.comm.plans.schedule import Schedule, Transfer
from dlcp.comm.plans.topology_arg import topology_label
from dlcp.network.topology import TopologySpec
from dlcp.settings import Settings


def ring_steps(members: list[int]) -> list[list[tuple[int, int, int, str]]]:
    """(src, dst, chunk, op) per step of a ring over `members` in ring order; chunk i of
    len(members) cuts. Reduce-scatter then all-gather, len(members) - 1 steps each."""
    P = len(members)
    rs = [[(members[i], members[(i + 1) % P], (i - s) % P, "reduce") for i in range(P)] for s in range(P - 1)]
    ag = [[(members[i], members[(i + 1) % P], (i + 1 - s) % P, "copy") for i in range(P)] for s in range(P - 1)]
    return rs + ag


RingOrder = Literal["rank", "locality"]
RING_ORDERS = ("rank", "locality")


def ring_members(spec: TopologySpec, hosts: list[str], order: RingOrder = "rank") -> list[int]:
    """The ranks in ring order (see the module docstring)."""
    if order == "rank":
        return list(range(len(hosts)))
    if order == "locality":
        return locality_order(spec, hosts)
    raise ValueError(f"ring order {order!r} is not one of {', '.join(RING_ORDERS)}")


def ring_schedule(spec: TopologySpec, hosts: list[str] | None = None, order: RingOrder = "rank") -> Schedule:
    """The ring over ranks 0..P-1 in `order` (hosts: the host of each rank; default the topology's
    workers)."""
    hosts = list(hosts or rank_hosts(spec))
    P = len(hosts)
    members = ring_members(spec, hosts, order)
    pairs = [(members[i], members[(i + 1) % P]) for i in range(P)]
    pair_path = dict(zip(pairs, Router(spec).balanced_paths((hosts[a], hosts[b]) for a, b in pairs)))
    steps = [
        [Transfer(src, dst, chunk, P, op, pair_path[(src, dst)]) for src, dst, chunk, op in step]
        for step in ring_steps(members)
    ]
    return Schedule("ring", tuple(hosts), steps, {"reduce_scatter": (0, P - 1), "all_gather": (P - 1, 2 * P - 2)})


def plan_json(spec: TopologySpec, hosts: list[str] | None = None, order: RingOrder = "rank") -> dict:
    """What `dlcp schedule --collective ring` prints: the ring order, paths and steps per phase."""
    sched = ring_schedule(spec, hosts, order)
    P = sched.ranks
    first = sched.steps[0] if P > 1 else []
    return {
        "collective": "ring",
        "topology": topology_label(spec),
        "hosts": list(sched.hosts),
        "order": order,
        "ring": ring_members(spec, list(sched.hosts), order),
        "paths": {f"{t.src}->{t.dst}": list(t.path) for t in first},
        "steps_per_phase": sched.steps_per_phase,
    }


def ring_plan(workers: int, spec: TopologySpec | None = None, order: RingOrder = "rank") -> FixedSchedule:
    spec = spec_for(workers, spec)
    return FixedSchedule("ring", ring_schedule(spec, worker_hosts(spec, workers), order))


class RingOptions(Settings):
    order: RingOrder = Field(
        "rank",
        description="ring: ranks 0..P-1 in rank order (interleaved across edge switches), or grouped "
        "by edge switch so the ring crosses the fabric once per switch (NCCL's topology-aware ring)",
    )


register_collective(
    CollectiveEntry(
        name="ring",
        description="ring all-reduce: reduce-scatter then all-gather, P-1 steps each, to the next rank",
        options=RingOptions,
        plan=lambda o, workers, spec: ring_plan(workers, spec, o.order),
        describe=lambda o, workers, spec: plan_json(spec_for(workers, spec), order=o.order),
        link_cost=True,
    )
)
