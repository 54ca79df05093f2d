"""TransportAllToAll over real loopback sockets of the bounded-loss transport (no process group:
every rank's endpoint lives in this process, peers are wired by hand)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from dlcp.comm.alltoall import TransportAllToAll
from dlcp.transport.api import Peer, TransportConfig, TransportError
from dlcp.transport.udp_driver import UdpTransport
from dlcp.wire.tagging import TaggingConfig, tag_message


def make_group(world, timeout_s=20.0, **cfg):
    endpoints = [
        UdpTransport(TransportConfig(rank=r, data_port=0, control_port=0, inject_seed=r, **cfg), [])
        for r in range(world)
    ]
    for t in endpoints:
        for u in endpoints:
            if u is not t:
                t.add_peer(Peer(u.cfg.rank, "127.0.0.1", u.data_port, u.control_port))
    return [TransportAllToAll(t, world, timeout_s=timeout_s) for t in endpoints]


def tags_of(values):
    return tag_message(values, [0], [0], 1, TaggingConfig(policy="dlcp"))


def exchange_all(group, iteration, msg_id, values):
    results = [None] * len(group)

    def run(r):
        results[r] = group[r].exchange(iteration, msg_id, values[r], tags_of(values[r]))

    threads = [threading.Thread(target=run, args=(r,)) for r in range(len(group))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


@pytest.fixture
def closing():
    groups = []
    yield groups.append
    for g in groups:
        for t in g:
            t.close()


def test_lossless_sum_is_identical_on_every_rank(closing):
    group = make_group(3)
    closing(group)
    rng = np.random.default_rng(0)
    for it in range(3):  # several messages, sizes not a multiple of 350
        values = [rng.standard_normal(1234).astype(np.float32) for _ in group]
        for agg in exchange_all(group, it, 5, values):
            # summed in rank order on every rank: identical bits everywhere
            np.testing.assert_array_equal(agg.total, np.float32(0) + values[0] + values[1] + values[2])
            assert (agg.count == 3).all() and agg.world == 3 and agg.msg_id == 5
    for t in group:
        s = t.stats
        assert (s.exchanges, s.sent_pkts, s.lost_pkts, s.retx_pkts, s.forced) == (3, 3 * 4 * 2, 0, 0, 0)
        # one sender and one receiver record per peer and message
        assert len(t.message_rows) == 3 * 2 * 2 and not t.endpoint.message_rows


def test_injected_loss_is_retransmitted_down_to_the_budget(closing):
    """5 % of data packets skipped at the sender, budget 1 %: the receivers ask for what exceeds
    the budget and every protected packet; nothing is forced."""
    n_pkts = 200  # floor(1 % of 200) = 2 packets may stay lost per message
    group = make_group(2, inject_loss=0.05, loss_budget=0.01, iter_budget=0.02)
    closing(group)
    rng = np.random.default_rng(1)
    values = [rng.standard_normal(350 * n_pkts - 100).astype(np.float32) for _ in group]
    lost_per_msg = []
    for it in range(4):
        for r, agg in enumerate(exchange_all(group, it, 0, values)):
            peer = values[1 - r]
            lost = agg.count == 1
            lost_pkts = lost[::350]
            lost_per_msg.append(int(lost_pkts.sum()))
            assert not lost_pkts[tags_of(peer).drop_prec == 0].any(), "a protected packet stayed lost"
            np.testing.assert_array_equal(agg.total[~lost], (np.float32(0) + values[0] + values[1])[~lost])
            np.testing.assert_array_equal(agg.total[lost], values[r][lost])  # own contribution only
    assert max(lost_per_msg) <= 2
    for t in group:
        s = t.stats
        assert s.retx_pkts > 0 and s.forced == 0 and s.protected_lost == 0, s
        assert s.lost_pkts == sum(lost_per_msg[t.rank :: 2])
        assert t.endpoint.stats()["injected_drops"] > s.lost_pkts


def test_a_silent_peer_is_an_error_not_a_hang(closing):
    group = make_group(2, timeout_s=0.5)
    closing(group)
    values = np.ones(500, np.float32)
    with pytest.raises(TransportError, match=r"no message \(peer 1, iter 0, p2p, msg 0\) after 0.5 s"):
        group[0].exchange(0, 0, values, tags_of(values))


def test_bad_set_up_is_a_clear_error(closing):
    lonely = UdpTransport(TransportConfig(rank=0, data_port=0, control_port=0), [])
    try:
        with pytest.raises(ValueError, match=r"no peer for ranks \[1, 2\]"):
            TransportAllToAll(lonely, 3)
        with pytest.raises(ValueError, match="rank 0 outside"):
            TransportAllToAll(lonely, 0)
    finally:
        lonely.close()
    group = make_group(2)
    closing(group)
    values = np.ones(10, np.float32)
    with pytest.raises(ValueError, match="DDP buckets: slot 65536 outside 0..65535"):
        group[0].exchange(0, 65536, values, tags_of(values))
