"""PS push/pull and ring all-reduce among several ranks on 127.0.0.1 (one transport per rank,
threads), with and without injected loss.

Gradients are powers of two: worker r sends 2**r * m[v] with m[v] a power of two that varies per
packet (so drop precedences vary). A sum over any subset of workers is exact in fp32, and
total[v] / m[v] in binary says which workers' contributions arrived: its popcount must equal
count[v]. That checks the counts with loss independently of the code that computes them.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from dlcp.comm.packets import sub_layers
from dlcp.comm.ps import PSClient, PSServer
from dlcp.comm.settings import CommConfig
from dlcp.comm.transport_communicator import RingAllReduce
from dlcp.transport.api import Peer, TransportConfig
from dlcp.transport.udp_driver import UdpTransport
from dlcp.wire.control_frames import PS_RANK
from dlcp.workloads.contract import GradMessage, MessageLayout

VPP = 20
LAYOUTS = [
    MessageLayout(0, 333, (0, 100), (3, 4)),
    MessageLayout(1, 1000, (0,), (2,)),
    MessageLayout(2, 401, (0, 1, 250), (0, 1, 2)),
    MessageLayout(3, 3, (0,), (4,)),
]
N_LAYERS = 5


def scale(n: int) -> np.ndarray:
    """m[v]: a power of two per packet (1/8 .. 16), so packets have different magnitudes."""
    return np.repeat(2.0 ** ((np.arange(-(-n // VPP)) * 5) % 8 - 3), VPP)[:n].astype(np.float32)


def grad(rank: int, lay: MessageLayout) -> np.ndarray:
    return (2.0**rank * scale(lay.n_values)).astype(np.float32)


def contributors(total: np.ndarray, lay: MessageLayout) -> np.ndarray:
    """Number of workers whose contribution is in each value (popcount of total / m)."""
    k = np.rint(total / scale(lay.n_values)).astype(np.int64)
    return np.array([bin(x).count("1") for x in k])


@pytest.fixture
def cluster():
    made = []

    def make(world, with_ps, per_rank=None):
        """Transports for ranks 0..world-1 (and the PS); per_rank(rank) -> extra config."""
        ranks = list(range(world)) + ([PS_RANK] if with_ps else [])
        ts = {
            r: UdpTransport(
                TransportConfig(
                    rank=r, data_port=0, control_port=0, values_per_pkt=VPP, **(per_rank(r) if per_rank else {})
                ),
                [],
            )
            for r in ranks
        }
        made.extend(ts.values())
        for r, t in ts.items():
            for q, u in ts.items():
                if q != r:
                    t.add_peer(Peer(q, "127.0.0.1", u.data_port, u.control_port))
        return ts

    yield make
    for t in made:
        t.close()


def run_threads(fns):
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
        t.join(60)
    assert not errors, errors


def ps_round(ts, world, iterations=2, comm=None):
    comm = comm or {}
    server = PSServer(ts[PS_RANK], CommConfig(rank=PS_RANK, world=world, timeout_s=20, **comm), LAYOUTS, N_LAYERS)
    clients = [
        PSClient(ts[r], CommConfig(rank=r, world=world, timeout_s=20, **comm), LAYOUTS, N_LAYERS) for r in range(world)
    ]
    gathered, pulled = {}, {r: {} for r in range(world)}
    params = {
        it: {lay.msg_id: np.arange(lay.n_values, dtype=np.float32) * (it + 1) for lay in LAYOUTS}
        for it in range(iterations)
    }

    def ps():
        for it in range(iterations):
            server.begin(it)
            gathered[it] = server.gather(it)
            server.scatter(it, params[it])

    def worker(r):
        def run():
            for it in range(iterations):
                clients[r].begin(it)
                for lay in LAYOUTS:
                    clients[r].push(it, GradMessage(lay, grad(r, lay), N_LAYERS))
                pulled[r][it] = clients[r].pull(it)

        return run

    run_threads([ps] + [worker(r) for r in range(world)])
    return gathered, pulled, params


def test_ps_exchange_exact_without_loss(cluster):
    world = 3
    ts = cluster(world, True)
    gathered, pulled, params = ps_round(ts, world)
    for it, aggs in gathered.items():
        for lay in LAYOUTS:
            agg = aggs[lay.msg_id]
            expect = np.zeros(lay.n_values, np.float32)
            for r in range(world):
                expect += grad(r, lay)
            np.testing.assert_array_equal(agg.total, expect)
            assert (agg.count == world).all() and agg.world == world
            for r in range(world):
                chunk = pulled[r][it][lay.msg_id]
                np.testing.assert_array_equal(chunk.values, params[it][lay.msg_id])
                assert not chunk.lost.any()
    rows = ts[PS_RANK].message_rows
    assert {row["phase"] for row in rows} == {"push", "pull"}
    assert all(row["peer"] != -1 and row["rank"] == -1 for row in rows)
    assert all(row["peer"] == -1 for row in ts[0].message_rows)


def test_ps_exchange_with_loss_counts_and_budgets(cluster):
    world = 4
    # 5 % of data packets lost at every sender, budget 1 %
    ts = cluster(world, True, lambda r: {"inject_loss": 0.05, "inject_seed": r})
    gathered, pulled, params = ps_round(ts, world, iterations=3)
    for aggs in gathered.values():
        for lay in LAYOUTS:
            agg = aggs[lay.msg_id]
            np.testing.assert_array_equal(contributors(agg.total, lay), agg.count)
    rows = [row for t in ts.values() for row in t.message_rows]
    assert sum(t.stats()["injected_drops"] for t in ts.values()) > 0
    for row in rows:
        assert row["protected_lost"] == 0 or row["forced"] == 1
        assert row["lost_pkts"] <= int(0.01 * row["pkts"]) or row["forced"] == 1
    assert all(row["forced"] == 0 for row in rows)
    assert any(row["retx_pkts"] > 0 for row in rows)


def ring(ts, world, iterations=2, comm=None, values=grad):
    comm = comm or {}
    rings = [
        RingAllReduce(ts[r], CommConfig(rank=r, world=world, timeout_s=20, **comm), LAYOUTS, N_LAYERS)
        for r in range(world)
    ]
    out = {r: {} for r in range(world)}

    def worker(r):
        def run():
            for it in range(iterations):
                rings[r].begin(it)
                for lay in LAYOUTS:
                    rings[r].submit(it, GradMessage(lay, values(r, lay), N_LAYERS))
                out[r][it] = rings[r].wait(it)

        return run

    try:
        run_threads([worker(r) for r in range(world)])
    finally:
        for rg in rings:
            rg.close()
    return out


@pytest.mark.parametrize("world", [2, 4])
def test_ring_allreduce_exact_without_loss(cluster, world):
    ts = cluster(world, False)
    out = ring(ts, world)
    for lay in LAYOUTS:
        bounds = np.linspace(0, lay.n_values, world + 1).astype(int)
        expect = np.zeros(lay.n_values, np.float32)
        for c in range(world):  # the order the ring adds: owner c first, then c+1, ...
            lo, hi = bounds[c], bounds[c + 1]
            acc = grad(c, lay)[lo:hi].copy()
            for k in range(1, world):
                acc = acc + grad((c + k) % world, lay)[lo:hi]
            expect[lo:hi] = acc
        for r in range(world):
            for it in out[r]:
                agg = out[r][it][lay.msg_id]
                np.testing.assert_array_equal(agg.total, expect)
                assert (agg.count == world).all()
    steps = {(row["phase"], row["step"]) for row in ts[0].message_rows if row["side"] == "sender"}
    assert steps == {("reduce_scatter", s) for s in range(world - 1)} | {
        ("all_gather", s) for s in range(world - 1, 2 * world - 2)
    }


@pytest.mark.parametrize("ring_budget", ["protect_rs", "per_step"])
def test_ring_allreduce_with_loss_counts_exact(cluster, ring_budget):
    world = 4
    # chunks of these messages have at most 13 packets: budgets must be large for any loss to be
    # accepted (per step: 0.6 / 6 = 10 %, i.e. 1 packet of 13); no iteration cap
    cfg = {"inject_loss": 0.08, "loss_budget": 0.6, "iter_budget": 1.0}
    ts = cluster(world, False, lambda r: dict(cfg, inject_seed=100 + r))
    out = ring(ts, world, iterations=3, comm={"ring_budget": ring_budget})
    lossy = 0
    for r in range(world):
        for aggs in out[r].values():
            for lay in LAYOUTS:
                agg = aggs[lay.msg_id]
                np.testing.assert_array_equal(contributors(agg.total, lay), agg.count)
                lossy += int((agg.count < world).sum())
    rows = [row for t in ts.values() for row in t.message_rows]
    rs = [row for row in rows if row["phase"] == "reduce_scatter"]
    if ring_budget == "protect_rs":
        assert all(row["lost_pkts"] == 0 for row in rs)
    else:  # partial sums were lost and the counts above still matched
        assert any(row["lost_pkts"] > 0 for row in rs if row["side"] == "receiver")
    assert lossy > 0  # all-gather (and per-step reduce-scatter) losses happened and were counted
    assert all(row["protected_lost"] == 0 for row in rows)


def test_ring_resync_reports_drift(cluster):
    world = 3
    ts = cluster(world, False)
    rings = [
        RingAllReduce(ts[r], CommConfig(rank=r, world=world, timeout_s=20), LAYOUTS, N_LAYERS) for r in range(world)
    ]
    params = {
        r: {lay.msg_id: np.full(lay.n_values, 1.0 + (r == 2) * 0.5, np.float32) for lay in LAYOUTS}
        for r in range(world)
    }
    got = {}

    def run(r):
        return lambda: got.__setitem__(r, rings[r].resync(5, params[r]))

    try:
        run_threads([run(r) for r in range(world)])
    finally:
        for rg in rings:
            rg.close()
    n = sum(lay.n_values for lay in LAYOUTS)
    assert got[0][1]["drift_l2"] == got[1][1]["drift_l2"] == 0.0
    assert got[2][1]["drift_max"] == 0.5 and got[2][1]["drift_l2"] == pytest.approx(0.5 * np.sqrt(n))
    for lay in LAYOUTS:
        np.testing.assert_array_equal(got[2][0][lay.msg_id], params[0][lay.msg_id])


def test_sub_layers():
    lay = MessageLayout(0, 100, (0, 30, 60), (4, 5, 6))
    assert sub_layers(lay, 0, 100) == ([0, 30, 60], [4, 5, 6])
    assert sub_layers(lay, 40, 70) == ([0, 20], [5, 6])
    assert sub_layers(lay, 60, 61) == ([0], [6])
