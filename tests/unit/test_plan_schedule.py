"""The shared plan machinery: routed paths, link capacities, link_conflicts, execute, the cost."""

import numpy as np
import pytest

from dlcp.comm.plans import (
    PlanError,
    Router,
    Schedule,
    Transfer,
    alpha_beta_cost,
    execute,
    link_conflicts,
)
from dlcp.comm.plans.topology_arg import parse_topology
from dlcp.network import topology as topospec


def star3():
    return topospec.star(3, 50)


def test_paths_follow_every_equal_cost_route():
    ls = topospec.leaf_spine(2, 2, 2, 50, 50)  # spines s1 s2, leaves s3 (h1 h2) s4 (h3 h4)
    r = Router(ls)
    assert r.paths("h1", "h3") == [("h1", "s3", "s1", "s4", "h3"), ("h1", "s3", "s2", "s4", "h3")]
    assert r.paths("h1", "h2") == [("h1", "s3", "h2")]
    assert r.hops("h1", "h3") == 4 and r.hops("h1", "h2") == 2
    assert r.is_route_path(("h1", "s3", "s2", "s4", "h3"))
    assert not r.is_route_path(("h1", "s3", "s1", "s3", "h2"))  # a detour is not a route
    with pytest.raises(PlanError, match="to itself"):
        r.paths("h1", "h1")


def test_link_capacity_comes_from_the_rate_over_the_fabric_rate():
    r = Router(topospec.torus((4, 4), host_mbps=200, fabric_mbps=50))
    assert r.capacity[("h1", "s1")] == 4 and r.capacity[("s1", "h1")] == 4 and r.capacity[("s1", "s2")] == 1
    assert Router(topospec.torus((4, 4), 50, 50)).capacity[("h1", "s1")] == 1
    assert Router(star3()).capacity[("h1", "s1")] == 1  # no fabric: host links are the unit


def test_link_conflicts_lists_each_overused_step_and_direction():
    p01, p02, p21 = ("h1", "s1", "h2"), ("h1", "s1", "h3"), ("h3", "s1", "h2")
    steps = [
        [Transfer(0, 1, 0, 3, "copy", p01), Transfer(0, 2, 1, 3, "copy", p02)],  # h1->s1 twice
        [Transfer(0, 1, 0, 3, "copy", p01), Transfer(2, 1, 1, 3, "copy", p21)],  # s1->h2 twice
        [Transfer(0, 1, 0, 3, "copy", p01), Transfer(1, 0, 1, 3, "copy", p01[::-1])],
    ]  # both directions: fine
    sched = Schedule("hand", ("h1", "h2", "h3"), steps)
    assert link_conflicts(sched, star3()) == [(0, ("h1", "s1"), 2, 1), (1, ("s1", "h2"), 2, 1)]


def test_link_conflicts_rejects_paths_that_are_not_routes():
    ls = topospec.leaf_spine(2, 2, 2, 50, 50)
    bad = Schedule("hand", ("h1", "h2"), [[Transfer(0, 1, 0, 2, "copy", ("h1", "s3", "s1", "s3", "h2"))]])
    with pytest.raises(
        PlanError, match="hand step 0: transfer 0->1 chunk 0/2: path h1-s3-s1-s3-h2 is not an equal-cost route"
    ):
        link_conflicts(bad, ls)
    wrong_end = Schedule("hand", ("h1", "h2"), [[Transfer(0, 1, 0, 2, "copy", ("h1", "s3", "s1", "s4", "h3"))]])
    with pytest.raises(PlanError, match="does not join h1 and h2"):
        link_conflicts(wrong_end, ls)


def test_execute_reads_senders_as_the_step_began():
    p = ("h1", "s1", "h2")
    # step 0: 0 -> 1 adds chunk 0 while 1 -> 0 overwrites chunk 0 of rank 0 with rank 1's old value
    sched = Schedule("hand", ("h1", "h2"), [[Transfer(0, 1, 0, 2, "reduce", p), Transfer(1, 0, 0, 2, "copy", p[::-1])]])
    out = execute(sched, [np.array([1.0, 2.0, 3.0, 4.0]), np.array([10.0, 20.0, 30.0, 40.0])])
    assert out[0].tolist() == [10.0, 20.0, 3.0, 4.0]
    assert out[1].tolist() == [11.0, 22.0, 30.0, 40.0]
    twice = Schedule(
        "hand",
        ("h1", "h2", "h3"),
        [[Transfer(0, 2, 0, 2, "copy", ("h1", "s1", "h3")), Transfer(1, 2, 0, 2, "copy", ("h2", "s1", "h3"))]],
    )
    with pytest.raises(PlanError, match="two copies into rank 2 chunk 0"):
        execute(twice, [np.zeros(4)] * 3)


def test_alpha_beta_cost_with_and_without_contention():
    spec = topospec.star(3, 50)
    p01, p02 = ("h1", "s1", "h2"), ("h1", "s1", "h3")
    sched = Schedule(
        "hand",
        ("h1", "h2", "h3"),
        [[Transfer(0, 1, 0, 4, "copy", p01), Transfer(0, 2, 1, 4, "copy", p02)], [Transfer(0, 1, 0, 2, "copy", p01)]],
    )
    # ideal: (1 + 100/4 * 2) + (1 + 100/2 * 2); contention: step 0 puts 2 x 25 bytes on h1->s1
    assert alpha_beta_cost(sched, 100, alpha=1, beta=2) == pytest.approx(51 + 101)
    assert alpha_beta_cost(sched, 100, alpha=1, beta=2, spec=spec) == pytest.approx(101 + 101)


def test_parse_topology_names_and_rates():
    t = parse_topology("torus:4x4")
    assert t.dims == (4, 4) and {h.rate_mbps for h in t.hosts.values()} == {200.0}
    assert {h.rate_mbps for h in parse_topology("torus:4x4", host_mbps=50).hosts.values()} == {50.0}
    ls = parse_topology("leaf_spine:2x2x4")
    assert [h.switch for h in ls.by_role("worker")] == ["s3", "s4"] * 4  # interleaved, as experiments place them
    assert len(parse_topology("star:8").by_role("worker")) == 8
    for text, msg in [
        ("ring:4", "unknown kind 'ring'"),
        ("torus:4", "torus needs 2 number"),
        ("star:1", "has 1 host"),
        ("leaf_spine:2x2", "leaf_spine needs 3"),
    ]:
        with pytest.raises(PlanError, match=msg):
            parse_topology(text)


def test_spray_shares_split_equally_at_every_switch():
    r = Router(topospec.leaf_spine(2, 2, 2, 50, 50))
    assert r.spray_shares("h1", "h3") == {
        ("h1", "s3"): 1.0,
        ("s3", "s1"): 0.5,
        ("s3", "s2"): 0.5,
        ("s1", "s4"): 0.5,
        ("s2", "s4"): 0.5,
        ("s4", "h3"): 1.0,
    }
    assert r.spray_shares("h1", "h2") == {("h1", "s3"): 1.0, ("s3", "h2"): 1.0}


def test_spray_reading_of_a_schedule_ignores_the_named_member():
    ls = topospec.leaf_spine(2, 2, 2, 50, 50)
    up1 = ("h1", "s3", "s1", "s4", "h3")
    # two flows out of leaf s3, both named over spine s1: pinned, s3->s1 carries 2; sprayed, 1 each
    steps = [[Transfer(0, 2, 0, 2, "copy", up1), Transfer(1, 3, 0, 2, "copy", ("h2", "s3", "s1", "s4", "h4"))]]
    sched = Schedule("hand", ("h1", "h2", "h3", "h4"), steps)
    assert [(s, ln, n) for s, ln, n, _ in link_conflicts(sched, ls)] == [(0, ("s1", "s4"), 2), (0, ("s3", "s1"), 2)]
    assert link_conflicts(sched, ls, spray=True) == []
