"""The ring all-reduce as a step schedule: the order RingAllReduce runs, paths, sums, cost."""

import numpy as np
import pytest

from dlcp.comm.plans import alpha_beta_cost, execute, link_conflicts
from dlcp.comm.plans.ring import plan_json, ring_schedule
from dlcp.comm.plans.schedule import chunk_bounds
from dlcp.comm.plans.topology_arg import parse_topology
from dlcp.network import topology as topospec


def test_chunk_order_is_ringallreduces():
    s = ring_schedule(topospec.star(4, 50))
    assert s.phases == {"reduce_scatter": (0, 3), "all_gather": (3, 6)} and s.steps_per_phase == 3
    # reduce-scatter step 1: rank r sends chunk (r - 1) mod 4 to r + 1; all-gather step 0: chunk r + 1
    assert [(t.src, t.dst, t.chunk, t.op) for t in s.steps[1]] == [
        (0, 1, 3, "reduce"),
        (1, 2, 0, "reduce"),
        (2, 3, 1, "reduce"),
        (3, 0, 2, "reduce"),
    ]
    assert [(t.src, t.chunk, t.op) for t in s.steps[3]] == [
        (0, 1, "copy"),
        (1, 2, "copy"),
        (2, 3, "copy"),
        (3, 0, "copy"),
    ]
    assert s.steps[0][0].path == ("h1", "s1", "h2")


def test_after_reduce_scatter_rank_r_owns_chunk_r_plus_1_and_at_the_end_all_hold_the_sum():
    spec = topospec.torus((2, 3), 50, 50)
    P = 6
    rng = np.random.default_rng(3)
    vals = [rng.normal(size=29) for _ in range(P)]
    full = ring_schedule(spec)
    rs_only = type(full)("ring", full.hosts, full.steps[: P - 1], {})
    after_rs = execute(rs_only, vals)
    b = chunk_bounds(29, P)
    for r in range(P):
        c = (r + 1) % P
        assert np.allclose(after_rs[r][b[c] : b[c + 1]], sum(vals)[b[c] : b[c + 1]])
    for out in execute(full, vals):
        assert np.allclose(out, sum(vals))


@pytest.mark.parametrize("topo", ["torus:4x4", "mesh:4x4", "star:8", "leaf_spine:2x2x4", "torus:3x5"])
def test_ring_sums_on_real_values(topo):
    spec = parse_topology(topo)
    P = len(spec.hosts)
    rng = np.random.default_rng(7)
    vals = [rng.uniform(-1, 1, size=101) for _ in range(P)]
    sched = ring_schedule(spec)
    assert sched.steps_per_phase == P - 1
    for out in execute(sched, vals):
        assert np.allclose(out, np.sum(vals, axis=0))


def test_ring_on_a_leaf_spine_with_interleaved_workers_overloads_the_uplinks():
    spec = parse_topology("leaf_spine:2x2x4")  # ranks alternate leaves: every ring hop crosses a spine
    sched = ring_schedule(spec)
    conflicts = link_conflicts(sched, spec)
    # per step each leaf sends 4 chunks up over 2 uplinks and receives 4 over 2 downlinks: 2 per link
    assert {n for _, _, n, _ in conflicts} == {2}
    assert len(conflicts) == 14 * 8 and {s for s, *_ in conflicts} == set(range(14))
    M, a, b = 8e6, 1e-4, 1e-8
    assert alpha_beta_cost(sched, M, a, b) == pytest.approx(14 * (a + M / 8 * b))
    assert alpha_beta_cost(sched, M, a, b, spec) == pytest.approx(14 * (a + 2 * M / 8 * b))


def test_ring_on_a_torus_has_no_conflicts_and_costs_2_p_minus_1_steps():
    spec = parse_topology("torus:4x4")
    sched = ring_schedule(spec)
    assert link_conflicts(sched, spec) == []
    M, a, b = 4e6, 5e-5, 1.6e-7
    assert alpha_beta_cost(sched, M, a, b, spec) == pytest.approx(30 * (a + M / 16 * b))


def test_plan_json():
    j = plan_json(parse_topology("torus:4x4"))
    assert j["collective"] == "ring" and j["topology"] == "torus:4x4" and j["steps_per_phase"] == 15
    assert j["ring"] == list(range(16)) and j["paths"]["0->1"] == ["h1", "s1", "s2", "h2"]
    assert len(j["paths"]["3->4"]) == 5  # (0,3) -> (1,0): two switch hops on the torus


@pytest.mark.parametrize("topo", ["leaf_spine:2x2x4", "leaf_spine:2x4x4", "torus:3x5", "star:8"])
def test_locality_ring_sums_on_real_values(topo):
    spec = parse_topology(topo)
    P = len(spec.hosts)
    rng = np.random.default_rng(11)
    vals = [rng.uniform(-1, 1, size=97) for _ in range(P)]
    sched = ring_schedule(spec, order="locality")
    assert sched.steps_per_phase == P - 1 and {t.src for t in sched.steps[0]} == set(range(P))
    for out in execute(sched, vals):
        assert np.allclose(out, np.sum(vals, axis=0))


def test_locality_ring_crosses_each_leaf_once_and_shares_no_link():
    spec = parse_topology("leaf_spine:2x4x4")  # 4 leaves of 4 interleaved workers, 2 spines
    sched = ring_schedule(spec, order="locality")
    assert link_conflicts(sched, spec) == [] and link_conflicts(sched, spec, spray=True) == []
    crossing = [t for t in sched.steps[0] if len(t.path) > 3]  # host, leaf, spine, leaf, host
    assert len(crossing) == 4  # one flow up (and one down) per leaf
    j = plan_json(spec, order="locality")
    assert j["order"] == "locality" and sorted(j["ring"]) == list(range(16)) and j["ring"][:4] == [0, 4, 8, 12]
    with pytest.raises(ValueError, match="ring order 'nearest'"):
        ring_schedule(spec, order="nearest")
