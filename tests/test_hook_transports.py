"""UdpAllToAll over real loopback UDP sockets (no process group needed: peers are given)."""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest

from dlcp.hook_transports import UdpAllToAll
from dlcp.tagging import TaggingConfig, tag_message


def make_transports(world, **kw):
    socks = []
    for _ in range(world):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    peers = [s.getsockname() for s in socks]
    return [UdpAllToAll(r, peers, socks[r], **kw) for r in range(world)]


def exchange_all(transports, iteration, msg_id, values):
    results = [None] * len(transports)

    def run(r):
        tags = tag_message(values[r], [0], [0], 1, TaggingConfig("dlcp"))
        results[r] = transports[r].exchange(iteration, msg_id, values[r], tags)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(len(transports))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


@pytest.fixture
def three():
    ts = make_transports(3, timeout_s=10)
    yield ts
    for t in ts:
        t.close()


def test_lossless_sum_and_counts(three):
    rng = np.random.default_rng(0)
    for it in range(3):  # several messages, sizes not a multiple of 350
        values = [rng.standard_normal(1234).astype(np.float32) for _ in three]
        for agg in exchange_all(three, it, 5, values):
            # summed in rank order on every rank: identical bits everywhere
            np.testing.assert_array_equal(agg.total, values[0] + values[1] + values[2])
            assert (agg.count == 3).all() and agg.world == 3 and agg.msg_id == 5
    for t in three:
        assert t.stats.lost_pkts == 0 and t.stats.forced == 0 and t.stats.sent_pkts == 3 * 4 * 2


def test_emulated_drop_spares_protected_packets_and_is_reproducible():
    def run():
        ts = make_transports(2, timeout_s=10, drop_rate=0.5, drop_protected=True, seed=3)
        try:
            values = [np.random.default_rng(r).standard_normal(350 * 40).astype(np.float32) for r in range(2)]
            aggs = exchange_all(ts, 0, 1, values)
            return aggs, values, [t.stats.dropped_pkts for t in ts]
        finally:
            for t in ts:
                t.close()
    aggs, values, dropped = run()
    assert all(d > 0 for d in dropped)
    for r, agg in enumerate(aggs):
        peer = values[1 - r]
        tags = tag_message(peer, [0], [0], 1, TaggingConfig("dlcp"))
        lost_pkts = (agg.count == 1)[::350]
        assert lost_pkts.sum() == dropped[r] and not lost_pkts[tags.drop_prec == 0].any()
        kept = agg.count == 2
        np.testing.assert_allclose(agg.total[kept], (values[r] + peer)[kept], rtol=1e-6)
        np.testing.assert_array_equal(agg.total[~kept], values[r][~kept])  # own contribution only
    again = run()
    assert again[2] == dropped and all(np.array_equal(a.count, b.count) for a, b in zip(again[0], aggs))


def test_malformed_and_foreign_packets_are_counted_not_fatal(three):
    junk = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    addr = three[0].sock.getsockname()
    junk.sendto(b"\x00" * 10, addr)  # too short for a header
    junk.sendto(bytes([0x21]) + bytes(23), addr)  # version 2
    junk.close()
    values = [np.full(700, float(r), np.float32) for r in range(3)]
    aggs = exchange_all(three, 0, 0, values)
    assert (aggs[0].total == 3.0).all()
    assert three[0].stats.malformed_pkts == 2
    assert set(three[0].stats.malformed_by_field) == {"length", "ver"}


def test_a_silent_peer_forces_completion_with_what_arrived():
    ts = make_transports(2, timeout_s=0.3)
    try:
        values = np.ones(500, np.float32)
        agg = ts[0].exchange(0, 0, values, tag_message(values, [0], [0], 1))
        assert (agg.count == 1).all() and (agg.total == 1).all()
        assert ts[0].stats.forced == 1 and ts[0].stats.lost_pkts == 2
        assert ts[0].stats.forced_keys == [((0, 0), {1: 2})]
    finally:
        for t in ts:
            t.close()
