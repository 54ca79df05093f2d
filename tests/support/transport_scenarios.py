"""Protocol scenarios that run unchanged on both drivers of the protocol core: the virtual-time
network (dlcp.transport.virtual: deterministic, no sockets, no sleeps) and the UDP driver over
loopback behind a LossyProxy. A scenario gets `make(faults=..., send_cfg=..., recv_cfg=...)`, which
returns a pair (sender rank 0 -> receiver rank 1), and asserts on what the exchange returns.

Faults, in driver-neutral words: `drop(pkt)` / `drop_control(frame)` predicates (pkt: .seq,
.transmission, .probe; frame: .type_name, .index, .msg), `loss` and `dup` fractions (seeded),
`reorder` (shuffle / jitter), `hold_s` (every datagram held that long: a queue the control channel
overtakes), `data_lag_s` (data but not PROBEs held: data sprayed onto a slower path).
"""

from __future__ import annotations

import time

import numpy as np
from lossy_proxy import LossyProxy

from dlcp.transport.api import Peer, SendInfo, TransportConfig
from dlcp.transport.core.sender import MAX_FORCED_ROUNDS
from dlcp.transport.udp_driver import UdpTransport
from dlcp.transport.virtual import Faults, SwitchModel, VirtualNetwork
from dlcp.wire import header as H
from dlcp.wire.chunking import MessageId, packetize
from dlcp.wire.tagging import Tags, tag_message

VPP = 50  # values per packet: messages of hundreds of packets stay small and fast


def message(n_pkts=200, seed=0, it=0, msg_id=7, tags: Tags | None = None, src=0):
    g = np.random.default_rng(seed).standard_normal(n_pkts * VPP).astype(np.float32)
    if tags is None:
        tags = tag_message(g, [0], [0], 1, values_per_pkt=VPP)
    batch = packetize(g, MessageId(job_id=1, src_rank=src, iter=it, msg_id=msg_id, phase=H.PHASE_PUSH), tags, VPP)
    return g, batch, tags


def check_values(g, r):
    mask = r.loss_mask()
    np.testing.assert_array_equal(r.values[~mask], g[~mask])
    assert (r.values[mask] == 0).all()


def rx_path_or_skip():
    """The C receive path's extension, or a skip saying why it is not usable."""
    import pytest

    from dlcp.transport.rx_mirror import load_rxpath

    try:
        return load_rxpath()
    except ImportError as e:
        pytest.skip(f"the C receive path is not built: {e} (python setup.py build_ext --inplace)")


# --- the two drivers behind one interface ------------------------------------------------------------


class VirtualPair:
    rx_path = "python"  # the receiver's: every datagram through the core, or the C receive path

    def __init__(self, faults: dict, send_cfg: dict, recv_cfg: dict, seed: int = 1):
        lag, hold = faults.get("data_lag_s", 0.0), faults.get("hold_s", 0.0)
        delay = None
        if lag or hold:

            def delay(p):
                return hold + (0.0 if p.probe else lag)

        self.net = VirtualNetwork(
            SwitchModel(delay_us=20, jitter_us=300 if faults.get("reorder") else 0),
            Faults(
                loss=faults.get("loss", 0.0),
                dup=faults.get("dup", 0.0),
                drop=faults.get("drop"),
                delay=delay,
                drop_control=faults.get("drop_control"),
            ),
            seed=seed,
        )
        self.a = self.net.add_host(TransportConfig(rank=0, values_per_pkt=VPP, **send_cfg))
        self.b = self.net.add_host(TransportConfig(rank=1, values_per_pkt=VPP, **recv_cfg), self.rx_path)
        self.t0 = 0.0

    def exchange(self, batch, info=None, it=0, msg_id=7):
        self.t0 = self.net.now
        key = self.a.send(1, batch, info or SendInfo(rec_msg_id=msg_id))
        rkey = (0, it, H.PHASE_PUSH, msg_id)
        self.net.run(until=lambda: key in self.a.sent and rkey in self.b.received)
        self.t1 = self.net.now
        return self.a.sent.pop(key), self.b.received.pop(rkey)

    def elapsed(self) -> float:
        return self.t1 - self.t0

    def advance(self, it: int) -> None:
        self.b.advance(it)

    def sender_stats(self) -> dict:
        return self.a.stats()

    def receiver_stats(self) -> dict:
        return self.b.stats()

    def close(self) -> None:
        pass


class VirtualCPair(VirtualPair):
    rx_path = "c"


class UdpPair:
    rx_path = "c"

    def __init__(self, faults: dict, send_cfg: dict, recv_cfg: dict, seed: int = 1):
        self.a = UdpTransport(TransportConfig(rank=0, data_port=0, control_port=0, values_per_pkt=VPP, **send_cfg), [])
        self.b = UdpTransport(
            TransportConfig(rank=1, data_port=0, control_port=0, values_per_pkt=VPP, **recv_cfg), [], self.rx_path
        )
        drop = faults.get("drop")
        self.px = LossyProxy(
            ("127.0.0.1", self.b.data_port),
            ("127.0.0.1", self.b.control_port),
            drop=drop,
            drop_probe=drop,
            loss=faults.get("loss", 0.0),
            dup=faults.get("dup", 0.0),
            reorder=16 if faults.get("reorder") else 0,
            seed=seed,
            hold_ms=faults.get("hold_s", 0.0) * 1e3,
            data_lag_ms=faults.get("data_lag_s", 0.0) * 1e3,
            drop_control=faults.get("drop_control"),
        )
        self.a.add_peer(Peer(1, "127.0.0.1", self.px.port, self.px.control_port))
        self.b.add_peer(Peer(0, "127.0.0.1", self.a.data_port, self.a.control_port))

    def exchange(self, batch, info=None, it=0, msg_id=7, timeout=20):
        self.t0 = time.monotonic()
        h = self.a.send(1, batch, info or SendInfo(rec_msg_id=msg_id))
        r = self.b.recv(0, it, H.PHASE_PUSH, msg_id, timeout=timeout)
        s = h.wait(timeout)
        self.t1 = time.monotonic()
        return s, r

    def elapsed(self) -> float:
        return self.t1 - self.t0

    def advance(self, it: int) -> None:
        self.b.advance(it)

    def sender_stats(self) -> dict:
        return self.a.stats()

    def receiver_stats(self) -> dict:
        return self.b.stats()

    def close(self) -> None:
        for x in (self.a, self.b, self.px):
            x.close()


class UdpPythonPair(UdpPair):
    rx_path = "python"


# the receivers: "virtual" and "udp-python" through the core alone, "virtual-c" and "udp" through the
# C receive path (dlcp/transport/rx_mirror.py)
DRIVERS = {"virtual": VirtualPair, "virtual-c": VirtualCPair, "udp": UdpPair, "udp-python": UdpPythonPair}


# --- scenarios -------------------------------------------------------------------------------------------


def lossless(make):
    g, batch, _ = message()
    p = make()
    s, r = p.exchange(batch)
    assert (s.lost_pkts, s.retx_pkts, s.rounds, s.forced) == (0, 0, 1, False)
    assert r.received.all() and not r.forced
    np.testing.assert_array_equal(r.values, g)


def budget_exact_lowest_drop_precedence_recovered(make):
    g, batch, tags = message(1000)
    unprot = np.flatnonzero(tags.drop_prec > 0)
    victims = set(unprot[:15].tolist())  # 15 unprotected lost; budget 1 % of 1000 = 10
    p = make(faults={"drop": lambda k: not k.probe and k.seq in victims and k.transmission == 0})
    s, r = p.exchange(batch)
    assert s.lost_pkts == r.lost_pkts == 10 and s.retx_pkts == 5 and s.rounds == 2 and not s.forced
    assert r.protected_lost == 0
    lost = set(np.flatnonzero(~r.received).tolist())
    v = np.array(sorted(victims))
    order = v[np.argsort(tags.drop_prec[v], kind="stable")]
    assert lost <= victims and set(order[:5].tolist()) == victims - lost  # the 5 lowest precedences came back
    check_values(g, r)


def protected_always_recovered(make):
    g, batch, tags = message(1000)
    prot = np.flatnonzero(tags.drop_prec == 0)[:10]
    victims = set(prot.tolist()) | set(np.flatnonzero(tags.drop_prec > 0)[:5].tolist())
    p = make(faults={"drop": lambda k: not k.probe and k.seq in victims and k.transmission == 0})
    s, r = p.exchange(batch)
    assert r.protected_lost == 0 and r.received[prot].all()
    assert s.lost_pkts == 5 and s.retx_pkts == 10  # within budget: the unprotected ones stay lost
    check_values(g, r)


def protected_retried_up_to_r_max(make):
    _g, batch, tags = message()
    p0 = int(np.flatnonzero(tags.drop_prec == 0)[0])
    p = make(faults={"drop": lambda k: not k.probe and k.seq == p0 and k.transmission < 3}, send_cfg={"r_max": 3})
    s, r = p.exchange(batch)
    assert not s.forced and s.rounds == 4 and s.retx_pkts == 3 and r.received[p0]


def forced_message_still_recovers_its_protected_packets(make):
    # budget 0: after r_max rounds FORCE_STOP gives up the unprotected packet that is always lost,
    # and the protected one, lost in all 3 rounds before, comes back in the rounds after
    g, batch, tags = message()
    p0 = int(np.flatnonzero(tags.drop_prec == 0)[0])
    u0 = int(np.flatnonzero(tags.drop_prec > 0)[0])
    p = make(
        faults={"drop": lambda k: not k.probe and (k.seq == u0 or (k.seq == p0 and k.transmission < 3))},
        send_cfg={"r_max": 2, "loss_budget": 0.0},
    )
    s, r = p.exchange(batch)
    assert s.forced and r.forced and s.rounds == 4 and s.retx_pkts == 5  # 2 x (p0, u0), then p0
    assert s.protected_lost == r.protected_lost == 0 and s.lost_pkts == r.lost_pkts == 1 and r.received[p0]
    assert p.sender_stats()["forced_sent"] == 1 and p.receiver_stats()["forced_received"] == 1
    check_values(g, r)


def forced_gives_up_a_protected_packet_only_at_its_final_round(make):
    g, batch, tags = message()
    p0 = int(np.flatnonzero(tags.drop_prec == 0)[0])
    p = make(faults={"drop": lambda k: not k.probe and k.seq == p0}, send_cfg={"r_max": 2})
    s, r = p.exchange(batch)
    assert s.forced and r.forced and s.rounds == 3 + MAX_FORCED_ROUNDS and s.retx_pkts == 2 + MAX_FORCED_ROUNDS
    assert s.protected_lost == r.protected_lost == 1 and s.lost_pkts == 1
    assert p.sender_stats()["forced_sent"] == 1 and p.receiver_stats()["forced_received"] == 1
    check_values(g, r)


def deadline_forces_completion(make):
    _g, batch, tags = message(100)
    p0 = int(np.flatnonzero(tags.drop_prec == 0)[0])
    p = make(faults={"drop": lambda k: not k.probe and k.seq == p0}, send_cfg={"r_max": 100, "deadline_ms": 150})
    s, r = p.exchange(batch)
    assert s.forced and r.forced and r.protected_lost == 1
    assert 0.15 <= p.elapsed() < 2.0


def loss_duplication_and_reordering(make):
    g, batch, _tags = message(2000, seed=3)
    p = make(faults={"loss": 0.03, "dup": 0.1, "reorder": True})
    s, r = p.exchange(batch)
    assert not s.forced and r.protected_lost == 0
    assert r.lost_pkts <= 20 and s.lost_pkts == r.lost_pkts == int((~r.received).sum())
    assert p.receiver_stats()["duplicates"] > 0
    check_values(g, r)


def lost_probe_is_sent_again_in_the_same_round(make):
    _g, batch, _tags = message(100)
    p = make(faults={"drop": lambda k: k.probe and k.transmission == 0}, send_cfg={"probe_rto_ms": 30})
    s, r = p.exchange(batch)
    assert p.elapsed() >= 0.03  # waited for the PROBE timeout
    assert (s.rounds, s.retx_pkts, s.forced) == (1, 0, False) and r.received.all()
    st = p.sender_stats()
    assert st["probe_timeouts"] == 1 and st["probes_sent"] == 2


def lost_bitmap_is_answered_again(make):
    # the BITMAP of round 1 never arrives: the re-probe gets the same BITMAP, the message finishes
    g, batch, tags = message(200)
    p0 = int(np.flatnonzero(tags.drop_prec == 0)[0])
    p = make(
        faults={
            "drop": lambda k: not k.probe and k.seq == p0 and k.transmission == 0,
            "drop_control": lambda f: f.type_name == "BITMAP" and f.index == 0,
        },
        send_cfg={"probe_rto_ms": 20},
    )
    s, r = p.exchange(batch)
    assert (s.rounds, s.retx_pkts, s.forced, s.lost_pkts) == (2, 1, False, 0) and r.received.all()
    assert p.sender_stats()["probe_timeouts"] >= 1 and p.receiver_stats()["duplicate_probes"] >= 1
    np.testing.assert_array_equal(r.values, g)


def lost_stop_is_answered_again(make):
    _g, batch, _tags = message(100)
    p = make(faults={"drop_control": lambda f: f.type_name == "STOP" and f.index == 0}, send_cfg={"probe_rto_ms": 20})
    s, r = p.exchange(batch)
    assert (s.rounds, s.forced, s.lost_pkts) == (1, False, 0) and not r.forced
    assert p.sender_stats()["probe_timeouts"] >= 1 and p.receiver_stats()["duplicate_probes"] >= 1
    assert p.elapsed() < 0.5  # the re-probe's STOP, long before the deadline's FORCE_STOP (2 s)


def queued_data_holds_its_probe_back(make):
    # everything 60 ms in a queue (the PROBE too, behind the data): one answer, after the data; the
    # PROBE timeouts this causes are re-probes, not rounds
    g, batch, _tags = message(200)
    p = make(faults={"hold_s": 0.06}, send_cfg={"r_max": 1, "probe_rto_ms": 10})
    s, r = p.exchange(batch)
    assert (s.rounds, s.retx_pkts, s.forced, s.lost_pkts) == (1, 0, False, 0)
    st = p.sender_stats()
    assert st["probe_timeouts"] >= 2 and st["probes_sent"] == 1 + st["probe_timeouts"]
    rs = p.receiver_stats()
    assert rs["premature_bitmaps"] == 0 and rs["drops"].get("late", 0) == 0
    np.testing.assert_array_equal(r.values, g)


def premature_bitmap_backs_off_quiet_time(make):
    # data on a path 40 ms slower than the PROBE's: with a 2 ms quiet time the receiver asks for
    # packets that are only late; it must notice and wait longer
    g, batch, _tags = message(200)
    p = make(faults={"data_lag_s": 0.04}, recv_cfg={"probe_quiet_ms": 2}, send_cfg={"r_max": 10})
    s, r = p.exchange(batch)
    st = p.receiver_stats()
    assert st["premature_bitmaps"] >= 1 and st["quiet_ms"]["0"] > 2
    assert not s.forced and r.protected_lost == 0 and r.lost_pkts <= 2
    check_values(g, r)


def reliable_mode_recovers_everything(make):
    g, batch, _ = message(1000)
    p = make(faults={"loss": 0.05}, send_cfg={"reliable": True, "r_max": 10})
    s, r = p.exchange(batch)
    assert s.lost_pkts == 0 and r.received.all() and s.retx_pkts > 0
    np.testing.assert_array_equal(r.values, g)


def layer_budget_override(make):
    _g, batch, tags = message(1000)
    victims = set(np.flatnonzero(tags.drop_prec > 0)[:5].tolist())
    p = make(
        faults={"drop": lambda k: not k.probe and k.seq in victims and k.transmission == 0},
        send_cfg={"layer_budgets": {"3": 0.0}},
    )
    s, r = p.exchange(batch, info=SendInfo(rec_msg_id=7, layer_first=2, layer_last=4))
    assert s.lost_pkts == 0 and s.retx_pkts == 5 and r.received.all()


def iteration_cap_limits_later_messages(make):
    # p_msg 5 % would allow 50 of 1000; the 2 % iteration cap allows 20 per iteration and source
    victims = {}
    p = make(
        faults={"drop": lambda k: not k.probe and k.transmission == 0 and k.seq in victims.get(k.msg_id, ())},
        send_cfg={"loss_budget": 0.05},
        recv_cfg={"iter_budget": 0.02},
    )
    lost = []
    for msg_id in (1, 2, 3):
        _g, batch, tags = message(1000, msg_id=msg_id, seed=msg_id)
        victims[msg_id] = set(np.flatnonzero(tags.drop_prec > 0)[:30].tolist())
        s, _r = p.exchange(batch, msg_id=msg_id)
        lost.append(s.lost_pkts)
    assert lost == [20, 20, 20]  # floor(0.02 * 1000) - 0, (40 - 20), (60 - 40)
    _g, batch, _ = message(1000, msg_id=4, it=1)
    s, _r = p.exchange(batch, it=1, msg_id=4)  # a new iteration starts with a fresh cap
    assert s.lost_pkts == 0


def budget_rounds_down(make):
    # 1 % of 99 packets is 0.99: no loss allowed; of 100 packets, exactly 1
    for n, allowed in ((99, 0), (100, 1)):
        _g, batch, tags = message(n, msg_id=n)
        victims = set(np.flatnonzero(tags.drop_prec > 0)[:2].tolist())
        p = make(faults={"drop": lambda k, v=victims: not k.probe and k.seq in v and k.transmission == 0})
        s, _r = p.exchange(batch, msg_id=n)
        assert (s.lost_pkts, s.retx_pkts, s.rounds) == (allowed, 2 - allowed, 2), n


def one_packet_message(make):
    g, batch, _tags = message(
        1,
        tags=Tags(
            prio=np.array([3], np.uint8),
            drop_prec=np.array([3], np.uint8),
            mag_class=np.array([8], np.uint8),
            layer_id=np.zeros(1, np.uint16),
        ),
    )
    p = make(faults={"drop": lambda k: not k.probe and k.transmission == 0})
    s, r = p.exchange(batch)
    assert (s.lost_pkts, s.retx_pkts, s.rounds, s.forced) == (0, 1, 2, False)  # floor(0.01 * 1) = 0
    np.testing.assert_array_equal(r.values, g)


def explicit_zero_budget_and_all_protected(make):
    n = 300
    tags = Tags(
        prio=np.full(n, 4, np.uint8),
        drop_prec=np.zeros(n, np.uint8),
        mag_class=np.full(n, 8, np.uint8),
        layer_id=np.zeros(n, np.uint16),
    )
    _g, batch, _ = message(n, tags=tags)
    p = make(faults={"loss": 0.05})
    s, r = p.exchange(batch, info=SendInfo(rec_msg_id=7, budget=0.0))
    assert s.lost_pkts == 0 and r.received.all() and s.retx_pkts > 0 and not s.forced


def feedback_lost_window_collapses_but_message_completes(make):
    # no FEEDBACK ever reaches the sender: every horizon its window halves, down to one packet per
    # horizon, and the PROBE rounds still finish the message
    _g, batch, _ = message(40)
    p = make(faults={"drop_control": lambda f: f.type_name == "FEEDBACK"}, send_cfg={"cc": "dctcp"})
    s, r = p.exchange(batch)
    assert not s.forced and r.received.all()
    (cc,) = p.sender_stats()["cc"].values()
    assert cc["reductions_loss"] >= 3 and cc["delivered"] == 0 and cc["cwnd"] <= 1.25


SCENARIOS = [
    lossless,
    budget_exact_lowest_drop_precedence_recovered,
    protected_always_recovered,
    protected_retried_up_to_r_max,
    forced_message_still_recovers_its_protected_packets,
    forced_gives_up_a_protected_packet_only_at_its_final_round,
    deadline_forces_completion,
    loss_duplication_and_reordering,
    lost_probe_is_sent_again_in_the_same_round,
    lost_bitmap_is_answered_again,
    lost_stop_is_answered_again,
    queued_data_holds_its_probe_back,
    premature_bitmap_backs_off_quiet_time,
    reliable_mode_recovers_everything,
    layer_budget_override,
    iteration_cap_limits_later_messages,
    budget_rounds_down,
    one_packet_message,
    explicit_zero_budget_and_all_protected,
    feedback_lost_window_collapses_but_message_completes,
]
