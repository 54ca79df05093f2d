"""Double binary tree all-reduce as a step schedule, and its registration as the collective `dtree`
(one of MultiTree's baselines [C: farabimahmud/accelerator, `dtree`]; NCCL's tree algorithm since
2.4 [R]).

Two binary trees over the ranks, each reducing then broadcasting half of the buffer. Tree 0 is the
in-order balanced binary tree over positions 0..P-1 (a range's middle is its root, the halves its
subtrees), so its leaves are the even positions where P + 1 is a power of two; tree 1 is the same
shape over the ranks shifted by one, so a rank interior in one tree is mostly a leaf in the other
and the two halves load different links. [D]: the shift is our reading of "complementary trees";
NCCL builds them with bit tricks on the rank.

Pipelining: each half is cut into `pipeline` = k sub-chunks (2k chunks in all; chunk tau*k + j is
sub-chunk j of tree tau). With h the height of the trees:

    reduce:    a node at depth d sends sub-chunk j to its parent at step (h - d) + j, after its
               children's (step h - d - 1 + j): h + k - 1 steps;
    broadcast: a node at depth d sends sub-chunk j to its children at step (h + k - 1) + d + j,
               after its parent's: h + k - 1 steps.

So 2 (h + k - 1) steps each moving M / 2k: the alpha-beta cost 2 (h + k - 1)(alpha + M / 2k x
beta), logarithmic in P where the ring is linear. The reduce phase is the schedule's
reduce-scatter (the roots then hold the reduced halves) and the broadcast its all-gather, so
DeAR's split runs on it. Paths: one balanced equal-cost path per (parent, child) pair.
"""

from __future__ import annotations

from pydantic import Field

from dlcp.comm.plans.collective import CollectiveEntry, FixedSchedule, register_collective, spec_for, worker_hosts
from dlcp.comm.plans.paths import PlanError, Router, rank_hosts
from dlcp.comm.plans.schedule import Schedule, Transfer
from dlcp.comm.plans.topology_arg import topology_label
from dlcp.network.topology import TopologySpec
from dlcp.settings import Settings


def inorder_tree(n: int) -> tuple[dict[int, int], dict[int, int]]:
    """(parent, depth) of positions 0..n-1 in the in-order balanced binary tree; the root has no
    parent."""
    parent: dict[int, int] = {}
    depth: dict[int, int] = {}

    def build(lo: int, hi: int, up: int | None, d: int) -> None:
        if lo >= hi:
            return
        mid = (lo + hi) // 2
        depth[mid] = d
        if up is not None:
            parent[mid] = up
        build(lo, mid, mid, d + 1)
        build(mid + 1, hi, mid, d + 1)

    build(0, n, None, 0)
    return parent, depth


def double_trees(P: int) -> list[tuple[dict[int, int], dict[int, int]]]:
    """(parent, depth) by rank of the two trees: tree 0 over positions = ranks, tree 1 the same
    shape with position p holding rank (p + 1) mod P."""
    parent, depth = inorder_tree(P)
    shifted_parent = {(c + 1) % P: (p + 1) % P for c, p in parent.items()}
    shifted_depth = {(r + 1) % P: d for r, d in depth.items()}
    return [(parent, depth), (shifted_parent, shifted_depth)]


def dtree_schedule(spec: TopologySpec, pipeline: int = 4, hosts: list[str] | None = None) -> Schedule:
    if not isinstance(pipeline, int) or isinstance(pipeline, bool) or pipeline < 1:
        raise PlanError(f"dtree.pipeline: need an integer >= 1 (sub-chunks per tree), got {pipeline!r}")
    hosts = list(hosts or rank_hosts(spec))
    P, k = len(hosts), pipeline
    if P < 2:
        raise PlanError(f"dtree: {P} rank(s); an all-reduce needs at least 2")
    trees = double_trees(P)
    h = max(max(depth.values()) for _, depth in trees)
    pairs = list(dict.fromkeys((c, p) for parent, _ in trees for c, p in parent.items()))
    up = dict(zip(pairs, Router(spec).balanced_paths((hosts[c], hosts[p]) for c, p in pairs)))
    phase = h + k - 1
    steps: list[list[Transfer]] = [[] for _ in range(2 * phase)]
    for tau, (parent, depth) in enumerate(trees):
        for child, par in parent.items():
            d = depth[child]
            for j in range(k):
                chunk = tau * k + j
                path = up[(child, par)]
                steps[h - d + j].append(Transfer(child, par, chunk, 2 * k, "reduce", path))
                down = tuple(reversed(path))  # full-duplex links: the reverse of a route is a route
                steps[phase + (d - 1) + j].append(Transfer(par, child, chunk, 2 * k, "copy", down))
    return Schedule("dtree", tuple(hosts), steps, {"reduce_scatter": (0, phase), "all_gather": (phase, 2 * phase)})


def dtree_plan(workers: int, spec: TopologySpec | None = None, pipeline: int = 4) -> FixedSchedule:
    spec = spec_for(workers, spec)
    return FixedSchedule("dtree", dtree_schedule(spec, pipeline, worker_hosts(spec, workers)))


def plan_json(spec: TopologySpec, pipeline: int = 4, hosts: list[str] | None = None) -> dict:
    """What `dlcp schedule --collective dtree` prints: both trees' parents, heights, steps per phase."""
    hosts = list(hosts or rank_hosts(spec))
    sched = dtree_schedule(spec, pipeline, hosts)
    trees = double_trees(len(hosts))
    return {
        "collective": "dtree",
        "topology": topology_label(spec),
        "hosts": hosts,
        "pipeline": pipeline,
        "parents": [{str(c): p for c, p in sorted(parent.items())} for parent, _ in trees],
        "tree_height": [max(depth.values()) for _, depth in trees],
        "steps_per_phase": sched.steps_per_phase,
    }


class DTreeOptions(Settings):
    pipeline: int = Field(4, ge=1, le=64, description="dtree: sub-chunks each tree's half is pipelined in")


register_collective(
    CollectiveEntry(
        name="dtree",
        description="double binary tree: two complementary binary trees, each reducing and broadcasting half",
        options=DTreeOptions,
        plan=lambda o, workers, spec: dtree_plan(workers, spec, o.pipeline),
        describe=lambda o, workers, spec: plan_json(spec_for(workers, spec), o.pipeline),
    )
)
