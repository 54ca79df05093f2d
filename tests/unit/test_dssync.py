"""DS-Sync groups: the exact global average in the stated number of iterations, topology-aware paths."""

import numpy as np
import pytest

from dlcp.comm.plans import PlanError, alpha_beta_cost, execute, link_conflicts
from dlcp.comm.plans.dssync import (
    average_rounds,
    dssync_groups,
    iteration_cost,
    plan_json,
    prime_factors,
    round_schedule,
    rounds_to_average,
    topology_groups,
)
from dlcp.comm.plans.paths import Router, links_of
from dlcp.comm.plans.topology_arg import parse_topology


def spread(vals):
    return max(float(np.max(np.abs(v - np.mean(vals, axis=0)))) for v in vals)


# (N, s, rounds): the smallest K with N | s^K, worked out by hand
EXACT = [
    (16, 4, 2),
    (16, 2, 4),
    (8, 4, 2),
    (8, 2, 3),
    (24, 6, 3),
    (12, 6, 2),
    (9, 3, 2),
    (27, 3, 3),
    (32, 4, 3),
    (4, 4, 1),
    (36, 6, 2),
    (64, 8, 2),
    (18, 6, 2),
]


@pytest.mark.parametrize("N,s,K", EXACT)
def test_groups_of_s_reach_the_exact_average_in_the_stated_rounds_and_not_before(N, s, K):
    plan = dssync_groups(N, s)
    assert plan.period == K and plan.exact_equal_groups
    for it in plan.iterations:
        assert sorted(r for g in it for r in g) == list(range(N))  # a partition
        assert {len(g) for g in it} == {s}
    rng = np.random.default_rng(N * 100 + s)
    vals = [rng.normal(size=17) for _ in range(N)]
    assert spread(average_rounds(vals, plan)) < 1e-12
    if K > 1:
        assert spread(average_rounds(vals, plan, rounds=K - 1)) > 1e-3


@pytest.mark.parametrize(
    "N,s,sizes", [(12, 4, [4, 3]), (6, 2, [2, 3]), (20, 4, [4, 5]), (30, 6, [6, 5]), (24, 4, [4, 4, 3])]
)
def test_leftover_primes_get_rounds_of_their_own_and_still_reach_the_average(N, s, sizes):
    plan = dssync_groups(N, s)
    assert not plan.exact_equal_groups and plan.period == len(sizes)
    assert [len(it[0]) for it in plan.iterations] == sizes
    rng = np.random.default_rng(N + s)
    vals = [rng.normal(size=9) for _ in range(N)]
    assert spread(average_rounds(vals, plan)) < 1e-12
    assert spread(average_rounds(vals, plan, rounds=plan.period - 1)) > 1e-3


def test_16_workers_in_groups_of_4_by_hand():
    j = plan_json(16, 4)
    assert j["rounds_to_average"] == 2 and j["exact_equal_groups"] and j["steps_per_phase"] == 3
    assert j["iterations"] == [
        [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]],
        [[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]],
    ]
    assert rounds_to_average(16, 4) == (2, True) and rounds_to_average(12, 4) == (2, False)
    assert prime_factors(360) == [2, 2, 2, 3, 3, 5]


@pytest.mark.parametrize(
    "workers,group,msg",
    [(16, 5, "dssync.group"), (16, 1, "dssync.group"), (16, 32, "dssync.group"), (1, 1, "dssync.workers")],
)
def test_bad_sizes(workers, group, msg):
    with pytest.raises(PlanError, match=msg):
        dssync_groups(workers, group)


@pytest.mark.parametrize("topo,group", [("leaf_spine:2x4x4", 4), ("star:8", 2), ("torus:4x4", 4), ("torus:3x3", 3)])
def test_group_rings_on_the_network_give_the_group_means(topo, group):
    spec = parse_topology(topo)
    plan = topology_groups(spec, group)
    N = plan.workers
    rng = np.random.default_rng(5)
    vals = [rng.uniform(-2, 2, size=31) for _ in range(N)]
    state = vals
    for k in range(plan.period):
        sums = execute(round_schedule(spec, plan, k), state)
        size = {r: len(g) for g in plan.groups(k) for r in g}
        state = [sums[r] / size[r] for r in range(N)]
        expected = average_rounds(vals, plan, rounds=k + 1)
        assert all(np.allclose(a, b) for a, b in zip(state, expected))
    for v in state:
        assert np.allclose(v, np.mean(vals, axis=0))


def test_leaf_spine_first_round_stays_in_the_rack_and_cross_rack_traffic_is_spread_over_uplinks():
    spec = parse_topology("leaf_spine:2x4x4")  # 2 spines s1 s2, leaves s3..s6, ranks interleaved
    plan = topology_groups(spec, 4)
    hosts = [h.name for h in spec.by_role("worker")]
    leaf = [spec.hosts[h].switch for h in hosts]
    assert all(len({leaf[r] for r in g}) == 1 for g in plan.groups(0))
    assert all(len({leaf[r] for r in g}) == 4 for g in plan.groups(1))  # one member per leaf
    assert link_conflicts(round_schedule(spec, plan, 0), spec) == []  # nothing leaves a leaf
    cross = round_schedule(spec, plan, 1)
    uplinks = {(lf, sp) for lf in ("s3", "s4", "s5", "s6") for sp in ("s1", "s2")}
    for step in cross.steps:
        load = dict.fromkeys(uplinks, 0)
        for t in step:
            for ln in t.links:
                if ln in load:
                    load[ln] += 1
        assert set(load.values()) == {2}  # each leaf's 4 flows: 2 per uplink, never 4 on one
    # the first equal-cost member for every flow would put all 4 on the uplink to s1
    router = Router(spec)
    first = [router.paths(hosts[t.src], hosts[t.dst])[0] for t in cross.steps[0]]
    assert sum(ln == ("s3", "s1") for p in first for ln in links_of(p)) == 4


def test_plan_json_with_topology():
    j = plan_json(16, 4, parse_topology("leaf_spine:2x4x4"))
    assert j["topology"] == "leaf_spine" and len(j["hosts"]) == 16 and j["rounds_to_average"] == 2
    with pytest.raises(PlanError, match="dssync.workers: 8, but the topology has 16 ranks"):
        plan_json(8, 4, parse_topology("leaf_spine:2x4x4"))


def test_iteration_cost_is_a_ring_inside_the_largest_group():
    plan = dssync_groups(12, 4)  # rounds of 4, then of 3
    M, a, b = 1200.0, 2.0, 0.5
    assert iteration_cost(plan, 0, M, a, b) == pytest.approx(6 * (2 + 300 * 0.5))
    assert iteration_cost(plan, 1, M, a, b) == pytest.approx(4 * (2 + 400 * 0.5))
    assert iteration_cost(plan, 2, M, a, b) == iteration_cost(plan, 0, M, a, b)  # periodic
    spec = parse_topology("star:12")
    sched = round_schedule(spec, topology_groups(spec, 4), 0)
    assert alpha_beta_cost(sched, M, a, b, spec) == pytest.approx(iteration_cost(plan, 0, M, a, b))


def test_on_an_8x8_torus_groups_of_4_are_grid_blocks_without_shared_links_and_cheaper_than_the_ring():
    # the digit rule's second round (positions 4 apart: multi-hop, shared links) cost more than the
    # whole ring; DS-Sync's groups are meant to be bottleneck-free
    from dlcp.comm.plans.dssync import dssync_rounds
    from dlcp.comm.plans.ring import ring_plan

    spec = parse_topology("torus:8x8", fabric_mbps=10e3)
    plan = dssync_rounds(64, 4, spec)
    assert plan.pattern.rule == "grid blocks" and plan.period == 2
    assert sorted(plan.groups(0)[0]) == [0, 1, 8, 9]  # a 2x2 block of the grid
    M, a, b = 100e6, 30e-6, 8 / 10e9
    ring = alpha_beta_cost(ring_plan(64, spec).schedule(0), M, a, b, spec)
    for k in range(plan.period):
        assert link_conflicts(plan.schedule(k), spec) == []
        assert alpha_beta_cost(plan.schedule(k), M, a, b, spec) < ring
    # 4 blocks per dimension: the shifted tilings mix towards the average without reaching it
    assert not plan.pattern.exact and plan_json(64, 4, spec)["rounds_to_average"] is None
    rng = np.random.default_rng(1)
    vals = [rng.normal(size=5) for _ in range(64)]
    assert spread(average_rounds(vals, plan.pattern, 20)) < 0.01 * spread(vals)


def test_a_torus_whose_digit_rounds_share_no_link_keeps_the_exact_rule():
    from dlcp.comm.plans.dssync import dssync_rounds

    plan = dssync_rounds(16, 4, parse_topology("torus:4x4"))
    assert plan.pattern.rule == "digits" and plan.pattern.exact and plan.period == 2
