"""The double binary tree and the 2-D ring as step schedules, checked like the ring and MultiTree:
sums on real values, routed paths, steps per phase, cost, and what they share on the torus."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from dlcp.comm.plans import alpha_beta_cost, check_paths, execute
from dlcp.comm.plans.collective import COLLECTIVES
from dlcp.comm.plans.dtree import double_trees, dtree_schedule, inorder_tree
from dlcp.comm.plans.dtree import plan_json as dtree_json
from dlcp.comm.plans.multitree import multitree_schedule
from dlcp.comm.plans.paths import PlanError
from dlcp.comm.plans.ring import ring_schedule
from dlcp.comm.plans.ring2d import plan_json as ring2d_json
from dlcp.comm.plans.ring2d import rank_grid, ring2d_schedule
from dlcp.comm.plans.topology_arg import parse_topology

TOPOLOGIES = ["torus:4x4", "torus:8x8", "mesh:4x4", "star:8", "star:7", "leaf_spine:2x2x4", "torus:3x5"]


@pytest.mark.parametrize("topo", TOPOLOGIES)
@pytest.mark.parametrize("build", [dtree_schedule, ring2d_schedule])
def test_every_rank_ends_with_the_full_sum_on_routed_paths(topo, build):
    spec = parse_topology(topo)
    sched = build(spec)
    check_paths(sched, spec)
    rng = np.random.default_rng(5)
    vals = [rng.uniform(-1, 1, size=211) for _ in range(sched.ranks)]
    for out in execute(sched, vals):
        assert np.allclose(out, np.sum(vals, axis=0))


def test_reduce_phase_alone_leaves_each_tree_root_with_its_reduced_half():
    spec = parse_topology("star:7")
    sched = dtree_schedule(spec, pipeline=2)
    rs = type(sched)("dtree", sched.hosts, sched.steps[: sched.phases["reduce_scatter"][1]], {})
    vals = [np.full(8, float(r + 1)) for r in range(7)]
    after = execute(rs, vals)
    (_, d0), (_, d1) = double_trees(7)
    root0, root1 = (min(d, key=d.get) for d in (d0, d1))
    assert np.allclose(after[root0][:4], 28.0) and np.allclose(after[root1][4:], 28.0)


def test_double_trees_are_complementary_binary_trees():
    parent, depth = inorder_tree(7)  # 3 at the root, 1 and 5 below it, the even positions leaves
    assert parent == {1: 3, 0: 1, 2: 1, 5: 3, 4: 5, 6: 5} and depth[3] == 0 and max(depth.values()) == 2
    (p0, _), (p1, _) = double_trees(7)
    interior = [set(p.values()) for p in (p0, p1)]
    assert interior[0] == {1, 3, 5} and interior[1] == {2, 4, 6} and not interior[0] & interior[1]
    for parent in (p0, p1):
        assert max(list(parent.values()).count(p) for p in set(parent.values())) <= 2  # binary


def test_tree_steps_are_logarithmic_and_cost_follows_the_formula():
    spec = parse_topology("star:16")
    for k in (1, 4):
        sched = dtree_schedule(spec, pipeline=k)
        h = 4  # in-order tree over 16 positions
        assert sched.steps_per_phase == h + k - 1
        M, a, b = 8e6, 1e-4, 1e-8
        assert alpha_beta_cost(sched, M, a, b) == pytest.approx(2 * (h + k - 1) * (a + M / (2 * k) * b))
    assert dtree_schedule(spec).steps_per_phase < ring_schedule(spec).steps_per_phase
    with pytest.raises(PlanError, match="dtree.pipeline"):
        dtree_schedule(spec, pipeline=0)


def test_2d_ring_on_a_torus_uses_its_rows_and_columns_and_shares_no_link():
    spec = parse_topology("torus:8x8")
    grid = rank_grid(spec, [h.name for h in sorted(spec.hosts.values(), key=lambda h: int(h.name[1:]))])
    assert grid[0] == list(range(8)) and [row[0] for row in grid] == list(range(0, 64, 8))
    sched = ring2d_schedule(spec)
    assert sched.steps_per_phase == 7 + 7  # against the ring's 63
    for step in sched.steps:  # one pair per directed link and step: rows and columns are torus rings
        pairs = defaultdict(set)
        for t in step:
            for ln in t.links:
                pairs[ln].add((t.src, t.dst))
        assert all(len(p) == 1 for p in pairs.values())
    M, a, b = 100e6, 30e-6, 8 / 10e9
    ring = alpha_beta_cost(ring_schedule(spec), M, a, b, spec)
    two_d = alpha_beta_cost(sched, M, a, b, spec)
    assert two_d < ring  # the same bandwidth term, 28 start-ups instead of 126
    assert two_d - (2 * 14 * a) == pytest.approx(ring - 2 * 63 * a, rel=1e-9)


def test_2d_ring_on_a_leaf_spine_rows_are_racks():
    spec = parse_topology("leaf_spine:2x2x4")
    assert ring2d_json(spec)["rows"] == [[0, 2, 4, 6], [1, 3, 5, 7]]  # ranks alternate leaves
    assert ring2d_schedule(spec).steps_per_phase == 3 + 1


def test_multitree_beats_both_baselines_on_the_4x4_torus_model():
    spec = parse_topology("torus:4x4", fabric_mbps=10e3)
    M, a, b = 100e6, 30e-6, 8 / 10e9
    tree = alpha_beta_cost(multitree_schedule(spec, kary=5), M, a, b, spec)
    for other in (dtree_schedule(spec), ring2d_schedule(spec), ring_schedule(spec)):
        assert tree < alpha_beta_cost(other, M, a, b, spec)


def test_registered_with_plan_json():
    assert {"dtree", "ring2d"} <= set(COLLECTIVES.names())
    spec = parse_topology("torus:4x4")
    d = dtree_json(spec, pipeline=2)
    assert d["collective"] == "dtree" and d["steps_per_phase"] == dtree_schedule(spec, 2).steps_per_phase
    assert len(d["parents"]) == 2 and d["tree_height"] == [4, 4]
    plan = COLLECTIVES.get("ring2d").plan(None, 16, spec)
    assert plan.schedule(0).collective == "ring2d" and plan.workers == 16
