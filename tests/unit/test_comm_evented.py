"""The event-driven comm layer the ns-3 hosts run (dlcp/comm/evented.py: EventCommunicator over
EventSteppedCollective, rank 0's order as pushed messages), driven here by the real transport core
on the virtual-time network (dlcp/transport/virtual.py): no threads, every completion an event.
Every scheduler over ring, MultiTree and DS-Sync gives the exact sums (values from
test_comm_layer.py, exact in fp32 whatever the order), every rank runs the same operations in
the same order even when the ranks' gradients become ready at different times (in different
orders, for the schedulers that decide their order at run time), and the wire
traffic is the threaded SteppedCollective's (same messages, steps, counts)."""

from __future__ import annotations

import numpy as np
import pytest
from test_comm_layer import BACKWARD_MS, LAYOUTS, N_LAYERS, VPP, check_sums, grad, setup

from dlcp.comm.evented import EventCommunicator
from dlcp.comm.plans.topology_arg import parse_topology
from dlcp.comm.schedulers import SCHEDULERS
from dlcp.comm.settings import CommConfig, CommSetup
from dlcp.transport.api import TransportConfig
from dlcp.transport.virtual import VirtualNetwork
from dlcp.workloads.contract import GradMessage


def run_events(
    world: int,
    p: CommSetup,
    iterations: int,
    spec=None,
    sizes_only=False,
    skew_s=1e-3,
    reverse_odd=False,
    transport: dict | None = None,
):
    """Every rank's EventCommunicator on one virtual network: submits in backward order (rank r's
    message k at time k (1 + r) `skew_s`; reversed on odd ranks with `reverse_odd`, which only a
    scheduler that decides its order at run time survives), the next iteration once a rank
    collected the last. `transport`: more TransportConfig settings of every rank. Returns
    ({rank: {it: aggregates}}, {rank: [ops as started]}, the hosts)."""
    net = VirtualNetwork(seed=1)
    hosts = [net.add_host(TransportConfig(rank=r, values_per_pkt=VPP, **(transport or {}))) for r in range(world)]
    out = {r: {} for r in range(world)}
    started = {r: [] for r in range(world)}
    done: list[tuple[int, int]] = []
    comms = []
    for r, h in enumerate(hosts):
        e = EventCommunicator(
            h.send,
            VPP,
            CommConfig(rank=r, world=world, timeout_s=20),
            p,
            LAYOUTS,
            N_LAYERS,
            clock=lambda: net.now,
            on_done=lambda it, r=r: done.append((r, it)),
            sizes_only=sizes_only,
            spec=spec,
            backward_ms=BACKWARD_MS,
        )
        e.on_start = lambda rank, it, slot, prim: started[rank].append((it, slot, prim))
        comms.append(e)

    def begin(r, it):
        comms[r].begin(it)
        order = sorted(LAYOUTS, key=lambda lay: lay.msg_id)
        if reverse_odd and r % 2:
            order = order[::-1]
        for k, lay in enumerate(order):
            values = None if sizes_only else grad(r, lay, it)
            net._at(
                net.now + k * (1 + r) * skew_s, submit, r, it, GradMessage(lay, values, N_LAYERS), k == len(order) - 1
            )

    def submit(r, it, msg, last):
        comms[r].submit(it, msg)
        if last:
            comms[r].backward_done(it)

    def dispatch() -> bool:
        """Hand the communicators what the hosts completed (the virtual hosts keep completions in dicts);
        True once every rank collected every iteration."""
        for r, h in enumerate(hosts):
            while h.sent:
                comms[r].sent(*h.sent.popitem())
            while h.received:
                comms[r].received(*h.received.popitem())
        while done:
            r, it = done.pop(0)
            out[r][it] = (comms[r].short_values(it), comms[r].collect(it)) if sizes_only else comms[r].collect(it)
            if it + 1 < iterations:
                begin(r, it + 1)
        return all(len(out[r]) == iterations for r in range(world))

    for r in range(world):
        begin(r, 0)
    while True:  # a dispatch after the last event may start more
        net.run(until=dispatch, max_time=60)
        if dispatch() or not net._events:
            break
    assert dispatch(), {r: sorted(out[r]) for r in out}
    assert all(len(started[r]) == iterations * comms[r].sched.ops_per_iteration() for r in started)
    return out, started, hosts


@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
def test_every_scheduler_over_the_ring_sums_exactly_in_one_order(scheduler):
    timing = SCHEDULERS[scheduler].cls.timing_dependent_order
    out, started, hosts = run_events(4, setup(scheduler), 2, skew_s=2e-3, reverse_odd=timing)
    check_sums(out)
    assert all(started[r] == started[0] for r in started)
    if timing:  # rank 0 announced every operation to 3 followers
        p2p = [row for row in hosts[0].rows if row["phase"] == "p2p" and row["side"] == "sender"]
        assert len(p2p) == 3 * len(started[0])


@pytest.mark.parametrize("scheduler", ["wfbp", "dear", "usbyte"])
def test_multitree_on_a_torus_sums_exactly(scheduler):
    out, started, _ = run_events(
        9, setup(scheduler, collective="multitree", multitree={"kary": 3}), 1, spec=parse_topology("torus:3x3")
    )
    check_sums(out)
    assert all(started[r] == started[0] for r in started)
    if scheduler == "dear":
        assert {prim for _, _, prim in started[0]} == {"reduce_scatter", "all_gather"}


@pytest.mark.parametrize("scheduler", ["wfbp", "dear"])
@pytest.mark.parametrize("transport", [{}, {"incast": 1}, {"incast_adaptive": True}], ids=["all", "one", "adaptive"])
def test_transpose_allreduce_sums_exactly_with_and_without_an_incast_bound(scheduler, transport):
    out, started, hosts = run_events(5, setup(scheduler, collective="tar"), 2, transport=transport)
    check_sums(out)
    assert all(started[r] == started[0] for r in started)
    steps = {row["step"] for h in hosts for row in h.rows if row["phase"] in ("reduce_scatter", "all_gather")}
    assert steps == {0, 1}  # one step per phase
    if transport.get("incast"):
        assert all(h.stats()["incast_k"] == 1 for h in hosts)


@pytest.mark.parametrize("scheduler", ["wfbp", "dear"])
def test_ring_in_locality_order_sums_exactly(scheduler):
    # 8 workers interleaved over 2 leaves: the ring goes 0 2 4 6 1 3 5 7, crossing the spines twice
    spec = parse_topology("leaf_spine:2x2x4")
    out, started, hosts = run_events(8, setup(scheduler, ring={"order": "locality"}), 1, spec=spec)
    check_sums(out)
    assert all(started[r] == started[0] for r in started)
    peers = {row["peer"] for row in hosts[0].rows if row["side"] == "sender"}
    assert peers == {2}  # rank 0 sends to its neighbour on its own leaf only


def test_dssync_groups_sum_in_their_group():
    p = CommSetup(collective="dssync", dssync={"group": 2, "average": "gradients"})
    out, _, hosts = run_events(4, p, 2)
    plan = EventCommunicator(
        hosts[0].send, VPP, CommConfig(rank=0, world=4), p, LAYOUTS, N_LAYERS, clock=lambda: 0.0
    ).plan

    def groups_of(it, r):
        return next(g for g in plan.pattern.groups(it) if r in g)

    check_sums(out, groups_of)


def test_lockstep_off_and_sizes_only():
    check_sums(run_events(3, setup("wfbp", lockstep=False), 1)[0])
    out, _, hosts = run_events(3, setup("bytescheduler"), 1, sizes_only=True)
    assert all(out[r][0] == (0, {lay.msg_id: None for lay in LAYOUTS}) for r in out)
    _, _, with_values = run_events(3, setup("bytescheduler"), 1)
    for r in range(3):  # sizes only sends the same messages, packets and priorities as values do
        assert sorted(map(wire_key, hosts[r].rows)) == sorted(map(wire_key, with_values[r].rows))


def wire_key(row):
    return (
        row["side"],
        row["peer"],
        row["phase"],
        row["msg_id"],
        row["step"],
        row["pkts"],
        row["prio"],
        row["layer_first"],
        row["layer_last"],
    )


def test_same_wire_traffic_as_the_threaded_collective():
    """Per rank, the messages the event-driven ring sends (peer, phase, msg_id, step, packets,
    layers) are those the threaded TransportCommunicator sends over the UDP transport."""
    from test_comm_layer import all_reduce_rounds, comms_for

    from dlcp.transport.api import Peer
    from dlcp.transport.udp_driver import UdpTransport

    _, _, hosts = run_events(3, setup("mgwfbp"), 1)
    ts = [UdpTransport(TransportConfig(rank=r, data_port=0, control_port=0, values_per_pkt=VPP), []) for r in range(3)]
    try:
        for t in ts:
            for u in ts:
                if u is not t:
                    t.add_peer(Peer(u.cfg.rank, "127.0.0.1", u.data_port, u.control_port))
        all_reduce_rounds(comms_for(ts, setup("mgwfbp")), 1)
        for r in range(3):
            threaded = sorted(map(wire_key, ts[r].message_rows))
            evented = sorted(map(wire_key, hosts[r].rows))
            assert evented == threaded and evented
    finally:
        for t in ts:
            t.close()


def _dispatch(hosts, handlers) -> None:
    """Hand every host's completed sends and receives to its handler (sent, received)."""
    for h in hosts:
        sent, received = handlers[h.rank]
        while h.sent:
            sent(*h.sent.popitem())
        while h.received:
            received(*h.received.popitem())


def test_event_ps_sums_every_push_and_scatters_the_parameters():
    """EventPSClient and EventPSServer (the PS of the ns-3 hosts) on the virtual network: the PS's
    aggregates are the exact sums of the workers' pushes with full counts, each worker's pulled
    chunks are the parameters the PS scattered, iteration after iteration."""
    from dlcp.comm.evented import EventPSClient, EventPSServer
    from dlcp.wire.control_frames import PS_RANK

    world, iterations = 3, 2
    net = VirtualNetwork(seed=1)
    workers = [net.add_host(TransportConfig(rank=r, values_per_pkt=VPP)) for r in range(world)]
    ps_host = net.add_host(TransportConfig(rank=PS_RANK, values_per_pkt=VPP))
    events = []
    clients = [
        EventPSClient(
            h.send,
            VPP,
            CommConfig(rank=r, world=world, timeout_s=20),
            LAYOUTS,
            N_LAYERS,
            on_done=lambda it, r=r: events.append(("pulled", r, it)),
        )
        for r, h in enumerate(workers)
    ]
    server = EventPSServer(
        ps_host.send,
        VPP,
        CommConfig(rank=PS_RANK, world=world, timeout_s=20),
        LAYOUTS,
        N_LAYERS,
        on_gathered=lambda it: events.append(("gathered", None, it)),
        on_scattered=lambda it: events.append(("scattered", None, it)),
    )
    handlers = {r: (c.sent, c.received) for r, c in enumerate(clients)}
    handlers[PS_RANK] = (server.sent, server.received)
    params = {it: {lay.msg_id: grad(5, lay, it) * 0.5 for lay in LAYOUTS} for it in range(iterations)}
    pulled, scattered = {}, []

    def push(r, it):
        clients[r].begin(it)
        for lay in LAYOUTS:
            clients[r].push(it, GradMessage(lay, grad(r, lay, it), N_LAYERS))

    def step() -> bool:
        _dispatch(workers + [ps_host], handlers)
        while events:
            what, r, it = events.pop(0)
            if what == "gathered":
                aggs = server.gathered(it)
                for lay in LAYOUTS:
                    expect = sum(grad(q, lay, it) for q in range(world))
                    assert np.array_equal(aggs[lay.msg_id].total, expect) and (aggs[lay.msg_id].count == world).all()
                server.scatter(it, params[it])
            elif what == "scattered":
                scattered.append(it)
            else:
                pulled[(r, it)] = clients[r].collect(it)
                if it + 1 < iterations:
                    push(r, it + 1)
        return len(scattered) == iterations and len(pulled) == world * iterations

    for r in range(world):
        push(r, 0)
    net.run(until=step, max_time=60)
    assert step(), (scattered, sorted(pulled))
    for (_r, it), chunks in pulled.items():
        assert sorted(chunks) == sorted(params[it])
        assert all(np.array_equal(c.values, params[it][m]) and not c.lost.any() for m, c in chunks.items())


def test_event_resync_brings_rank_0_s_parameters_to_every_rank():
    world = 3
    net = VirtualNetwork(seed=1)
    hosts = [net.add_host(TransportConfig(rank=r, values_per_pkt=VPP)) for r in range(world)]
    p = CommSetup()
    engines = [
        EventCommunicator(
            h.send, VPP, CommConfig(rank=r, world=world, timeout_s=20), p, LAYOUTS, N_LAYERS, clock=lambda: 0.0
        )
        for r, h in enumerate(hosts)
    ]
    params = {r: {lay.msg_id: grad(r, lay, 9) for lay in LAYOUTS} for r in range(world)}
    got = {}
    for r in range(world):
        engines[r].resync(4, params[r], lambda ref, r=r: got.__setitem__(r, ref))
    handlers = {r: (e.sent, e.received) for r, e in enumerate(engines)}
    net.run(until=lambda: _dispatch(hosts, handlers) or len(got) == world, max_time=60)
    assert got[0] is params[0]  # rank 0: once its sends are done, its own
    for r in (1, 2):
        assert sorted(got[r]) == sorted(params[0])
        assert all(np.array_equal(got[r][m], params[0][m]) for m in params[0])
