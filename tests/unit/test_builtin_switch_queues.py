"""Egress queues of the Python engine in virtual time: strict priority, pacing, depth, loss, delay."""

from __future__ import annotations

import random

import pytest

from dlcp.network.runtime_file import PortConfig
from emulation.builtin_switch.queues import FRAME, EgressPort


def pkt(qid: int, size: int = 1000, tag=None) -> list:
    return [bytearray(size), None, qid, -1, 0.0, 0, 0.0, tag]


def drain(port: EgressPort, t: float) -> list:
    out: list = []
    port.dequeue_due(t, out, 1000)
    return out


def test_strict_priority_highest_first():
    port = EgressPort(PortConfig(1, "x", rate_pps=1000), random.Random(0))
    for i, q in enumerate([1, 1, 6, 0, 7, 6]):
        port.enqueue(pkt(q, tag=i), q)
    order = [p[7] for t in range(6) for p in drain(port, 1.0 + t * 0.001)]
    assert order == [4, 2, 5, 0, 1, 3]


def test_pacing_by_bits_and_packets():
    port = EgressPort(PortConfig(1, "x", rate_mbps=8.0), random.Random(0))  # 1000-byte frames: 1 ms each
    for _ in range(10):
        port.enqueue(pkt(1), 1)
    assert len(drain(port, 10.0)) == 1
    assert len(drain(port, 10.0005)) == 0
    assert len(drain(port, 10.0015)) == 1  # the 1 ms slot
    assert len(drain(port, 10.0030)) == 2  # the 2 and 3 ms slots (within the 2 ms catch-up)
    port = EgressPort(PortConfig(1, "x", rate_pps=100), random.Random(0))
    for _ in range(10):
        port.enqueue(pkt(1, size=60), 1)
    # woken on time (as the loop is), one packet per 10 ms slot
    assert [len(drain(port, 5.0 + k * 0.005 + 0.0001)) for k in range(8)] == [1, 0, 1, 0, 1, 0, 1, 0]


def test_idle_port_gets_no_burst_credit():
    port = EgressPort(PortConfig(1, "x", rate_pps=1000), random.Random(0), max_lag_s=0.002)
    port.enqueue(pkt(1), 1)
    assert len(drain(port, 1.0)) == 1
    for _ in range(50):
        port.enqueue(pkt(1), 1)
    assert len(drain(port, 2.0)) == 1  # one second idle does not bank 1000 departures


def test_depth_loss_and_delay():
    port = EgressPort(PortConfig(1, "x", queue_depth_pkts=3), random.Random(0))
    assert [port.enqueue(pkt(2), 2) for _ in range(5)] == [True, True, True, False, False]
    assert port.overflow_pkts == 2 and port.enqueue(pkt(3), 3)  # depth is per queue
    lossy = EgressPort(PortConfig(1, "x", loss=0.25), random.Random(1))
    out: list = []
    lossy.link([pkt(1) for _ in range(4000)], [0.0] * 4000, 0.0, out)
    assert 850 < lossy.lost_pkts < 1150 and len(out) + lossy.lost_pkts == 4000
    slow = EgressPort(PortConfig(1, "x", delay_us=10_000), random.Random(0))
    out = []
    slow.link([pkt(1)], [1.0], 1.0, out)
    assert out == [] and slow.next_arrival() == 1.01
    slow.arrived(1.005, out)
    assert out == []
    slow.arrived(1.01, out)
    assert len(out) == 1 and len(out[0][FRAME]) == 1000


def test_delay_histogram_percentiles():
    from dlcp.switch.counter_dump import DelayHistogram

    h = DelayHistogram()
    for us in list(range(100)) + [5000] * 100:
        h.add(us)
    assert h.percentile(0.25) == 49 and h.max == 5000
    assert abs(h.percentile(0.99) - 5000) <= 5000 * 0.04  # log buckets: within ~3 %
    rebuilt = DelayHistogram.from_counts(h.fine, h.counts, h.n, h.max)
    assert rebuilt.percentile(0.5) == h.percentile(0.5) and DelayHistogram().percentile(0.5) == 0


def test_a_packet_arrives_when_its_transmission_ends():
    """Store-and-forward: on an idle 8 Mbit/s port a 1000-byte frame starts at once and reaches the
    next hop 1 ms later (plus the propagation delay); the next one follows 1 ms after it."""
    for delay_us, delay_s in [(0, 0.0), (500, 0.0005)]:
        port = EgressPort(PortConfig(1, "x", rate_mbps=8.0, delay_us=delay_us), random.Random(0))
        port.enqueue(pkt(1, tag="a"), 1)
        port.enqueue(pkt(1, tag="b"), 1)
        started: list = []
        ends = port.dequeue_due(3.0, started, 10)
        assert [p[7] for p in started] == ["a"] and ends == [pytest.approx(3.001)]
        out: list = []
        port.link(started, ends, 3.0, out)
        assert out == [] and port.next_arrival() == pytest.approx(3.001 + delay_s)
        port.arrived(3.0009 + delay_s, out)
        assert out == []
        port.arrived(3.001 + delay_s, out)
        assert [p[7] for p in out] == ["a"]
        started = []
        ends = port.dequeue_due(3.001, started, 10)
        assert [p[7] for p in started] == ["b"] and ends == [pytest.approx(3.002)]
    unlimited = EgressPort(PortConfig(1, "x"), random.Random(0))  # no rate: no transmission time
    unlimited.enqueue(pkt(1, tag="c"), 1)
    started, out = [], []
    unlimited.link(started, unlimited.dequeue_due(5.0, started, 10), 5.0, out)
    assert [p[7] for p in out] == ["c"]


def test_a_frame_from_a_host_also_takes_its_host_links_time():
    """host_nic: the host's shaper let the frame go at the start of its slot, so the frame reaches
    the next hop one more transmission time later, at the host link's rate (this port's)."""
    port = EgressPort(PortConfig(1, "x", rate_mbps=8.0, host_nic=True), random.Random(0))
    assert port.ingress_byte_time == pytest.approx(1e-6)  # 8 Mbit/s: 1 us per byte
    assert EgressPort(PortConfig(1, "x", rate_mbps=8.0), random.Random(0)).ingress_byte_time == 0.0
    from_host = pkt(1, tag="h")
    from_host[6] = 1000 * port.ingress_byte_time  # what the engine stores on arrival
    port.enqueue(from_host, 1)
    port.enqueue(pkt(1, tag="s"), 1)  # from a switch: no host link
    started, out = [], []
    port.link(started, port.dequeue_due(3.0, started, 10), 3.0, out)
    assert out == [] and port.next_arrival() == pytest.approx(3.002)
    started = []
    port.link(started, port.dequeue_due(3.001, started, 10), 3.001, out)
    port.arrived(3.00199, out)
    assert out == []  # the second frame is done at 3.002 too, but a wire keeps its order
    port.arrived(3.002, out)
    assert [p[7] for p in out] == ["h", "s"]


def test_a_late_dequeue_is_measured_against_when_the_slot_began():
    """The switch woke 5 ms after the first packet's slot began: both packets count as late by what an
    ideal link would have done (the catch-up limit does not hide it), an on-time one as not late."""
    port = EgressPort(PortConfig(1, "x", rate_mbps=8.0), random.Random(0), max_lag_s=0.002)  # 1000 B: 1 ms
    for _ in range(2):
        port.enqueue([bytearray(1000), None, 0, -1, 0.0, 0, 0.0], 0)
    out: list = []
    port.dequeue_due(0.005, out, 8)
    assert len(out) == 1 and port.late.count == 1 and 0.0049 < port.late.max_s < 0.0051
    port.dequeue_due(0.006, out, 8)  # its slot began at 1 ms on the ideal link
    assert len(out) == 2 and port.late.count == 2 and port.late.quantile_s(1.0) <= 0.0051
    assert port.late.quantile_s(0.5) >= 0.0049 * 2**-0.25  # both ~5 ms late
    port.enqueue([bytearray(1000), None, 0, -1, 0.010, 0, 0.0], 0)
    port.dequeue_due(0.010, out, 8)
    assert port.late.count == 3 and port.late.bins[0] == 1  # on time
