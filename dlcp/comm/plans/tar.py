"""OptiReduce's Transpose AllReduce as a step schedule, registered as the collective `tar`
(docs/bounded-loss.md).

OptiReduce (Warraich et al., NSDI'25; arXiv 2310.06993) [V: abstract] pairs an unreliable
bounded transport with Transpose AllReduce (TAR) and a Hadamard transform "to mitigate the impact
of dropped gradient entries". What TAR does is not in the abstract; our reading [S: a course
reproduction, DoctorSheep-yi/OptiReduce `optireduce.py`, which cuts the bucket into P shards,
sends shard j to rank j, which adds what arrived, then sends its reduced shard to every rank] and
our schedule [D]:

- P ranks, P chunks (the ring's cut). Reduce-scatter: one step in which every rank r sends chunk j
  to rank j, for every j != r, and rank j adds them: the buffer "transposed" across the ranks.
- All-gather: one step in which every rank j sends its reduced chunk j to every other rank.

So every value crosses two transfers (the ring: 2 (P - 1) steps of which one holds it), which is
why a lost packet costs a value once, not once per later step, and why a bounded wait per step
bounds the whole all-reduce. The price is an incast: in each step every rank receives from P - 1
senders at once. OptiReduce bounds it dynamically; here that is the transport's `dlcp.incast` /
`dlcp.incast_adaptive` (dlcp/transport/core/incast.py), not the plan. Paths: each (src, dst)
pair gets one balanced path (Router.balanced_paths), as the ring's pairs do.
"""

from __future__ import annotations

from dlcp.comm.plans.collective import CollectiveEntry, FixedSchedule, register_collective, spec_for, worker_hosts
from dlcp.comm.plans.paths import Router, rank_hosts
from dlcp.comm.plans.schedule import Schedule, Transfer
from dlcp.comm.plans.topology_arg import topology_label
from dlcp.network.topology import TopologySpec
from dlcp.settings import BadValue


def tar_steps(members: list[int]) -> list[list[tuple[int, int, int, str]]]:
    """(src, dst, chunk, op) of the two steps of a transpose all-reduce over `members` (chunk i of
    len(members) cuts belongs to members[i]); each step lists rank r's transfers to r+1, r+2, ...
    first, so the order of the sends rotates with the sender."""
    P = len(members)
    rs = [(members[r], members[(r + o) % P], (r + o) % P, "reduce") for r in range(P) for o in range(1, P)]
    ag = [(members[r], members[(r + o) % P], r, "copy") for r in range(P) for o in range(1, P)]
    return [rs, ag]


def tar_schedule(spec: TopologySpec, hosts: list[str] | None = None) -> Schedule:
    """The transpose all-reduce over ranks 0..P-1 (hosts: the host of each rank; default the
    topology's workers)."""
    hosts = list(hosts or rank_hosts(spec))
    P = len(hosts)
    pairs = [(a, b) for a in range(P) for b in range(P) if a != b]
    pair_path = dict(zip(pairs, Router(spec).balanced_paths((hosts[a], hosts[b]) for a, b in pairs)))
    steps = [
        [Transfer(src, dst, chunk, P, op, pair_path[(src, dst)]) for src, dst, chunk, op in step]
        for step in tar_steps(list(range(P)))
    ]
    return Schedule("tar", tuple(hosts), steps, {"reduce_scatter": (0, 1), "all_gather": (1, 2)})


def plan_json(spec: TopologySpec, hosts: list[str] | None = None) -> dict:
    """What `dlcp schedule --collective tar` prints: chunk owners, incast per step, steps per phase."""
    sched = tar_schedule(spec, hosts)
    P = sched.ranks
    return {
        "collective": "tar",
        "topology": topology_label(spec),
        "hosts": list(sched.hosts),
        "owner": {str(c): c for c in range(P)},
        "incast_per_step": max(0, P - 1),
        "steps_per_phase": sched.steps_per_phase,
    }


def tar_plan(workers: int, spec: TopologySpec | None = None) -> FixedSchedule:
    spec = spec_for(workers, spec)
    return FixedSchedule("tar", tar_schedule(spec, worker_hosts(spec, workers)))


def _check(options, scheduler: str, workers: int | None) -> None:
    if workers is not None and workers < 2:
        raise BadValue("collective", f"'tar' needs at least 2 workers, got {workers}")


register_collective(
    CollectiveEntry(
        name="tar",
        description="OptiReduce's Transpose AllReduce (Warraich et al., NSDI'25): chunk j to rank j, reduced, "
        "then to every rank: 1 step per phase",
        plan=lambda options, workers, spec: tar_plan(workers, spec),
        describe=lambda options, workers, spec: plan_json(spec_for(workers, spec)),
        check=_check,
    )
)
