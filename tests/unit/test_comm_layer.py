"""The communication layer: every scheduler over every collective through the real transport on
127.0.0.1 gives every rank the exact sum; wire ids never collide within an iteration; the communicator's
order rules; DS-Sync groups; MultiTree on a 3x3 torus.

Values are powers of two (grad(r) = 2**r * m[v], m a power of two per packet), so any sum is exact
in fp32 whatever the order the collective adds in, and plain summation is the reference."""

from __future__ import annotations

import itertools
import threading
from collections import Counter

import numpy as np
import pytest

from dlcp.comm.assemble import build_scheduler, planning_profile, step_plan, wire_ids
from dlcp.comm.communicator import Communicator, forward_order
from dlcp.comm.costmodel import CostModel
from dlcp.comm.inmemory import InMemoryGroup, memory_communicators
from dlcp.comm.order import MemoryOrder
from dlcp.comm.plans.collective import COLLECTIVES
from dlcp.comm.plans.dssync import average_rounds
from dlcp.comm.plans.topology_arg import parse_topology
from dlcp.comm.schedulers import SCHEDULERS, make_scheduler
from dlcp.comm.settings import CommConfig, CommSetup
from dlcp.comm.transport_communicator import TransportCommunicator
from dlcp.comm.wire_ids import WireIdError, WireIds, phase_of, transfer_ids
from dlcp.settings import ConfigError
from dlcp.transport.api import Peer, TransportConfig
from dlcp.transport.udp_driver import UdpTransport
from dlcp.workloads.contract import GradMessage, MessageLayout

VPP = 20
LAYOUTS = [
    MessageLayout(0, 333, (0, 100), (3, 4)),
    MessageLayout(1, 1000, (0,), (2,)),
    MessageLayout(2, 401, (0, 1, 250), (0, 1, 2)),
    MessageLayout(3, 3, (0,), (4,)),
]
N_LAYERS = 5
BACKWARD_MS = 40.0
# options that make each scheduler do what defines it on these small messages
POLICIES = {
    "wfbp": {},
    "mgwfbp": {"alpha_s": 0.02, "beta_s_per_byte": 1e-6},
    "oasr": {"alpha_s": 0.02, "beta_s_per_byte": 1e-6},
    "bytescheduler": {"bytescheduler": {"partition_bytes": 800, "credit_bytes": 1600}},
    "usbyte": {"alpha_s": 0.002, "beta_s_per_byte": 1e-5, "usbyte": {"unit_elems": 150}},
    "dear": {"dear": {"threshold_bytes": 1700}},
}


def scale(n: int) -> np.ndarray:
    return np.repeat(2.0 ** ((np.arange(-(-n // VPP)) * 5) % 8 - 3), VPP)[:n].astype(np.float32)


def grad(rank: int, lay: MessageLayout, it: int = 0) -> np.ndarray:
    return (2.0 ** ((rank + it) % 7) * scale(lay.n_values)).astype(np.float32)


def setup(name: str, **more) -> CommSetup:
    return CommSetup(scheduler=name, **POLICIES[name], **more)


def units_of(name: str, world: int = 4):
    tensors = forward_order(LAYOUTS)
    p = setup(name)
    sched = build_scheduler(
        p,
        planning_profile(tensors, BACKWARD_MS),
        world,
        CostModel(p.alpha_s or 1e-3, p.beta_s_per_byte or 1e-8, workers=world),
    )
    return sched


def test_each_policy_makes_its_kind_of_units():
    sizes = [lay.n_values for lay in forward_order(LAYOUTS)]
    assert sizes == [401, 1000, 333, 3]
    assert units_of("wfbp").units() == [(s,) for s in units_of("wfbp").units() for s in s]
    assert len(units_of("wfbp").units()) == 4
    assert len(units_of("mgwfbp").units()) < 4  # merged
    assert len(units_of("oasr").units()) < 4
    bs = units_of("bytescheduler").units()
    assert len(bs) == 3 + 5 + 2 + 1 and all(len(u) == 1 for u in bs)  # partitions of 200 values
    assert len(units_of("dear").units()) == 3 and units_of("dear").ops_per_iteration() == 6
    us = units_of("usbyte")
    covered = Counter()
    for (seg,) in us.units():
        covered[seg.tensor] += seg.elements
    assert [covered[t] for t in range(4)] == sizes


# --- wire ids -------------------------------------------------------------------------------------


def test_wire_id_ranges_and_errors():
    ids = WireIds(slots=10, stride=3, announcements=20, messages=4, what="test plan")
    assert [ids.step(0, 2), ids.step(1, 0), ids.step(9, 2)] == [2, 3, 29]
    assert ids.announcement(19) == 19 and ids.resync(0) == 20 and ids.resync(3) == 23
    with pytest.raises(WireIdError, match="announcement 20 outside 0..19"):
        ids.announcement(20)
    with pytest.raises(WireIdError, match="step id 3 outside 0..2"):
        ids.step(0, 3)
    with pytest.raises(WireIdError, match="slot 10 outside 0..9"):
        ids.message(10)
    with pytest.raises(WireIdError, match=r"test plan needs 20000 operations x 4 step ids = 80000 ids"):
        WireIds(20000, 4, what="test plan")


@pytest.mark.parametrize(
    "collective,topo",
    [
        ("ring", None),
        ("multitree", "torus:4x4"),
        ("multitree", "mesh:3x3"),
        ("dssync", "leaf_spine:2x2x4"),
        ("tar", None),
        ("dtree", "torus:4x4"),
        ("ring2d", "torus:4x4"),
        ("ring2d", "leaf_spine:2x2x4"),
    ],
)
@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
def test_wire_ids_never_collide_within_an_iteration(collective, topo, scheduler):
    """Every message one iteration puts on the wire, (src, dst, phase, msg_id), is distinct."""
    spec = parse_topology(topo) if topo else None
    world = len(spec.hosts) if spec else 6
    avg = {"dssync": {"group": 4 if world % 4 == 0 else 2, "average": "gradients"}} if collective == "dssync" else {}
    p = CommSetup(scheduler=scheduler, collective=collective, **POLICIES[scheduler], **avg)
    plan = step_plan(p, world, spec)
    sched = build_scheduler(
        p, planning_profile(forward_order(LAYOUTS), BACKWARD_MS), world, CostModel(1e-3, 1e-8, workers=world)
    )
    ids = wire_ids(sched, plan, len(LAYOUTS))
    for iteration in range(plan.period):
        local, _ = transfer_ids(plan.schedule(iteration))
        seen = Counter()
        primitives = ("reduce_scatter", "all_gather") if scheduler == "dear" else ("allreduce",)
        for slot, _ in enumerate(sched.units()):
            for prim in primitives:
                sched_ = plan.schedule(iteration)
                phases = {
                    "reduce_scatter": ["reduce_scatter"],
                    "all_gather": ["all_gather"],
                    "allreduce": ["reduce_scatter", "all_gather"],
                }[prim]
                for ph in phases:
                    a, b = sched_.phases[ph]
                    for s in range(a, b):
                        for i, t in enumerate(sched_.steps[s]):
                            seen[(t.src, t.dst, phase_of(t.op), ids.step(slot, local[(s, i)]))] += 1
        p2p = [("p2p", ids.announcement(k)) for k in range(sched.ops_per_iteration())] + [
            ("p2p", ids.resync(m)) for m in range(len(LAYOUTS))
        ]
        assert max(seen.values()) == 1
        assert len(set(p2p)) == len(p2p)


# --- through the transport --------------------------------------------------------------------------


@pytest.fixture
def cluster():
    made = []

    def make(world, **cfg):
        ts = [
            UdpTransport(TransportConfig(rank=r, data_port=0, control_port=0, values_per_pkt=VPP, **cfg), [])
            for r in range(world)
        ]
        made.extend(ts)
        for t in ts:
            for u in ts:
                if u is not t:
                    t.add_peer(Peer(u.cfg.rank, "127.0.0.1", u.data_port, u.control_port))
        return ts

    yield make
    for t in made:
        t.close()


def run_threads(fns, timeout=120):
    errors = []

    def guard(fn):
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=guard, args=(f,)) for f in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads), "a rank hung"


def all_reduce_rounds(comms, iterations, layouts=LAYOUTS):
    out = {r: {} for r in range(len(comms))}

    def worker(r):
        def run():
            for it in range(iterations):
                comms[r].begin(it)
                for lay in sorted(layouts, key=lambda lay: lay.msg_id):  # backward order
                    comms[r].submit(it, GradMessage(lay, grad(r, lay, it), N_LAYERS))
                out[r][it] = comms[r].wait(it)

        return run

    try:
        run_threads([worker(r) for r in range(len(comms))])
    finally:
        for e in comms:
            e.close()
    return out


def check_sums(out, groups_of=None, layouts=LAYOUTS):
    world = len(out)
    for r in range(world):
        for it, aggs in out[r].items():
            group = groups_of(it, r) if groups_of else range(world)
            for lay in layouts:
                agg = aggs[lay.msg_id]
                expect = sum(grad(q, lay, it).astype(np.float64) for q in group)
                np.testing.assert_array_equal(agg.total, expect.astype(np.float32))
                assert (agg.count == len(group)).all() and agg.world == len(group)


def comms_for(ts, p: CommSetup, spec=None):
    world = len(ts)
    return [
        TransportCommunicator(
            t, CommConfig(rank=r, world=world, timeout_s=20), p, LAYOUTS, N_LAYERS, spec=spec, backward_ms=BACKWARD_MS
        )
        for r, t in enumerate(ts)
    ]


@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
def test_every_scheduler_over_the_ring_gives_the_exact_sum(cluster, scheduler):
    ts = cluster(4)
    comms = comms_for(ts, setup(scheduler))
    units = len(comms[0].units)
    out = all_reduce_rounds(comms, 2)
    check_sums(out)
    rows = [row for t in ts for row in t.message_rows]
    steps = [row for row in rows if row["phase"] in ("reduce_scatter", "all_gather") and row["side"] == "sender"]
    # records name the workload message each operation starts with
    firsts = {comms[0].tensors[u[0].tensor].msg_id for u in comms[0].units}
    assert {row["msg_id"] for row in steps} == firsts
    announcements = [row for row in rows if row["phase"] == "p2p"]
    if SCHEDULERS[scheduler].cls.timing_dependent_order:
        assert len(announcements) == 2 * 3 * 2 * units  # rank 0 -> 3 followers, sender + receiver rows
    else:
        assert not announcements
    assert all(row["lost_pkts"] == 0 and row["forced"] == 0 for row in rows)


@pytest.mark.parametrize("scheduler", ["wfbp", "dear", "bytescheduler"])
def test_multitree_on_a_3x3_torus_through_the_transport(cluster, scheduler):
    spec = parse_topology("torus:3x3")
    ts = cluster(9)
    p = setup(scheduler, collective="multitree", multitree={"kary": 3})
    comms = comms_for(ts, p, spec)
    T = comms[0].plan.schedule(0).steps_per_phase
    assert T < 8  # fewer steps per phase than the ring's P - 1
    out = all_reduce_rounds(comms, 1)
    check_sums(out)
    rows = [row for t in ts for row in t.message_rows if row["side"] == "sender" and row["phase"] != "p2p"]
    assert max(row["step"] for row in rows) == 2 * T - 1


def test_transpose_allreduce_through_the_transport(cluster):
    ts = cluster(4)
    comms = comms_for(ts, setup("wfbp", collective="tar"))
    check_sums(all_reduce_rounds(comms, 2))
    rows = [row for t in ts for row in t.message_rows if row["side"] == "sender" and row["phase"] != "p2p"]
    assert {row["step"] for row in rows} == {0, 1} and all(row["lost_pkts"] == 0 for row in rows)


@pytest.mark.parametrize("collective", ["dtree", "ring2d"])
@pytest.mark.parametrize("scheduler", ["wfbp", "dear"])
def test_tree_and_2d_ring_on_a_3x3_torus_through_the_transport(cluster, collective, scheduler):
    spec = parse_topology("torus:3x3")
    ts = cluster(9)
    comms = comms_for(ts, setup(scheduler, collective=collective), spec)
    out = all_reduce_rounds(comms, 1)
    check_sums(out)
    T = comms[0].plan.schedule(0).steps_per_phase
    rows = [row for t in ts for row in t.message_rows if row["side"] == "sender" and row["phase"] != "p2p"]
    assert max(row["step"] for row in rows) == 2 * T - 1


def test_dssync_groups_sum_in_their_group_and_shuffle(cluster):
    ts = cluster(8)
    p = CommSetup(collective="dssync", dssync={"group": 2})
    comms = comms_for(ts, p)
    plan = comms[0].plan.pattern
    assert plan.period == 3
    out = all_reduce_rounds(comms, 3)

    def groups_of(it, r):
        return next(g for g in plan.groups(it) if r in g)

    check_sums(out, groups_of)
    # three rounds of pairwise averages are the exact average over all 8 workers
    vals = [np.arange(8, dtype=np.float64) * (r + 1) for r in range(8)]
    np.testing.assert_allclose(average_rounds(vals, plan)[5], np.mean(vals, axis=0))


def test_dear_all_gathers_in_order_after_every_reduce_scatter(cluster):
    ts = cluster(3)
    comms = comms_for(ts, setup("dear"))
    position = dict(comms[0].index)  # workload msg_id -> forward position
    all_reduce_rounds(comms, 1)
    rows = sorted((row for row in ts[0].message_rows if row["side"] == "sender"), key=lambda r: r["start_us"])
    phases = [row["phase"] for row in rows]
    assert phases.index("all_gather") > max(i for i, ph in enumerate(phases) if ph == "reduce_scatter")
    ag_order = [position[row["msg_id"]] for row in rows if row["phase"] == "all_gather"]
    assert ag_order == sorted(ag_order) and ag_order[0] == 0  # group 0 first: the next forward needs it first


def test_lockstep_off_still_sums(cluster):
    ts = cluster(3)
    out = all_reduce_rounds(comms_for(ts, setup("wfbp", lockstep=False)), 1)
    check_sums(out)


def test_transport_loss_within_budget_keeps_counts_exact(cluster):
    ts = cluster(4, inject_loss=0.08, loss_budget=0.6, iter_budget=1.0)
    comms = comms_for(ts, setup("mgwfbp", collective="multitree"), parse_topology("mesh:2x2"))
    out = all_reduce_rounds(comms, 2)
    lossy = 0
    for r in out:
        for aggs in out[r].values():
            for lay in LAYOUTS:
                agg = aggs[lay.msg_id]
                k = np.rint(agg.total / (scale(lay.n_values) * 2.0**0)).astype(np.int64)
                # which ranks' 2**((q + it) % 7) arrived: popcount of the sum in units of m
                assert all(bin(x).count("1") == c for x, c in zip(k, agg.count))
                lossy += int((agg.count < 4).sum())
    assert lossy > 0


# --- in process -------------------------------------------------------------------------------------


@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
def test_every_scheduler_in_memory_gives_the_exact_sum(scheduler):
    comms, _ = memory_communicators(4, LAYOUTS, N_LAYERS, setup(scheduler), backward_ms=BACKWARD_MS)
    check_sums(all_reduce_rounds(comms, 2))


def test_followers_run_the_leaders_order_even_when_their_own_readiness_differs():
    """Rank 1 submits in a different order than rank 0 (its own credit loop would release other
    partitions first); it still runs rank 0's order and nobody deadlocks."""
    world = 2
    tensors = forward_order(LAYOUTS)
    prof = planning_profile(tensors, BACKWARD_MS)
    opts = POLICIES["bytescheduler"]["bytescheduler"]
    group, order = InMemoryGroup(world), MemoryOrder()
    comms = [
        Communicator(
            make_scheduler("bytescheduler", prof, None, world, **opts),
            group.collective(r),
            LAYOUTS,
            N_LAYERS,
            order=order,
            timeout_s=10,
        )
        for r in range(world)
    ]
    assert comms[0].leader and comms[1].follower
    out = {}

    def rank(r, order_of_submits):
        def run():
            for lay in order_of_submits:
                comms[r].submit(0, GradMessage(lay, grad(r, lay), N_LAYERS))
            out[r] = {0: comms[r].wait(0)}

        return run

    run_threads([rank(0, LAYOUTS), rank(1, LAYOUTS[::-1])], timeout=30)
    check_sums(out)


def test_engine_refuses_what_the_plan_does_not_know():
    comms, _ = memory_communicators(2, LAYOUTS, N_LAYERS)
    with pytest.raises(ValueError, match="message 9 of 3 values is not one of the planned messages"):
        comms[0].submit(0, GradMessage(MessageLayout(9, 3, (0,), (0,)), np.zeros(3, np.float32), N_LAYERS))
    comms[0].submit(0, GradMessage(LAYOUTS[3], grad(0, LAYOUTS[3]), N_LAYERS))
    with pytest.raises(ValueError, match="message 3 of iteration 0 submitted twice"):
        comms[0].submit(0, GradMessage(LAYOUTS[3], grad(0, LAYOUTS[3]), N_LAYERS))
    with pytest.raises(ValueError, match="decides its order at run time: the ranks need an order channel"):
        Communicator(
            make_scheduler("usbyte", planning_profile(forward_order(LAYOUTS)), CostModel(1e-3, 1e-8), 2),
            InMemoryGroup(2).collective(1),
            LAYOUTS,
            N_LAYERS,
        )


@pytest.mark.parametrize(
    "bad,msg",
    [
        ({"scheduler": "dear", "collective": "dssync"}, "comm.scheduler: 'dear' schedules gradient all-reduces"),
        (
            {"bytescheduler": {"partition_bytes": 100, "credit_bytes": 50}},
            "comm.bytescheduler.credit_bytes: 50 is below",
        ),
        ({"scheduler": "fifo"}, "comm.scheduler: 'fifo' is not one of bytescheduler, dear, mgwfbp, oasr, usbyte, wfbp"),
        ({"multitree": {"kary": 1}}, "comm.multitree.kary: 1 is below the minimum 2"),
    ],
)
def test_bad_comm_settings_are_one_line(bad, msg):
    with pytest.raises(ConfigError, match=msg):
        CommSetup(**bad)


def test_all_schedulers_and_collectives_compose():
    for s, c in itertools.product(SCHEDULERS, COLLECTIVES):
        extra = {"dssync": {"average": "gradients"}} if c == "dssync" else {}
        assert CommSetup(scheduler=s, collective=c, **extra).scheduler == s


def test_planning_profile_sums_a_workloads_per_layer_times_per_message():
    # message 0: layers 0 and 1 (4 + 6 values); message 1: the rest of layer 1 (2 values) and layer 2
    tensors = [MessageLayout(0, 10, (0, 4), (0, 1)), MessageLayout(1, 5, (0, 2), (1, 2))]
    fwd, bwd = (0.001, 0.008, 0.003), (0.002, 0.016, 0.006)
    prof = planning_profile(tensors, layer_times=(fwd, bwd))
    # layer 1 holds 8 values: 6 in message 0 (3/4 of its time), 2 in message 1 (1/4)
    assert prof.forward_s == pytest.approx((0.001 + 0.006, 0.002 + 0.003))
    assert prof.backward_s == pytest.approx((0.002 + 0.012, 0.004 + 0.006))
    assert sum(prof.backward_s) == pytest.approx(sum(bwd))  # every layer's time counted once
    assert prof.sizes == (10, 5)


def test_planning_profile_without_layer_times_spreads_backward_ms_equally():
    tensors = [MessageLayout(0, 10, (0,), (0,)), MessageLayout(1, 5, (0,), (1,))]
    assert planning_profile(tensors, backward_ms=8).backward_s == (0.004, 0.004)
