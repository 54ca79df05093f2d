"""The newer systems' transport rules without I/O (docs/bounded-loss.md): receiver-initiated closes
(OptiReduce's adaptive time-out, LTP's Early Close), the sender's incast bound (OptiReduce's
dynamic incast) and a schedule's budget (DBLP), on the virtual-time network and on the cores."""

from __future__ import annotations

import math

import numpy as np
import pytest
from transport_scenarios import VPP, VirtualPair, message

from dlcp.settings import ConfigError
from dlcp.transport.api import SendInfo, TransportConfig
from dlcp.transport.core.close import EarlyClose, TimeoutClose
from dlcp.transport.core.incast import IncastWindow
from dlcp.transport.core.outputs import DataSend
from dlcp.transport.core.sender import SenderCore


def exchanges(p: VirtualPair, n: int, faults_for=None, n_pkts=100):
    """`n` iterations of the same message (msg_id 7) from rank 0 to rank 1: (SendResult, RecvResult,
    seconds) each. `faults_for(it)`: the drop/delay predicates of that iteration (None: clean)."""
    out = []
    for it in range(n):
        p.net.faults.drop, p.net.faults.delay = (faults_for(it) if faults_for else (None, None)) or (None, None)
        _g, batch, _tags = message(n_pkts, seed=it, it=it)
        s, r = p.exchange(batch, SendInfo(rec_msg_id=7), it=it)
        out.append((s, r, p.elapsed()))
    return out


def droppable(n_pkts=100, it=0):
    _g, _b, tags = message(n_pkts, seed=it, it=it)
    return set(np.flatnonzero(tags.drop_prec > 0).tolist()), set(np.flatnonzero(tags.drop_prec == 0).tolist())


# --- OptiReduce's adaptive time-out ---------------------------------------------------------------------


def test_timeout_close_waits_for_its_window_then_cuts_a_straggling_tail():
    p = VirtualPair({}, {}, {"close": "timeout", "close_timeout_window": 5})
    late = sorted(droppable(it=5)[0])[:8]

    def faults(it):  # iteration 5: eight droppable packets 0.5 s late on a slower path
        return (None, (lambda k: 0.5 if (not k.probe and k.seq in late) else 0.0)) if it == 5 else None

    runs = exchanges(p, 6, faults)
    clean = [t for _s, _r, t in runs[:5]]
    s, r, t = runs[5]
    assert all(x.lost_pkts == 0 and not x.forced for x, _r, _t in runs[:5])
    assert not s.forced and not r.forced and r.protected_lost == 0
    assert s.lost_pkts == r.lost_pkts == 8 and not r.received[late].any()
    timeout = np.percentile(clean, 95)  # the window: the five clean iterations
    assert t < 0.1 and t == pytest.approx(timeout, rel=0.5)  # closed at about the time-out, not after 0.5 s
    assert p.receiver_stats()["closed_by_receiver"] == 1


def test_timeout_close_never_gives_up_a_protected_packet():
    p = VirtualPair({}, {}, {"close": "timeout", "close_timeout_window": 3})
    late = sorted(droppable(it=3)[1])[:2]  # two protected packets late

    def faults(it):
        return (
            (None, (lambda k: 0.3 if (not k.probe and k.seq in late and k.transmission == 0) else 0.0))
            if it == 3
            else None
        )

    s, r, _t = exchanges(p, 4, faults)[3]
    assert r.received.all() and r.protected_lost == 0 and s.retx_pkts == 2 and not s.forced  # recovered, not cut
    assert p.receiver_stats()["closed_by_receiver"] == 0


def test_timeout_is_the_percentile_of_the_messages_recent_completions():
    rule = TimeoutClose(pctl=50, window=3, slack=2.0, wall_offset_s=0.0)

    class St:  # what the rule reads of a finished message
        def __init__(self, start_s):
            self.key, self.start_us, self.n_pkts = (0, 1, 2, 7), int(start_s * 1e6), 10

    assert rule.timeout((0, 1, 2, 7)) == math.inf
    for start, end in ((0.0, 1.0), (2.0, 5.0), (6.0, 8.0)):
        rule.finished(St(start), 0, False, end)
    assert rule.timeout((0, 9, 2, 7)) == pytest.approx(2.0 * 2.0)  # median of 1, 3, 2 s, x slack; any iteration
    assert rule.timeout((1, 9, 2, 7)) == math.inf  # another source: its own history


# --- LTP's Early Close ----------------------------------------------------------------------------------


def test_early_close_bound_follows_the_missing_share():
    rule = EarlyClose(lo=0.01, hi=0.2, gain=2.0, quiet_of=lambda src: 0.002)

    class St:
        key, n_pkts = (3, 0, 1, 7), 100

    assert rule.bound(3) == 0.01  # nothing seen: the least bound
    rule.finished(St(), 10, False, 0.0)  # 10 % missed their first round
    assert rule.bound(3) == pytest.approx(0.2)  # 2 x 10 %, capped at 20 %
    for _ in range(20):
        rule.finished(St(), 0, False, 0.0)
    assert rule.bound(3) == pytest.approx(0.01)  # a clean network brings it back to the floor


def test_early_close_stops_waiting_for_a_stalled_droppable_tail():
    p = VirtualPair({}, {}, {"close": "early", "close_early_max": 0.2, "close_early_min": 0.0})
    drop_first = sorted(droppable(it=0)[0])[:10]
    late = sorted(droppable(it=3)[0])[:6]

    def faults(it):
        if it < 3:  # 10 % of the packets early-dropped: the bound rises to 2 x 10 %
            return (lambda k: not k.probe and k.transmission == 0 and k.seq in drop_first), None
        return None, (lambda k: 0.4 if (not k.probe and k.seq in late) else 0.0)

    runs = exchanges(p, 4, faults)
    s, r, t = runs[3]
    assert t < 0.05 and not s.forced and r.protected_lost == 0 and r.lost_pkts == 6  # did not wait 0.4 s
    assert p.receiver_stats()["closed_by_receiver"] >= 1
    assert all(x.protected_lost == 0 for x, _r, _t in runs)


def test_early_close_in_a_clean_network_waits_for_everything():
    p = VirtualPair({}, {}, {"close": "early", "close_early_max": 0.2})
    runs = exchanges(p, 3)
    assert all(s.lost_pkts == 0 and r.received.all() for s, r, _t in runs)


def test_close_settings_are_checked():
    with pytest.raises(ConfigError, match="close_early_min: 0.3 is above close_early_max 0.1"):
        TransportConfig(close="early", close_early_min=0.3)
    with pytest.raises(ConfigError, match="dlcp.close"):
        TransportConfig(close="sometimes")


# --- OptiReduce's (dynamic) incast ----------------------------------------------------------------------


def _sender(**cfg):
    return SenderCore(TransportConfig(rank=1, values_per_pkt=VPP, cc="none", **cfg))


def _dst_order(core, dsts, now=0.0):
    for i, d in enumerate(dsts):
        _g, batch, _t = message(20, seed=i, msg_id=i, src=1)
        core.send(d, batch, SendInfo(rec_msg_id=i), now)
    order = []
    while (tx := core.poll_transmit(now)) is not None:
        if isinstance(tx, DataSend):
            order.append(tx.dst)
    return order


def test_without_a_bound_every_destination_takes_turns():
    order = _dst_order(_sender(), [0, 2, 3])
    assert order[:3] == [0, 2, 3]  # one slice each, in turn


def test_incast_one_sends_to_one_destination_at_a_time_starting_after_its_rank():
    core = _sender(incast=1)
    core._slice = lambda st, paced: 5  # several slices per message: turns would interleave them
    order = _dst_order(core, [0, 2, 3])
    runs = [d for i, d in enumerate(order) if i == 0 or order[i - 1] != d]
    assert runs == [2, 3, 0]  # rank 1 starts at rank 2 and wraps around


def test_adaptive_incast_grows_when_clean_and_halves_when_lossy():
    w = IncastWindow(rank=0, limit=8, adaptive=True)
    assert w.k == 2
    for _ in range(20):
        w.finished(True)
    assert 4 < w.k <= 8
    k = w.k
    w.finished(False)  # fewer than k messages since the last cut? the first cut comes at once here
    w.finished(False)
    assert w.k == pytest.approx(k / 2) and w.cuts == 1  # at most once per k messages
    for _ in range(100):
        w.finished(False)
    assert w.k == 1.0


def test_retransmissions_pass_the_incast_bound():
    w = IncastWindow(rank=0, limit=1, adaptive=False)
    assert w.admits(1, [1, 2], retx=False)
    assert not w.admits(2, [1, 2], retx=False)
    assert w.admits(2, [1, 2], retx=True)
    assert w.admits(2, [2], retx=False)  # 1 has nothing queued any more: 2's turn


# --- a schedule's budget (DBLP) ------------------------------------------------------------------------


def test_set_budget_replaces_loss_budget_and_the_receivers_cap_lowers_it():
    victims = sorted(droppable(200)[0])[:10]  # 5 % of 200 packets lost at the first transmission
    drop = {"drop": lambda k: not k.probe and k.transmission == 0 and k.seq in victims}
    p = VirtualPair(drop, {"loss_budget": 0.01, "iter_budget": 1.0}, {"iter_budget": 1.0})
    p.a.endpoint.sender.set_budget(0.1)
    _g, batch, _t = message(200)
    s, _r = p.exchange(batch)
    assert s.lost_pkts == 10 and s.retx_pkts == 0  # 10 % allowed: nothing retransmitted
    p.b.endpoint.receiver.set_budget_cap(0.02)
    _g, batch, _t = message(200, it=1)
    s, _r = p.exchange(batch, it=1)
    assert s.lost_pkts == 4 and s.retx_pkts == 6  # the receiver allows 2 % of 200
