"""The C receive path (dlcp/transport/c/rx_core.h through the UDP driver's extension, and the mirror
dlcp/transport/rx_mirror.py) against the Python receiver it stands in for.

- Every protocol scenario of transport_scenarios.py on the virtual network, with the receiver
  taking every datagram through ReceiverCore.on_datagram and through the C path: the same results,
  statistics, records and simulated times, to the bit.
- Random datagram streams (several senders and messages, reordered, duplicated, CE-marked, waits
  above and below the host-mark time, telemetry, RETX, short last packets, PROBEs, FORCE_STOP, every
  kind of malformed packet, stale iterations) into a receiver alone and into one behind the C path:
  the same outputs after every event, the same next timer before any take, and the same receiver
  state at the end; in both C modes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from transport_scenarios import SCENARIOS, VirtualCPair, VirtualPair, rx_path_or_skip

from dlcp.transport.api import TransportConfig
from dlcp.transport.core.endpoint import Endpoint
from dlcp.transport.core.outputs import FrameSend, RecvDone
from dlcp.transport.core.waits import N_BINS
from dlcp.transport.rx_mirror import ROWS, RX_DECIDE, RX_TAKEN, RX_UP, RxMirror
from dlcp.wire import control_frames as CF
from dlcp.wire.header import (
    FLAG_TELEMETRY,
    PHASE_PUSH,
    TELEMETRY_LEN,
    TYPE_DATA,
    TYPE_RETX,
    DlcpHeader,
    Probe,
    pack_probe,
    probe_header,
)


@pytest.fixture(scope="module")
def rxpath():
    return rx_path_or_skip()


def test_constants_agree(rxpath):
    assert (rxpath.RX_UP, rxpath.RX_TAKEN, rxpath.RX_DECIDE) == (RX_UP, RX_TAKEN, RX_DECIDE)
    assert rxpath.ROW_LEN == 12 and rxpath.WAIT_AREA == 4 + N_BINS
    from dlcp.transport.udpio import RECV_SLOT

    assert rxpath.RECV_SLOT == RECV_SLOT and ROWS >= 1


# --- every scenario, on the virtual network, through both paths ------------------------------------


def _run_scenario(pair_cls, scenario) -> list:
    made = []

    def make(faults=None, send_cfg=None, recv_cfg=None):
        p = pair_cls(faults or {}, send_cfg or {}, recv_cfg or {})
        made.append(p)
        return p

    scenario(make)
    return [
        {
            "now": p.net.now,
            "sender": p.sender_stats(),
            "receiver": p.receiver_stats(),
            "rows": p.a.rows + p.b.rows,
            "received": {k: (r.values.tobytes(), r.received.tobytes(), r.lost_pkts) for k, r in p.b.received.items()},
            "counters": dict(p.net.counters),
        }
        for p in made
    ]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__)
def test_scenario_results_are_the_same_through_the_c_path(rxpath, scenario):
    assert _run_scenario(VirtualCPair, scenario) == _run_scenario(VirtualPair, scenario)


# --- random datagram streams -----------------------------------------------------------------------

VPP = 6
JOB = 1


class _Python:
    """The receiver alone: every datagram through on_datagram."""

    def __init__(self, cfg):
        self.ep = Endpoint(cfg, peers=(0, 1, 2))
        self.rx = self.ep.receiver

    def datagram(self, data, ecn, now, queued):
        self.rx.on_datagram(memoryview(data), ecn, now, queued)

    def sync(self):
        pass


class _C(_Python):
    """The receiver behind the C path, driven as the drivers drive it."""

    def __init__(self, cfg, rxpath, mode, starts_delays=False):
        super().__init__(cfg)
        self.path = rxpath.RxPath()
        self.m = RxMirror(self.rx, self.path, mode, starts_delays)
        self.codes = {RX_UP: 0, RX_TAKEN: 0, RX_DECIDE: 0}

    def datagram(self, data, ecn, now, queued):
        r = self.path.feed(data, ecn, now, queued)
        self.codes[r] += 1
        if r == RX_DECIDE:
            self.m.decide(self.path.DecideSrc(), now)
        elif r == RX_UP:
            self.m.datagram(memoryview(data), ecn, now, queued)

    def sync(self):
        self.m.take()


def _outputs(side) -> list:
    out = []
    for o in side.ep.take_outputs():
        if isinstance(o, FrameSend):
            out.append(("frame", o.peer, o.channel, bytes(o.data)))
        elif isinstance(o, RecvDone):
            r = o.result
            out.append(("done", o.key, r.values.tobytes(), r.received.tobytes(), r.lost_pkts, r.forced, r.rounds))
    return out


def _state(side) -> dict:
    side.sync()
    rx = side.rx
    msgs = {}
    for key, st in rx._rx.items():
        msgs[key] = {
            k: getattr(st, k)
            for k in (
                "n_received",
                "retx",
                "dups",
                "n_orig",
                "first_t",
                "last_t",
                "orig_last_t",
                "last_len",
                "first_byte_us",
                "start_us",
                "rounds",
                "probe_round",
                "answered",
                "req_left",
            )
        }
        msgs[key]["buf"] = st.buf.tobytes()
        msgs[key]["received"] = bytes(st.received)
        msgs[key]["recv_us"] = None if st.recv_us is None else st.recv_us.tolist()
    return {
        "msgs": msgs,
        "sources": {
            s: (v.rcvd, v.ce, v.reported, v.key, v.n_pkts, v.seq, v.due, v.want, v.first_t, v.last_t, v.span, v.gap)
            for s, v in rx._sources.items()
        },
        "totals": dict(rx.totals),
        "drops": dict(rx.drops),
        "stats": rx.stats(),
        "waits": (list(rx.socket_wait.bins), rx.socket_wait.count, rx.socket_wait.max_s),
        "rows": rx.rows,
        "chunks": [
            {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in c.items()} for c in rx.packet_chunks
        ],
        "quiet": dict(rx._quiet_s),
    }


def _packet(src, it, msg, n, values, seq, typ=TYPE_DATA, flags=0, cut=0, **kw) -> bytes:
    h = {"type": typ, "prio": 2, "phase": PHASE_PUSH, "job_id": JOB, "src_rank": src, "iter": it, "msg_id": msg}
    h.update(n_pkts=n, seq=seq, offset=seq * VPP, flags=flags)
    h.update(kw)
    tel = bytes(TELEMETRY_LEN) if h["flags"] & FLAG_TELEMETRY else b""
    data = DlcpHeader(**h).pack() + tel + values[seq * VPP : (seq + 1) * VPP].tobytes()
    return data[: len(data) - cut] if cut else data


def _message_events(rng, src: int, it: int, msg: int, n: int, values) -> list:
    """One message's events in its order: DESCRIBE (mostly), data (some lost, reordered, duplicated,
    CE-marked, telemetry, RETX, with socket waits), malformed copies, the PROBE, late RETX, maybe a
    FORCE_STOP."""

    def pkt(seq, *a, **kw):
        return _packet(src, it, msg, n, values, seq, *a, **kw)

    dp = rng.integers(0, 4, n).astype(np.uint8)
    describe = CF.encode(
        CF.Control(
            CF.DESCRIBE,
            JOB,
            src,
            3,
            PHASE_PUSH,
            it,
            msg,
            n,
            n_values=len(values),
            prio=2,
            budget_ppm=int(rng.choice([0, 50_000, 200_000])),
            drop_prec=dp,
            feedback=bool(rng.random() < 0.8),
        )
    )[CF.LEN.size :]
    order = rng.permutation(n) if rng.random() < 0.5 else np.arange(n)
    lost = set(rng.choice(n, size=int(rng.integers(0, max(1, n // 8) + 1)), replace=False).tolist())
    mine: list = [("c", describe)] if rng.random() < 0.9 else []
    for seq in order.tolist():
        if seq in lost:
            continue
        ecn = int(rng.choice([0, 2, 3], p=[0.3, 0.5, 0.2]))
        queued = float(rng.choice([0.0, 1e-7, 3e-5, 2e-3, 7e-3]))
        flags = FLAG_TELEMETRY if rng.random() < 0.1 else 0
        typ = TYPE_RETX if rng.random() < 0.1 else TYPE_DATA
        mine.append(("d", pkt(seq, typ, flags), ecn, queued))
        if rng.random() < 0.05:  # a duplicate
            mine.append(("d", pkt(seq, typ, flags), ecn, queued))
        if rng.random() < 0.08:  # something malformed of this message
            bad = [
                {"offset": seq * VPP + 1},
                {"n_pkts": n + 1},
                {"typ": 5},
                {"cut": 3},
                {"phase": 7},
                {"src_rank": 9},
                {"job_id": 2},
                None,  # shorter than a header
            ][int(rng.integers(0, 8))]
            mine.append(("d", pkt(seq)[:10] if bad is None else pkt(seq, **bad), 0, 0.0))
    probe = pack_probe(
        probe_header(DlcpHeader(phase=PHASE_PUSH, job_id=JOB, src_rank=src, iter=it, msg_id=msg, n_pkts=n), 1),
        Probe(round=1, round_pkts=n),
    )
    mine.insert(int(rng.integers(max(0, len(mine) - 3), len(mine) + 1)), ("d", probe, 0, 0.0))
    for seq in sorted(lost)[: int(rng.integers(0, len(lost) + 1))]:  # some arrive late, as RETX
        mine.append(("d", pkt(seq, TYPE_RETX), 2, 0.0))
    if rng.random() < 0.2:
        mine.append(("c", CF.encode(CF.Control(CF.FORCE_STOP, JOB, src, 3, PHASE_PUSH, it, msg, n, round=2))[4:]))
    return mine


def _stream(seed: int) -> list:
    """Events: ("d", bytes, ecn, queued) datagrams, ("c", body) control frames, ("t",) a timer check,
    ("a", iteration) advance; nine messages of three senders interleaved at random, each in its order."""
    rng = np.random.default_rng(seed)
    events = []
    for src in (0, 1, 2):
        for m in range(3):
            n = int(rng.integers(1, 40))
            values = rng.standard_normal((n - 1) * VPP + int(rng.integers(1, VPP + 1))).astype(np.float32)
            events.append(_message_events(rng, src, int(rng.integers(0, 2)), 10 * src + m, n, values))
    out = []
    heads = [0] * len(events)
    while any(h < len(e) for h, e in zip(heads, events)):
        i = int(rng.choice([j for j, e in enumerate(events) if heads[j] < len(e)]))
        out.append(events[i][heads[i]])
        heads[i] += 1
        if rng.random() < 0.1:
            out.append(("t",))
        if rng.random() < 0.003:
            out.append(("a", int(rng.integers(0, 5))))
    return out


@pytest.mark.parametrize("mode", ["c", "c-per-datagram", "c, delays in C", "c-per-datagram, delays in C"])
@pytest.mark.parametrize("seed", range(12))
def test_random_streams_leave_the_receiver_as_python_does(rxpath, mode, seed):
    cfg = TransportConfig(
        rank=3, job_id=JOB, values_per_pkt=VPP, feedback_every=int(3 + seed % 5), per_packet=seed % 2 == 0
    )
    starts_delays = mode.endswith(", delays in C")
    mode = mode.split(",")[0]
    py, c = _Python(cfg), _C(cfg, rxpath, mode, starts_delays)
    now = 0.0
    for ev in _stream(seed):
        now += 5e-5
        for side in (py, c):
            kind = ev[0]
            if kind == "d":
                side.datagram(ev[1], ev[2], now, ev[3])
            elif kind == "c":
                side.sync()
                side.ep.on_control(ev[1], "conn", now)
                if side is c:
                    c.m.publish(scan=True)
            elif kind == "t":
                side.sync()
                if side.ep.next_timer() <= now:
                    side.ep.on_timer(now)
                if side is c:
                    c.m.publish()
            else:
                side.sync()
                side.rx.advance(ev[1])
                if side is c:
                    c.m.publish()
        # C's deltas may still wait (as on ns-3): the core's timer must not depend on them, unless
        # C starts the FEEDBACK delays (the UDP driver takes before it reads the timers)
        if starts_delays:
            c.sync()
        t_py, t_c = py.ep.next_timer(), c.ep.next_timer()
        assert t_py == t_c or (math.isinf(t_py) and math.isinf(t_c)), (ev[0], t_py, t_c)
        assert _outputs(c) == _outputs(py), ev[0]
    assert _state(c) == _state(py)
    taken = c.codes[RX_TAKEN] + c.codes[RX_DECIDE]
    if mode == "c":  # short messages, small FEEDBACK batches and much malformed: still C took a good part
        assert taken > sum(c.codes.values()) / 4, c.codes
    else:  # the packets on which FEEDBACK may act went up whole
        assert c.codes[RX_DECIDE] == 0 and c.codes[RX_TAKEN] > 0, c.codes
    if starts_delays and mode == "c":  # C started the delays: it stopped only where a FEEDBACK went out
        assert c.path.timings()["decisions"] <= c.rx.totals["feedback_sent"], c.codes
