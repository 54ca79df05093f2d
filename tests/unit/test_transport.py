"""Bounded-loss transport over real UDP/TCP sockets on 127.0.0.1, with a proxy that drops,
duplicates and reorders data packets on purpose."""

from __future__ import annotations

import socket
import struct
import time

import numpy as np
import pytest
from lossy_proxy import LossyProxy

from dlcp.transport.api import Peer, SendInfo, TransportConfig, TransportError
from dlcp.transport.core.sender import MAX_FORCED_ROUNDS
from dlcp.transport.udp_driver import UdpTransport
from dlcp.wire import control_frames as C
from dlcp.wire import header as H
from dlcp.wire.chunking import MessageId, packetize
from dlcp.wire.tagging import Tags, tag_message

VPP = 50  # values per packet: 1000-packet messages stay small and fast


@pytest.fixture
def make_pair():
    made = []

    def make(proxy=None, send_cfg=None, recv_cfg=None):
        a = UdpTransport(
            TransportConfig(rank=0, data_port=0, control_port=0, values_per_pkt=VPP, **(send_cfg or {})), []
        )
        b = UdpTransport(
            TransportConfig(rank=1, data_port=0, control_port=0, values_per_pkt=VPP, **(recv_cfg or {})), []
        )
        made.extend([a, b])
        px = None
        if proxy is not None:
            px = LossyProxy(("127.0.0.1", b.data_port), ("127.0.0.1", b.control_port), **proxy)
            made.append(px)
        a.add_peer(Peer(1, "127.0.0.1", px.port if px else b.data_port, px.control_port if px else b.control_port))
        b.add_peer(Peer(0, "127.0.0.1", a.data_port, a.control_port))
        return a, b, px

    yield make
    for m in made:
        m.close()


def message(n_pkts=1000, seed=0, it=0, msg_id=7, n_layers=1, tags: Tags | None = None):
    g = np.random.default_rng(seed).standard_normal(n_pkts * VPP).astype(np.float32)
    if tags is None:
        tags = tag_message(g, [0], [0], n_layers, values_per_pkt=VPP)
    batch = packetize(g, MessageId(job_id=1, src_rank=0, iter=it, msg_id=msg_id, phase=H.PHASE_PUSH), tags, VPP)
    return g, batch, tags


def exchange(a, b, batch, it=0, msg_id=7, info=None, timeout=10):
    h = a.send(1, batch, info or SendInfo(rec_msg_id=msg_id))
    r = b.recv(0, it, H.PHASE_PUSH, msg_id, timeout=timeout)
    return h.wait(timeout), r


def check_values(g, r):
    mask = r.loss_mask()
    np.testing.assert_array_equal(r.values[~mask], g[~mask])
    assert (r.values[mask] == 0).all()


def test_lossless_message_arrives_whole(make_pair):
    a, b, _ = make_pair()
    g, batch, _ = message()
    s, r = exchange(a, b, batch)
    assert (s.lost_pkts, s.retx_pkts, s.rounds, s.forced) == (0, 0, 1, False)
    assert r.received.all() and not r.forced
    np.testing.assert_array_equal(r.values, g)
    rows = a.message_rows + b.message_rows
    assert {row["side"] for row in rows} == {"sender", "receiver"}
    assert all(row["mct_us"] == row["complete_us"] - row["start_us"] >= 0 for row in rows)


def test_thread_times_reported_while_running_and_after_close(make_pair):
    a, b, _ = make_pair()
    _, batch, _ = message()
    exchange(a, b, batch)
    live = b.stats()["threads"]
    assert set(live) == {"rx", "tx"}
    assert live["rx"]["cpu_s"] > 0 and live["rx"]["runs"] > 0 and live["rx"]["runqueue_s"] >= 0
    b.close()
    final = b.stats()["threads"]  # the threads are gone: their last reading
    assert set(final) == {"rx", "tx"} and final["rx"]["runs"] >= live["rx"]["runs"]


def test_budget_honoured_exactly_and_lowest_drop_precedence_recovered(make_pair):
    g, batch, tags = message()
    unprot = np.flatnonzero(tags.drop_prec > 0)
    victims = set(unprot[:15].tolist())  # 15 unprotected lost; budget 1 % of 1000 = 10
    a, b, px = make_pair(proxy={"drop": lambda p: p.seq in victims and p.transmission == 0})
    s, r = exchange(a, b, batch)
    assert s.lost_pkts == r.lost_pkts == 10 and s.retx_pkts == 5 and s.rounds == 2 and not s.forced
    assert r.protected_lost == 0
    lost = set(np.flatnonzero(~r.received).tolist())
    assert lost <= victims
    # the receiver asked again for the 5 with the lowest drop precedence
    v = np.array(sorted(victims))
    order = v[np.argsort(tags.drop_prec[v], kind="stable")]
    assert set(order[:5].tolist()) == victims - lost
    check_values(g, r)


def test_protected_packets_always_recovered(make_pair):
    g, batch, tags = message()
    prot = np.flatnonzero(tags.drop_prec == 0)[:10]
    unprot = np.flatnonzero(tags.drop_prec > 0)[:5]
    victims = set(prot.tolist()) | set(unprot.tolist())
    a, b, px = make_pair(proxy={"drop": lambda p: p.seq in victims and p.transmission == 0})
    s, r = exchange(a, b, batch)
    assert r.protected_lost == 0 and r.received[prot].all()
    assert s.lost_pkts == 5 and s.retx_pkts == 10  # within budget: unprotected ones stay lost
    check_values(g, r)


def test_protected_loss_retried_up_to_r_max(make_pair):
    g, batch, tags = message()
    p0 = int(np.flatnonzero(tags.drop_prec == 0)[0])
    # lost on the first send and on two retransmissions: the third retransmission gets through
    a, b, _ = make_pair(proxy={"drop": lambda p: p.seq == p0 and p.transmission < 3}, send_cfg={"r_max": 3})
    s, r = exchange(a, b, batch)
    assert not s.forced and s.rounds == 4 and s.retx_pkts == 3 and r.received[p0]


def test_forced_after_r_max_is_reported(make_pair, caplog):
    # a protected packet that never arrives: forced after r_max, given up after the forced rounds
    g, batch, tags = message()
    p0 = int(np.flatnonzero(tags.drop_prec == 0)[0])
    a, b, _ = make_pair(proxy={"drop": lambda p: p.seq == p0}, send_cfg={"r_max": 2})
    s, r = exchange(a, b, batch)
    assert s.forced and r.forced and s.rounds == 3 + MAX_FORCED_ROUNDS and s.retx_pkts == 2 + MAX_FORCED_ROUNDS
    assert s.protected_lost == r.protected_lost == 1 and s.lost_pkts == 1
    assert a.message_rows[-1]["forced"] == 1 and b.message_rows[-1]["forced"] == 1
    assert a.stats()["forced_sent"] == 1 and b.stats()["forced_received"] == 1
    assert "budget violation" in caplog.text
    check_values(g, r)


def test_deadline_forces_completion(make_pair):
    g, batch, tags = message(n_pkts=100)
    p0 = int(np.flatnonzero(tags.drop_prec == 0)[0])
    a, b, _ = make_pair(proxy={"drop": lambda p: p.seq == p0}, send_cfg={"r_max": 100, "deadline_ms": 150})
    t0 = time.monotonic()
    s, r = exchange(a, b, batch)
    assert s.forced and r.forced and r.protected_lost == 1
    assert 0.15 <= time.monotonic() - t0 < 2.0


def test_r_max_zero_forces_after_the_first_round_and_still_recovers_protected(make_pair):
    g, batch, tags = message(n_pkts=100)
    p0 = int(np.flatnonzero(tags.drop_prec == 0)[0])
    a, b, _ = make_pair(proxy={"drop": lambda p: p.seq == p0 and p.transmission == 0}, send_cfg={"r_max": 0})
    s, r = exchange(a, b, batch)
    assert (s.rounds, s.retx_pkts, s.forced, s.protected_lost) == (2, 1, True, 0) and r.forced and r.received[p0]


@pytest.mark.parametrize("seed", [1, 2])
def test_reordering_duplication_and_random_loss(make_pair, seed):
    g, batch, tags = message(n_pkts=2000, seed=seed)
    a, b, px = make_pair(proxy={"loss": 0.03, "dup": 0.1, "reorder": 16, "seed": seed})
    s, r = exchange(a, b, batch)
    assert px.duplicated > 0 and len(px.dropped) > 0
    assert not s.forced and r.protected_lost == 0
    assert r.lost_pkts <= 20 and s.lost_pkts == r.lost_pkts == int((~r.received).sum())
    assert b.stats()["duplicates"] > 0
    check_values(g, r)


def test_premature_bitmap_backs_off_quiet_time(make_pair):
    # data sprayed onto a path 40 ms slower than the PROBE's: with a 2 ms quiet time the receiver
    # asks for packets that are only late; it must notice and wait longer
    g, batch, tags = message(n_pkts=200)
    a, b, _ = make_pair(proxy={"data_lag_ms": 40}, recv_cfg={"probe_quiet_ms": 2}, send_cfg={"r_max": 10})
    s, r = exchange(a, b, batch)
    st = b.stats()
    assert st["premature_bitmaps"] >= 1 and st["quiet_ms"]["0"] > 2
    assert not s.forced and r.protected_lost == 0 and r.lost_pkts <= 2  # within the 1 % budget
    check_values(g, r)


def test_queued_data_holds_its_probe_back(make_pair):
    # everything 60 ms in a queue (the PROBE too, behind the data): the receiver answers once, after
    # the data, without a premature BITMAP; the PROBE timeouts this causes are re-probes, not rounds
    g, batch, tags = message(n_pkts=200)
    a, b, _ = make_pair(proxy={"hold_ms": 60}, send_cfg={"r_max": 1, "probe_rto_ms": 10})
    s, r = exchange(a, b, batch)
    assert (s.rounds, s.retx_pkts, s.forced, s.lost_pkts) == (1, 0, False, 0)
    assert a.stats()["probe_timeouts"] >= 2 and a.stats()["probes_sent"] == 1 + a.stats()["probe_timeouts"]
    st = b.stats()
    assert st["premature_bitmaps"] == 0 and st["drops"].get("late", 0) == 0
    np.testing.assert_array_equal(r.values, g)


def test_lost_probe_is_sent_again_in_the_same_round(make_pair):
    g, batch, tags = message(n_pkts=100)
    a, b, px = make_pair(proxy={"drop_probe": lambda p: p.transmission == 0}, send_cfg={"probe_rto_ms": 30})
    t0 = time.monotonic()
    s, r = exchange(a, b, batch)
    assert time.monotonic() - t0 >= 0.03  # waited for the PROBE timeout
    assert (s.rounds, s.retx_pkts, s.forced) == (1, 0, False) and r.received.all()
    assert [p.probe for p in px.dropped] == [True]
    assert a.stats()["probe_timeouts"] == 1 and a.stats()["probes_sent"] == 2


def test_probe_timeout_follows_measured_round_trips(make_pair):
    # 3 messages through a 40 ms queue: the first PROBEs time out at the 10 ms floor, then the
    # timeout learns the round trip and later messages need no re-probe
    a, b, _ = make_pair(proxy={"hold_ms": 40}, send_cfg={"probe_rto_ms": 10})
    timeouts = []
    for msg_id in (1, 2, 3):
        g, batch, _ = message(n_pkts=20, msg_id=msg_id, seed=msg_id)
        s, r = exchange(a, b, batch, msg_id=msg_id)
        assert s.rounds == 1 and not s.forced
        timeouts.append(a.stats()["probe_timeouts"])
    assert timeouts[0] >= 1 and timeouts[2] == timeouts[1]
    assert a.stats()["srtt_ms"]["1"] >= 35


def test_reliable_mode_recovers_everything(make_pair):
    g, batch, _ = message(n_pkts=1000)
    a, b, _ = make_pair(proxy={"loss": 0.05, "seed": 3}, send_cfg={"reliable": True, "r_max": 10})
    s, r = exchange(a, b, batch)
    assert s.lost_pkts == 0 and r.received.all() and s.retx_pkts > 0
    np.testing.assert_array_equal(r.values, g)


def test_per_layer_budget_override(make_pair):
    g, batch, tags = message()
    victims = set(np.flatnonzero(tags.drop_prec > 0)[:5].tolist())
    a, b, _ = make_pair(
        proxy={"drop": lambda p: p.seq in victims and p.transmission == 0}, send_cfg={"layer_budgets": {"3": 0.0}}
    )
    s, r = exchange(a, b, batch, info=SendInfo(rec_msg_id=7, layer_first=2, layer_last=4))
    assert s.lost_pkts == 0 and s.retx_pkts == 5 and r.received.all()


def test_iteration_cap_limits_second_message(make_pair):
    # p_msg 5 % would allow 50 of 1000; the 2 % iteration cap allows 20 per iteration and source
    a, b, _ = make_pair(
        proxy={"drop": lambda p: p.transmission == 0 and p.seq in victims[p.msg_id]},
        send_cfg={"loss_budget": 0.05},
        recv_cfg={"iter_budget": 0.02},
    )
    victims = {}
    results = []
    for msg_id in (1, 2, 3):
        g, batch, tags = message(msg_id=msg_id, seed=msg_id)
        victims[msg_id] = set(np.flatnonzero(tags.drop_prec > 0)[:30].tolist())
        results.append(exchange(a, b, batch, msg_id=msg_id))
    assert [s.lost_pkts for s, _ in results] == [20, 20, 20]  # floor(0.02*1000)-0, (40-20), (60-40)
    # a new iteration starts with a fresh cap
    victims[4] = set()
    g, batch, _ = message(msg_id=4, it=1)
    s, r = exchange(a, b, batch, it=1, msg_id=4)
    assert s.lost_pkts == 0


def test_pacing_limits_rate(make_pair):
    a, b, _ = make_pair(send_cfg={"pacing_mbps": 20})
    g, batch, _ = message(n_pkts=500)  # 500 * (200 + 24 + 28 + 14) bytes = 1.06 Mbit -> ~53 ms at 20 Mbit/s
    t0 = time.monotonic()
    s, r = exchange(a, b, batch)
    assert r.received.all() and time.monotonic() - t0 >= 0.045


@pytest.mark.parametrize("cc", ["dctcp", "none"])
def test_tos_follows_priority_and_drop_precedence(make_pair, cc):
    a, b, _ = make_pair(send_cfg={"cc": cc})
    sniff = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sniff.bind(("127.0.0.1", 0))
    sniff.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
    sniff.settimeout(2)
    a.add_peer(Peer(1, "127.0.0.1", sniff.getsockname()[1], b.control_port))
    g = np.ones(4 * VPP, np.float32)
    tags = Tags(
        prio=np.array([2, 6, 4, 6], np.uint8),
        drop_prec=np.array([0, 3, 1, 0], np.uint8),
        mag_class=np.full(4, 8, np.uint8),
        layer_id=np.zeros(4, np.uint16),
    )
    batch = packetize(g, MessageId(job_id=1, src_rank=0, msg_id=1), tags, VPP)
    a.send(1, batch, SendInfo(rec_msg_id=1, layer_first=3, layer_last=3))
    got = []
    for _ in range(5):
        data, anc, _, _ = sniff.recvmsg(2048, 64)
        got.append((data, anc[0][2][0]))
    sniff.close()
    data = [(H.unpack_from(d), tos) for d, tos in got[:4]]
    # highest priority first, protected first within a priority; TOS = DSCP(prio, drop_prec) << 2,
    # ECN-capable (ECT(0)) under congestion control
    assert [h.seq for h, _ in data] == [3, 1, 2, 0]
    ecn = H.ECN_ECT0 if cc == "dctcp" else H.ECN_NOT_ECT
    assert all(tos == H.tos_of(int(tags.prio[h.seq]), int(tags.drop_prec[h.seq])) | ecn for h, tos in data)
    # then the PROBE, in band: the round's lowest priority, drop precedence 0, PROTECTED
    frame, tos = got[4]
    p = H.unpack_from(frame)
    assert (p.type, p.prio, p.drop_prec, p.seq, p.offset, p.n_pkts, p.msg_id, p.layer_id) == (
        H.TYPE_PROBE,
        2,
        0,
        0,
        0,
        4,
        1,
        3,
    )
    assert p.flags == H.FLAG_PROTECTED and tos == H.tos_of(2, 0)
    assert H.unpack_probe(frame) == H.Probe(round=1, attempt=0, round_pkts=4)


def _raw(h: H.DlcpHeader, payload_values: int) -> bytes:
    return h.pack() + bytes(4 * payload_values)


def test_malformed_and_unexpected_packets_counted_and_ignored(make_pair):
    a, b, _ = make_pair()
    b.advance(10)  # iteration 10: iterations < 8 are stale
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dst = ("127.0.0.1", b.data_port)
    ok = {"src_rank": 0, "job_id": 1, "iter": 10, "msg_id": 9, "n_pkts": 2}
    bad = {
        "length": b"\x10\x00\x01",
        "ver": bytes([0x20]) + _raw(H.DlcpHeader(**ok), VPP)[1:],
        "type": bytes([0x1F]) + _raw(H.DlcpHeader(**ok), VPP)[1:],
        "probe.length": H.DlcpHeader(**{**ok, "type": H.TYPE_PROBE}).pack() + bytes(3),
        "job_id": _raw(H.DlcpHeader(**{**ok, "job_id": 9}), VPP),
        "src_rank": _raw(H.DlcpHeader(**{**ok, "src_rank": 77}), VPP),
        "seq": _raw(H.DlcpHeader(**{**ok, "seq": 5}), VPP),
        "offset": _raw(H.DlcpHeader(**{**ok, "seq": 1, "offset": 3}), VPP),
        "payload": _raw(H.DlcpHeader(**ok), VPP - 1),
        "stale_iter": _raw(H.DlcpHeader(**{**ok, "iter": 3}), VPP),
    }
    for frame in bad.values():
        s.sendto(frame, dst)
    s.sendto(_raw(H.DlcpHeader(**{**ok, "msg_id": 10, "n_pkts": 3}), VPP), dst)
    s.sendto(_raw(H.DlcpHeader(**{**ok, "msg_id": 10, "n_pkts": 4}), VPP), dst)  # n_pkts changed
    s.close()
    deadline = time.monotonic() + 3
    while sum(b.stats()["drops"].values()) < len(bad) + 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    drops = b.stats()["drops"]
    assert {k: drops.get(k) for k in bad} == dict.fromkeys(bad, 1)
    assert drops.get("n_pkts") == 1
    # still serving real traffic
    g, batch, _ = message(it=10)
    s_res, r = exchange(a, b, batch, it=10)
    assert r.received.all() and not s_res.forced


def test_malformed_control_counted_connection_survives_or_closes(make_pair):
    a, b, _ = make_pair()
    c = socket.create_connection(("127.0.0.1", b.control_port))
    desc = C.Control(C.DESCRIBE, 1, 0, 1, H.PHASE_PUSH, 0, 3, 4, n_values=4 * VPP, drop_prec=np.zeros(4, np.uint8))
    good = C.encode(desc)
    c.sendall(good[:4] + bytes([9]) + good[5:])  # wrong version: message dropped, stream intact
    c.sendall(good[:5] + bytes([42]) + good[6:])  # unknown type
    c.sendall(
        C.encode(
            C.Control(C.DESCRIBE, 5, 0, 1, H.PHASE_PUSH, 0, 3, 4, n_values=4 * VPP, drop_prec=np.zeros(4, np.uint8))
        )
    )  # wrong job
    c.sendall(struct.pack("!I", 3) + b"abc")  # too short to be a frame: stream closed
    c.settimeout(3)
    assert c.recv(100) == b""  # the receiver closed the connection
    c.close()
    drops = b.stats()["drops"]
    assert drops["control.version"] == 1 and drops["control.type"] == 1
    assert drops["control.job_id"] == 1 and drops["control.length"] == 1
    g, batch, _ = message()
    s, r = exchange(a, b, batch)
    assert r.received.all()


def test_recv_timeout_is_one_clear_error(make_pair):
    a, b, _ = make_pair()
    with pytest.raises(TransportError, match=r"no message \(peer 0, iter 5, push, msg 1\) after 0.2 s"):
        b.recv(0, 5, H.PHASE_PUSH, 1, timeout=0.2)


def test_port_in_use_is_one_clear_error(make_pair):
    a, b, _ = make_pair()
    with pytest.raises(TransportError, match="cannot open data port"):
        UdpTransport(TransportConfig(rank=2, data_port=a.data_port, control_port=0), [])


def test_per_packet_records(make_pair):
    g, batch, tags = message(n_pkts=100)
    victims = {5, 6}
    a, b, _ = make_pair(
        proxy={"drop": lambda p: p.seq in victims}, send_cfg={"per_packet": True}, recv_cfg={"per_packet": True}
    )
    s, r = exchange(a, b, batch)
    (tx,), (rx,) = a.packet_chunks, b.packet_chunks
    assert (tx["send_us"] > 0).all() and (tx["recv_us"] < 0).all()
    assert (rx["recv_us"] < 0).sum() == s.lost_pkts
    assert set(np.flatnonzero(rx["recv_us"] < 0).tolist()) <= victims


def test_config_errors_name_the_key():
    with pytest.raises(ValueError, match=r"dlcp.loss_budget: 1.5 is not a fraction"):
        TransportConfig(loss_budget=1.5)
    with pytest.raises(ValueError, match=r"dlcp.layer_budgets.3"):
        TransportConfig(layer_budgets={"3": -1})
    with pytest.raises(ValueError, match=r"dlcp.send_impl"):
        TransportConfig(send_impl="carrier-pigeon")


def test_every_transport_kind_has_an_implementation():
    from typing import get_args

    from dlcp.transport.api import TransportKind
    from dlcp.transport.factory import TRANSPORTS

    assert tuple(TRANSPORTS) == get_args(TransportKind)


def test_tcp_baseline_same_interface():
    from dlcp.transport.factory import make_transport

    a = make_transport(TransportConfig(rank=0, data_port=0, values_per_pkt=VPP, transport="tcp"), [])
    b = make_transport(TransportConfig(rank=1, data_port=0, values_per_pkt=VPP, transport="tcp"), [])
    try:
        a.add_peer(Peer(1, "127.0.0.1", b.data_port, b.control_port))
        g, batch, _ = message(n_pkts=300)
        counts = np.arange(300, dtype=np.uint8)
        s, r = exchange(a, b, batch, info=SendInfo(rec_msg_id=7, step=2, counts=counts))
        np.testing.assert_array_equal(r.values, g)
        np.testing.assert_array_equal(r.counts, counts)
        assert not s.forced and s.mct_us >= 0
        assert a.message_rows[0]["side"] == "sender" and b.message_rows[0]["step"] == 2
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("send_impl", ["sendmmsg", "sendmsg"])
def test_telemetry_block_and_both_send_paths(make_pair, send_impl):
    a, b, _ = make_pair(proxy={"loss": 0.02, "seed": 5}, send_cfg={"send_impl": send_impl})
    g = np.random.default_rng(4).standard_normal(300 * VPP + 7).astype(np.float32)
    tags = tag_message(g, [0], [0], 1, values_per_pkt=VPP)
    batch = packetize(g, MessageId(job_id=1, src_rank=0, msg_id=7, phase=H.PHASE_PUSH), tags, VPP, telemetry=True)
    s, r = exchange(a, b, batch)
    assert a.stats()["send_impl"] == send_impl and not s.forced and r.protected_lost == 0
    assert r.values.size == g.size  # the short last packet sets the message length
    check_values(g, r)


def test_low_priority_message_behind_strict_priority_queue_is_not_forced():
    # The PS-incast failure in miniature: a slow strict-priority port (the proxy at 3000 packets/s)
    # holds sender A's priority-1 message behind sender C's priority-6 message for ~100 ms. A PROBE
    # on the control channel would overtake A's queued data, the receiver would ask for all of it
    # (premature BITMAPs), A would resend what is still queued and be forced after r_max rounds
    # while the data then arrives "late". In band, A's PROBE waits in priority 1 behind A's data.
    ts = [
        UdpTransport(TransportConfig(rank=r, data_port=0, control_port=0, values_per_pkt=VPP, r_max=2), [])
        for r in range(3)
    ]
    a, b, c = ts
    px = LossyProxy(("127.0.0.1", b.data_port), ("127.0.0.1", b.control_port), rate_pps=3000)
    try:
        for s in (a, c):
            s.add_peer(Peer(1, "127.0.0.1", px.port, px.control_port))
            b.add_peer(Peer(s.cfg.rank, "127.0.0.1", s.data_port, s.control_port))
            s.connect()

        def fixed(n, prio, src):
            g = np.random.default_rng(src).standard_normal(n * VPP).astype(np.float32)
            tags = Tags(
                prio=np.full(n, prio, np.uint8),
                drop_prec=np.zeros(n, np.uint8),
                mag_class=np.full(n, 8, np.uint8),
                layer_id=np.zeros(n, np.uint16),
            )
            return g, packetize(g, MessageId(job_id=1, src_rank=src, msg_id=5, phase=H.PHASE_PUSH), tags, VPP)

        g_c, big = fixed(300, 6, 2)
        g_a, small = fixed(60, 1, 0)
        hc = c.send(1, big, SendInfo(rec_msg_id=5))
        deadline = time.monotonic() + 2
        while len(px.seen) < 300 and time.monotonic() < deadline:  # C's packets are queued first
            time.sleep(0.002)
        ha = a.send(1, small, SendInfo(rec_msg_id=5))
        ra = b.recv(0, 0, H.PHASE_PUSH, 5, timeout=10)
        rc = b.recv(2, 0, H.PHASE_PUSH, 5, timeout=10)
        sa, sc = ha.wait(10), hc.wait(10)
        first_a = next(i for i, p in enumerate(px.arrivals) if p.src == 0)
        assert first_a >= 250  # A's data really waited behind C's
        assert (sa.forced, sa.rounds, sa.retx_pkts) == (False, 1, 0)
        assert (sc.forced, sc.rounds, sc.retx_pkts) == (False, 1, 0)
        np.testing.assert_array_equal(ra.values, g_a)
        np.testing.assert_array_equal(rc.values, g_c)
        st = b.stats()
        assert st["premature_bitmaps"] == 0 and st["drops"].get("late", 0) == 0 and st["duplicates"] == 0
        # A's PROBE (and its re-probes, sent while it waited) left the port after all of A's data
        kinds = [p.probe for p in px.arrivals if p.src == 0]
        assert kinds[:60] == [False] * 60 and len(kinds) > 60 and all(kinds[60:])
    finally:
        for t in ts:
            t.close()
        px.close()


def test_retransmissions_are_protected_on_the_wire():
    """Requested packets are needed to finish within budget: they go out as RETX with drop
    precedence 0 (PROTECTED, DSCP without drop precedence) so switches do not early-drop them again."""
    from dlcp.transport.core.outputs import Round
    from dlcp.transport.udpio import send_vectors
    from dlcp.wire import header as H
    from dlcp.wire.chunking import MessageId, packetize
    from dlcp.wire.tagging import Tags

    n = 4
    tags = Tags(
        prio=np.full(n, 5, np.uint8),
        drop_prec=np.array([0, 1, 2, 3], np.uint8),
        mag_class=np.full(n, 8, np.uint8),
        layer_id=np.zeros(n, np.uint16),
    )
    batch = packetize(np.zeros(n * 350, np.float32), MessageId(msg_id=7), tags)
    dest = np.zeros(16, np.uint8)
    order = np.arange(n)
    first = send_vectors(Round((1, 0, 0, 7), 1, 1, batch, order, order, retx=False, ecn=False), dest)
    again = send_vectors(Round((1, 0, 0, 7), 1, 2, batch, order, order, retx=True, ecn=False), dest)
    assert [H.unpack_from(r).drop_prec for r in first.rows] == [0, 1, 2, 3]
    for row, tos in zip(again.rows, again.tos):
        h = H.unpack_from(row)
        assert (h.type, h.drop_prec, h.prio) == (H.TYPE_RETX, 0, 5) and h.protected
        assert tos == H.tos_of(5, 0)
    assert [H.unpack_from(r).drop_prec for r in batch.headers] == [0, 1, 2, 3]  # originals untouched


def test_receiver_reads_ecn_bits_and_reports_them_in_feedback(make_pair):
    # a sender by hand: DESCRIBE asking for FEEDBACK on a control connection, then 20 data packets,
    # every fourth one CE-marked (the TOS byte a switch would have rewritten)
    # switch marks only; time_scale 100 stretches the delayed FEEDBACK (0.5 ms) to 50 ms, so a
    # loaded machine's pauses between the hand-sent packets do not flush a report early
    a, b, _ = make_pair(recv_cfg={"feedback_every": 5, "host_mark_ms": 0, "time_scale": 100})
    g, batch, _ = message(n_pkts=20)
    ctl = socket.create_connection(("127.0.0.1", b.control_port))
    ctl.sendall(
        C.encode(
            C.Control(
                C.DESCRIBE,
                1,
                0,
                1,
                H.PHASE_PUSH,
                0,
                7,
                20,
                n_values=20 * VPP,
                drop_prec=np.zeros(20, np.uint8),
                budget_ppm=0,
                feedback=True,
            )
        )
    )
    time.sleep(0.1)  # the DESCRIBE first, so every packet is reported at once
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for i in range(20):
        ecn = H.ECN_CE if i % 4 == 0 else H.ECN_ECT0
        u.sendmsg(
            [batch.to_bytes(i)],
            [(socket.IPPROTO_IP, socket.IP_TOS, struct.pack("i", H.tos_of(1, 0) | ecn))],
            0,
            ("127.0.0.1", b.data_port),
        )
    u.close()
    reader, fb = C.FrameReader(), []
    ctl.settimeout(3)
    while len(fb) < 4:
        fb += [C.decode(body) for body in reader.feed(ctl.recv(4096))]
    ctl.close()
    assert [(m.type, m.rcvd_pkts, m.ce_pkts) for m in fb] == [
        (C.FEEDBACK, 5 * k, [2, 3, 4, 5][k - 1]) for k in (1, 2, 3, 4)
    ]
    assert b.stats()["ce_received"] == 5


def _control_timers_us(sock: socket.socket) -> tuple[int, int] | None:
    """(RTO floor, delayed-ACK cap) of a TCP socket in microseconds; None before Linux 6.16."""
    from dlcp.transport.sockets import TCP_DELACK_MAX_US, TCP_RTO_MIN_US

    try:
        return tuple(sock.getsockopt(socket.IPPROTO_TCP, opt) for opt in (TCP_RTO_MIN_US, TCP_DELACK_MAX_US))
    except OSError:
        return None


def test_control_connections_dilate_their_kernel_timers(make_pair):
    # the RTO floor and the delayed-ACK cap are the system's 10 ms: under dilation 4 both ends of a
    # control connection (the one that connected and the one that accepted) wait 40 ms
    a, b, _ = make_pair(send_cfg={"time_scale": 4}, recv_cfg={"time_scale": 4})
    if _control_timers_us(socket.socket()) is None:
        pytest.skip("kernel without TCP_RTO_MIN_US / TCP_DELACK_MAX_US (Linux < 6.16)")
    exchange(a, b, message(n_pkts=5)[1])
    accepted = [c.sock for c in b._conns.values() if c.outgoing_to is None]
    assert len(accepted) == 1
    assert _control_timers_us(a._out[1].sock) == _control_timers_us(accepted[0]) == (40_000, 40_000)


def test_control_timers_scale_up_to_the_kernel_limit():
    from dlcp.transport.sockets import control_timer_us

    assert [control_timer_us(d) for d in (1, 4, 20, 100)] == [10_000, 40_000, 200_000, 200_000]


def test_batch_receiver_reads_tos_and_how_long_a_datagram_waited():
    from dlcp.transport.udpio import BatchReceiver

    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.setblocking(False)
    br = BatchReceiver(rx, batch=8)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for i, tos in enumerate((0, H.tos_of(3, 1) | H.ECN_ECT0, H.tos_of(6, 0) | H.ECN_CE)):
        tx.sendmsg(
            [bytes([i]) * (100 + i)], [(socket.IPPROTO_IP, socket.IP_TOS, struct.pack("i", tos))], 0, rx.getsockname()
        )
    sent = time.time()
    time.sleep(0.05)
    assert br.recv() == 3
    assert br.lengths == [100, 101, 102] and br.tos == [0, H.tos_of(3, 1) | 2, H.tos_of(6, 0) | 3]
    assert all(0.045 < time.time() - t < 1.0 and t <= sent + 0.001 for t in br.arrived)
    assert bytes(br.view[2 * 2048 : 2 * 2048 + 102]) == bytes([2]) * 102
    assert br.recv() == 0
    # the next call reads its own control messages (the kernel overwrote the headers' lengths)
    # and marks a datagram longer than a slot
    for size, tos in ((3000, H.tos_of(1, 0)), (64, H.tos_of(5, 2) | H.ECN_CE)):
        tx.sendmsg([bytes(size)], [(socket.IPPROTO_IP, socket.IP_TOS, struct.pack("i", tos))], 0, rx.getsockname())
    time.sleep(0.02)
    assert br.recv() == 2
    assert br.truncated == [True, False] and br.tos == [H.tos_of(1, 0), H.tos_of(5, 2) | 3]
    assert br.lengths[1] == 64 and all(0 < time.time() - t < 1.0 for t in br.arrived)
    tx.close()
    rx.close()


def test_datagrams_the_core_need_not_see_cost_no_python_wake_up(monkeypatch, make_pair):
    """Paced datagrams (one per wake-up, as a host behind a slow link gets them): after a message's
    first packet opens it in C, the receive thread's wait (`_rxpath.serve`) absorbs the rest in C
    and returns into Python only for what the core must see."""
    from transport_scenarios import rx_path_or_skip

    rx_path_or_skip()
    monkeypatch.setenv("DLCP_RX", "c")  # the batched C path, whatever the environment asks for
    _, b, _ = make_pair()
    n = 40
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for seq in range(n):
        h = H.DlcpHeader(src_rank=0, job_id=1, iter=0, msg_id=9, n_pkts=n, seq=seq, offset=seq * VPP)
        s.sendto(_raw(h, VPP), ("127.0.0.1", b.data_port))
        time.sleep(0.003)
    s.close()
    deadline = time.monotonic() + 3
    while b.stats()["packets_received"] < n and time.monotonic() < deadline:
        time.sleep(0.01)
    st = b.stats()
    assert st["packets_received"] == n
    path = st["rx_path"]
    assert path["absorbed"] == n - 1  # the first packet went through the core and opened the message
    assert path["serve_wakes"] >= n - 1  # paced: a wake-up per datagram
    assert path["serve_returns"] <= 5, path  # the first packet, and a 0.2 s idle timeout or two


def test_a_feedback_delay_started_in_c_fires_on_time_with_no_decision_in_python(monkeypatch, make_pair):
    """A sender that waits for each FEEDBACK (bursts shorter than `feedback_every`): C starts each
    burst's FEEDBACK delay itself and the receive thread's
    wait arms its timer for it, so every FEEDBACK goes out at its delay (a few ms here, not the
    thread's 0.2 s idle wake-up) and C never stops for the core to decide."""
    from transport_scenarios import rx_path_or_skip

    rx_path_or_skip()
    monkeypatch.setenv("DLCP_RX", "c")
    # the first delay is the cap, 0.5 ms x time_scale 20 = 10 ms; later ones the burst's own length
    _, b, _ = make_pair(recv_cfg={"feedback_every": 64, "time_scale": 20})
    bursts, per = 4, 3
    n = bursts * per
    g, batch, _ = message(n_pkts=n)
    ctl = socket.create_connection(("127.0.0.1", b.control_port))
    describe = C.Control(C.DESCRIBE, 1, 0, 1, H.PHASE_PUSH, 0, 7, n, n_values=n * VPP, drop_prec=np.zeros(n, np.uint8))
    describe.budget_ppm, describe.feedback = 0, True
    ctl.sendall(C.encode(describe))
    time.sleep(0.1)  # the DESCRIBE first
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    reader, fb, waits = C.FrameReader(), [], []
    ctl.settimeout(3)
    for k in range(bursts):
        for i in range(k * per, (k + 1) * per):
            u.sendto(batch.to_bytes(i), ("127.0.0.1", b.data_port))
        sent = time.monotonic()
        while len(fb) <= k:
            fb += [C.decode(body) for body in reader.feed(ctl.recv(4096))]
        waits.append(time.monotonic() - sent)
    u.close()
    ctl.close()
    assert [(m.type, m.rcvd_pkts) for m in fb] == [(C.FEEDBACK, per * (k + 1)) for k in range(bursts)]
    path = b.stats()["rx_path"]
    assert path["absorbed"] == n and path["decisions"] == 0, path  # the DESCRIBE opened the message in C
    assert max(waits) < 0.1, waits  # the timer C armed, not the idle wake-up (0.2 s)
