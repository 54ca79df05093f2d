"""MultiTree all-reduce (Huang et al., ISCA'21) as a step schedule over a TopologySpec.

One spanning tree per root rank; tree r reduces and broadcasts chunk r of P. The trees are grown
together, one construction step at a time, with the links of the step handed out so that no
directed link carries more chunks in that step than its capacity (paths.Router):

    step t: every link gets its capacity; repeat round-robin over the roots until a whole round
            adds nothing: tree r (if incomplete) adds ONE edge parent u -> child v, where
              - u was in tree r when step t began (its data is there in time, see below),
              - u has gained fewer than kary - 1 children in tree r during step t,
              - v is not in tree r, and some equal-cost route path u -> v has capacity left on
                every link; among all such (u, v) the fewest hops win, then v's rank offset
                from the root (v - r mod P), then u's join order. The offset makes trees of
                different roots near-translates of each other, and translates that use each
                link direction once per step never collide (docs/collectives.md has the
                tie-break orders we tried and their step counts);
            the edge takes one unit of capacity on each link of that path and, with
            paths="spray" (default), also its equal share on every equal-cost member link, so
            the step still fits when the switches spray the transfer instead of pinning it.
    T = number of steps.

Schedule (2T steps, T per phase): an edge added at step t carries chunk r child -> parent
(reduce) at step T-1-t and parent -> child (copy) at step T+t. Children join after their parent,
so in reduce-scatter a node hears from all its children before it sends, and in all-gather a
parent holds the reduced chunk before it forwards it. Edges of one construction step fit the
link capacities in the all-gather direction, and their reversals fit them in the reduce-scatter
direction (links are full duplex with equal capacity both ways), so the schedule has no conflicts.

Differences from the public simulator (farabimahmud/accelerator src/allreduce/multitree_allreduce.py)
are listed in docs/collectives.md: it stops a step when the last root of a round adds nothing
(we stop after a whole round adds nothing), its non-alternating branch uses an undefined
`from_nodes`, it searches remote switches depth-first (we take shortest routed paths only, so
every transfer follows routes a switch can install), and it models the node-router link of a torus
as kary - 1 parallel links (we derive host-link capacity from link rates).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Literal, get_args

from pydantic import Field

from dlcp.comm.plans.collective import (
    CollectiveEntry,
    FixedSchedule,
    register_collective,
    spec_for,
    steps_line,
    worker_hosts,
)
from dlcp.comm.plans.paths import PlanError, Router, links_of, rank_hosts
from dlcp.comm.plans.schedule import Schedule, Transfer
from dlcp.comm.plans.topology_arg import topology_label
from dlcp.network.topology import TopologySpec
from dlcp.settings import Settings


@dataclass(frozen=True)
class TreeEdge:
    root: int
    parent: int
    child: int
    step: int  # construction step t
    path: tuple[str, ...]  # parent host -> child host (the all-gather direction)


@dataclass
class Trees:
    hosts: tuple[str, ...]
    kary: int
    steps: int  # T: construction steps = schedule steps per phase
    edges: dict[int, list[TreeEdge]]  # root -> its edges in the order they were added

    def height(self, root: int) -> int:
        depth = {root: 0}
        for e in self.edges[root]:
            depth[e.child] = depth[e.parent] + 1
        return max(depth.values())


PathMode = Literal["spray", "pinned"]
PATH_MODES = get_args(PathMode)


def build_trees(spec: TopologySpec, kary: int = 2, hosts: list[str] | None = None, paths: str = "spray") -> Trees:
    """The trees; `paths` says what the link allocation must survive:
    "pinned": every transfer on the path it names (needs source routing or per-flow pinning);
    "spray" (default): also the switches spraying each transfer equally over its equal-cost
    members (the project's spray modes), so the schedule has no conflict under either reading."""
    if not isinstance(kary, int) or kary < 2:
        raise PlanError(
            f"multitree.kary: need an integer >= 2 (a parent gains up to kary-1 children per step), got {kary!r}"
        )
    if paths not in PATH_MODES:
        raise PlanError(f"multitree.paths: {paths!r} is not one of {', '.join(PATH_MODES)}")
    hosts = list(hosts or rank_hosts(spec))
    P = len(hosts)
    if P < 2:
        raise PlanError(f"multitree: {P} rank(s); an all-reduce needs at least 2")
    router = Router(spec)
    members = {r: [r] for r in range(P)}  # join order
    edges: dict[int, list[TreeEdge]] = {r: [] for r in range(P)}
    t = 0
    while any(len(m) < P for m in members.values()):
        budget = _StepBudget(router, paths == "spray")
        at_start = {r: list(m) for r, m in members.items()}
        gained: Counter = Counter()  # (root, parent) -> children added this step
        added, progress = 0, True
        while progress:
            progress = False
            for r in range(P):
                if len(members[r]) == P:
                    continue
                edge = _grow(router, hosts, r, at_start[r], set(members[r]), gained, kary, budget, t)
                if edge is None:
                    continue
                gained[(r, edge.parent)] += 1
                members[r].append(edge.child)
                edges[r].append(edge)
                added += 1
                progress = True
        if not added:
            stuck = next(r for r in range(P) if len(members[r]) < P)
            raise PlanError(f"multitree: tree of rank {stuck} cannot reach every rank (topology not connected?)")
        t += 1
    return Trees(tuple(hosts), kary, t, edges)


class _StepBudget:
    """Link capacity left in one construction step: whole chunks on pinned paths and, when
    `spray`, the fractions spraying would put on every equal-cost member."""

    def __init__(self, router: Router, spray: bool):
        self.router = router
        self.pinned = dict(router.capacity)
        self.sprayed = {ln: float(c) for ln, c in router.capacity.items()} if spray else None

    def take(self, src: str, dst: str) -> tuple[str, ...] | None:
        """A path src -> dst that fits, its capacity taken; None if none fits."""
        if self.pinned.get((src, self.router.spec.hosts[src].switch), 0) < 1:
            return None
        sprayed = self.sprayed if self.sprayed is not None else {}  # no spraying: no shares to take
        shares = self.router.spray_shares(src, dst) if self.sprayed is not None else {}
        if any(sprayed[ln] < f - 1e-9 for ln, f in shares.items()):
            return None
        path = self.router.free_path(src, dst, self.pinned)
        if path is None:
            return None
        for ln in links_of(path):
            self.pinned[ln] -= 1
        for ln, f in shares.items():
            sprayed[ln] -= f
        return path


def _grow(router: Router, hosts, root, parents, in_tree, gained, kary, budget: _StepBudget, t) -> TreeEdge | None:
    """The one edge tree `root` adds in this turn (its capacity taken), or None."""
    P = len(hosts)
    options = []
    for order, u in enumerate(parents):
        if gained[(root, u)] >= kary - 1:
            continue
        for v in range(P):
            if v not in in_tree:
                options.append((router.hops(hosts[u], hosts[v]), (v - root) % P, order, u, v))
    for *_, u, v in sorted(options):
        path = budget.take(hosts[u], hosts[v])
        if path is not None:
            return TreeEdge(root, u, v, t, path)
    return None


def multitree_schedule(
    spec: TopologySpec, kary: int = 2, hosts: list[str] | None = None, paths: str = "spray", trees: Trees | None = None
) -> Schedule:
    trees = trees or build_trees(spec, kary, hosts, paths)
    P, T = len(trees.hosts), trees.steps
    steps: list[list[Transfer]] = [[] for _ in range(2 * T)]
    for root, es in trees.edges.items():
        for e in es:
            steps[T - 1 - e.step].append(Transfer(e.child, e.parent, root, P, "reduce", tuple(reversed(e.path))))
            steps[T + e.step].append(Transfer(e.parent, e.child, root, P, "copy", e.path))
    return Schedule("multitree", trees.hosts, steps, {"reduce_scatter": (0, T), "all_gather": (T, 2 * T)})


def plan_json(spec: TopologySpec, kary: int = 2, hosts: list[str] | None = None, paths: str = "spray") -> dict:
    """What `dlcp schedule --collective multitree` prints: per root its edges
    [child, parent, construction step, path parent->child], and the steps per phase."""
    trees = build_trees(spec, kary, hosts, paths)
    return {
        "collective": "multitree",
        "topology": topology_label(spec),
        "kary": kary,
        "paths": paths,
        "hosts": list(trees.hosts),
        "trees": {str(r): [[e.child, e.parent, e.step, list(e.path)] for e in es] for r, es in trees.edges.items()},
        "tree_height": {str(r): trees.height(r) for r in trees.edges},
        "steps_per_phase": trees.steps,
    }


def multitree_plan(
    workers: int, spec: TopologySpec | None = None, kary: int = 2, paths: str = "spray"
) -> FixedSchedule:
    spec = spec_for(workers, spec)
    return FixedSchedule("multitree", multitree_schedule(spec, kary, worker_hosts(spec, workers), paths))


class MultiTreeOptions(Settings):
    kary: int = Field(2, ge=2, le=16, description="multitree: a parent gains up to kary-1 children per tree and step")
    paths: PathMode = Field(
        "spray",
        description="multitree: links allocated so the schedule holds when sprayed too, or on pinned paths only",
    )


register_collective(
    CollectiveEntry(
        name="multitree",
        description="MultiTree (Huang et al., ISCA'21): a spanning tree per root, links shared out step by step",
        options=MultiTreeOptions,
        plan=lambda o, workers, spec: multitree_plan(workers, spec, o.kary, o.paths),
        describe=lambda o, workers, spec: plan_json(spec_for(workers, spec), o.kary, paths=o.paths),
        summary=lambda d: [
            *steps_line(d),
            f"{len(d['trees'])} trees, heights {min(d['tree_height'].values())}..{max(d['tree_height'].values())}, "
            f"kary {d['kary']}",
        ],
    )
)
