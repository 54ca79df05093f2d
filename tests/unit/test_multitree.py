"""MultiTree: trees, a contention-free step schedule, full sums on real values, fewer steps than a ring."""

from collections import Counter

import numpy as np
import pytest

from dlcp.comm.plans import PlanError, execute, link_conflicts
from dlcp.comm.plans.multitree import build_trees, multitree_schedule, plan_json
from dlcp.comm.plans.ring import ring_schedule
from dlcp.comm.plans.topology_arg import parse_topology
from dlcp.network import topology as topospec

TOPOLOGIES = ["torus:4x4", "mesh:4x4", "leaf_spine:2x2x4", "star:8"]


def test_trees_on_a_three_host_star_by_hand():
    # One switch, one chunk per host link per step. Step 0: each root sends to the next rank
    # (0->1, 1->2, 2->0) and no link is used twice; step 1: the remaining rank of every tree.
    trees = build_trees(topospec.star(3, 50), kary=2)
    assert trees.steps == 2
    got = {r: [(e.parent, e.child, e.step) for e in es] for r, es in trees.edges.items()}
    assert got == {0: [(0, 1, 0), (0, 2, 1)], 1: [(1, 2, 0), (1, 0, 1)], 2: [(2, 0, 0), (2, 1, 1)]}
    sched = multitree_schedule(topospec.star(3, 50), kary=2)
    # edges of construction step 1 reduce first (step T-1-1 = 0), those of step 0 next; all-gather
    # replays the construction order (step T + t)
    assert [[(t.src, t.dst, t.chunk, t.op) for t in step] for step in sched.steps] == [
        [(2, 0, 0, "reduce"), (0, 1, 1, "reduce"), (1, 2, 2, "reduce")],
        [(1, 0, 0, "reduce"), (2, 1, 1, "reduce"), (0, 2, 2, "reduce")],
        [(0, 1, 0, "copy"), (1, 2, 1, "copy"), (2, 0, 2, "copy")],
        [(0, 2, 0, "copy"), (1, 0, 1, "copy"), (2, 1, 2, "copy")],
    ]
    assert sched.steps[0][0].path == ("h3", "s1", "h1")


@pytest.mark.parametrize("topo", TOPOLOGIES)
@pytest.mark.parametrize("kary", [2, 3, 5])
def test_trees_span_and_respect_join_order_and_kary(topo, kary):
    trees = build_trees(parse_topology(topo), kary)
    P = len(trees.hosts)
    for root, es in trees.edges.items():
        joined = {root: -1}
        for e in es:
            assert e.parent in joined and e.child not in joined
            assert joined[e.parent] < e.step  # the parent was in the tree when the step began
            joined[e.child] = e.step
        assert set(joined) == set(range(P))
        per_parent_step = Counter((e.parent, e.step) for e in es)
        assert max(per_parent_step.values()) <= kary - 1


@pytest.mark.parametrize("topo", TOPOLOGIES + ["torus:3x5", "mesh:2x3", "leaf_spine:2x4x4", "dumbbell:3x3"])
@pytest.mark.parametrize("kary", [2, 5])
def test_schedule_uses_each_link_at_most_once_per_step_and_direction(topo, kary):
    spec = parse_topology(topo)
    sched = multitree_schedule(spec, kary)  # paths="spray": safe pinned and sprayed
    assert link_conflicts(sched, spec) == []
    assert link_conflicts(sched, spec, spray=True) == []
    pinned = multitree_schedule(spec, kary, paths="pinned")
    assert link_conflicts(pinned, spec) == []


def test_pinned_allocation_can_break_under_spraying_and_spray_mode_does_not():
    spec = parse_topology("torus:4x4")
    pinned = multitree_schedule(spec, 5, paths="pinned")
    # one tree edge spans two switch hops with two equal-cost paths; sprayed, it collides
    assert link_conflicts(pinned, spec, spray=True) != []
    assert link_conflicts(multitree_schedule(spec, 5), spec, spray=True) == []
    with pytest.raises(PlanError, match="multitree.paths: 'ecmp' is not one of spray, pinned"):
        build_trees(spec, 5, paths="ecmp")


@pytest.mark.parametrize("topo", TOPOLOGIES)
def test_no_conflicts_with_single_chunk_host_links(topo):
    # host links at the fabric rate carry one chunk per step: every link at most once per step
    spec = parse_topology(topo, host_mbps=50)
    sched = multitree_schedule(spec, 3)
    assert link_conflicts(sched, spec) == []
    for step in sched.steps:
        links = Counter(ln for t in step for ln in t.links)
        assert max(links.values()) == 1


@pytest.mark.parametrize("topo", TOPOLOGIES + ["torus:3x5", "mesh:2x3"])
@pytest.mark.parametrize("kary", [2, 3, 5])
def test_every_rank_ends_with_the_full_sum(topo, kary):
    spec = parse_topology(topo)
    P = len(spec.hosts)
    rng = np.random.default_rng(11 + kary)
    vals = [rng.normal(scale=3.0, size=203) for _ in range(P)]
    for out in execute(multitree_schedule(spec, kary), vals):
        assert np.allclose(out, np.sum(vals, axis=0))


def test_torus_4x4_multitree_needs_far_fewer_steps_than_the_ring():
    spec = parse_topology("torus:4x4")  # host links at 4x the fabric rate: the multi-port NI
    ring = ring_schedule(spec).steps_per_phase
    assert ring == 15
    steps = {k: multitree_schedule(spec, k).steps_per_phase for k in (2, 3, 5)}
    # lower bound 4: 16 trees x 15 edges = 240 link-steps over 64 directed fabric links
    assert steps[5] == 5 and steps[3] <= 5 and steps[2] <= 6
    assert multitree_schedule(spec, 5, paths="pinned").steps_per_phase == 4  # the bound, if paths are pinned
    assert max(steps.values()) * 2 <= ring


def test_with_one_chunk_host_links_no_tree_schedule_beats_the_ring():
    # every rank must receive P-1 chunks over its one host link, one per step: P-1 steps at least
    spec = parse_topology("torus:4x4", host_mbps=50)
    assert multitree_schedule(spec, 5).steps_per_phase >= 15
    assert multitree_schedule(parse_topology("star:8"), 5).steps_per_phase == 7


def test_kary_and_size_errors():
    with pytest.raises(PlanError, match="multitree.kary: need an integer >= 2"):
        build_trees(parse_topology("star:4"), kary=1)
    with pytest.raises(PlanError, match="at least 2"):
        build_trees(parse_topology("star:4"), hosts=["h1"])


def test_plan_json():
    j = plan_json(parse_topology("torus:4x4"), kary=5)
    assert j["collective"] == "multitree" and j["steps_per_phase"] == 5 and j["kary"] == 5 and j["paths"] == "spray"
    assert sorted(map(int, j["trees"])) == list(range(16))
    assert all(len(es) == 15 for es in j["trees"].values())
    child, parent, step, path = j["trees"]["0"][0]
    assert parent == 0 and step == 0 and path[0] == "h1" and path[-1] == f"h{child + 1}"
    assert max(j["tree_height"].values()) <= 4
