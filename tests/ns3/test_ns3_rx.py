"""The simulated hosts' receive path in C++ (simulation/ns3/cpp/dlcp_rx.h) against the Python
receiver it stands in for: one host sends another hand-made datagrams through a real simulated
switch (in order, out of order, a duplicate, a lost chunk, a RETX, a CE mark, a short last packet,
malformed ones, a late one after the message ended) and control frames on a real control
connection (DESCRIBE asking for FEEDBACK every few packets); the receiver's whole state at the end
(counters, drops, FEEDBACK state, the finished message's values and bitmap, the open message's
buffers) must be the same with every datagram going up to Python (DLCP_SIM_RX=python), with
the C++ path in its default per-datagram mode (cpp), and with it counting up to the FEEDBACK
decisions (c), and the C++ path must have taken most data packets. Each
simulation runs in a child process (one simulator per process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ns3_scripts import STAR3_NETWORK

from simulation.ns3.hosts import core_missing
from simulation.ns3.loader import available

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.skipif(
        available() is not None or core_missing() is not None, reason=str(available() or core_missing())
    ),
]

VPP = 8  # values per packet: small packets, every value checked

SCRIPT = (
    r"""
import hashlib, json
import numpy as np
from dlcp.experiment import config as C
from dlcp.network import topology as T
from dlcp.transport.api import TransportConfig
from dlcp.wire import control_frames as CF
from dlcp.wire.header import (DlcpHeader, Probe, pack_probe, probe_header, tos_of, FLAG_TELEMETRY, PHASE_PUSH,
                              TELEMETRY_LEN, TYPE_DATA, TYPE_RETX)
from simulation.ns3 import loader
from simulation.ns3.hosts import HostStack, ip_int, transport_config
from simulation.ns3.network import build_network

VPP = __VPP__
"""
    + STAR3_NETWORK
    + r"""
stack = HostStack(ns, net, d["data_port"], d["control_port"], cfg["links"]["host_queue_pkts"])
done = []
hosts = []
for rank, name in enumerate(("h1", "h2")):
    tcfg = transport_config(TransportConfig, {**d, "feedback_every": 4, "iter_budget": 1.0}, rank=rank, job_id=1,
                            ip=spec.hosts[name].ip, host=name, values_per_pkt=VPP)
    hosts.append(stack.add(name, rank, tcfg, lambda h, key, res: None,
                           lambda h, key, res: done.append((key, res))))
h1, h2 = hosts
dst = ip_int(spec.hosts["h2"].ip)
rng = np.random.default_rng(7)
N_A, LAST_A = 12, 5  # message A: 12 packets, 5 values in the last
values_a = rng.standard_normal((N_A - 1) * VPP + LAST_A).astype(np.float32)
values_b = rng.standard_normal(4 * VPP).astype(np.float32)


def pkt(msg, n, seq, values, typ=TYPE_DATA, **kw):
    h = dict(type=typ, prio=1, phase=PHASE_PUSH, job_id=1, src_rank=0, iter=0, msg_id=msg, n_pkts=n, seq=seq,
             offset=seq * VPP)
    h.update(kw)
    tel = bytes(TELEMETRY_LEN) if h.get("flags", 0) & FLAG_TELEMETRY else b""  # the switch fills it in
    return DlcpHeader(**h).pack() + tel + values[seq * VPP:(seq + 1) * VPP].tobytes()


A = lambda seq, **kw: pkt(1, N_A, seq, values_a, **kw)
B = lambda seq, **kw: pkt(2, 4, seq, values_b, **kw)
describe = CF.encode(CF.Control(CF.DESCRIBE, 1, 0, 1, PHASE_PUSH, 0, 1, N_A, n_values=len(values_a), prio=1,
                                budget_ppm=100_000, drop_prec=np.ones(N_A, np.uint8), feedback=True))  # may lose 1 of 12
probe = pack_probe(probe_header(DlcpHeader(phase=PHASE_PUSH, job_id=1, src_rank=0, msg_id=1, n_pkts=N_A), 1),
                   Probe(round=1, round_pkts=N_A))
ce = tos_of(1, 0) | 3
plan = [  # (datagram or control frame, tos); 9 of A is lost (until after the STOP), 2 of A comes twice
    A(0), "DESCRIBE", A(1), A(2), B(0), A(4), A(3), A(2),
    A(5, offset=5 * VPP + 1), A(5, n_pkts=N_A + 1), A(5, typ=5), A(5)[:-4], A(5, phase=7), A(12),
    A(5, src_rank=9), A(5, job_id=2), (A(5), ce), (B(2), ce), (B(1), ce), A(6, typ=TYPE_RETX), (A(8), ce), (A(7), ce),
    (B(3), ce),
    A(10, flags=FLAG_TELEMETRY), A(11), probe, "WAIT", A(9),
]
conn = []
t = 0.001
for item in plan:  # 100 us apart: several packets per FEEDBACK delay (0.5 ms) and per FEEDBACK (4)
    t += 0.0001
    if item == "DESCRIBE":
        def send_describe():
            conn.append(int(h1.io.Connect(dst)))
            h1.io.SendFrame(conn[0], describe)
        stack.clock.at(t, send_describe)
    elif item == "WAIT":
        t += 0.05  # the PROBE's quiet time: the receiver answers STOP (one packet lost, within budget)
    else:
        data, tos = item if isinstance(item, tuple) else (item, tos_of(1, 0))
        stack.clock.at(t, lambda data=data, tos=tos: h1.io.SendData(dst, data, tos))
ns.Simulator.Stop(ns.Seconds(t + 0.05))
ns.Simulator.Run()
stack.take_all()
rx = h2.endpoint.receiver
(key, res), = done
(st_b,) = rx._rx.values()
out = {
    "stats": h2.endpoint.stats(), "drops": dict(rx.drops), "totals": dict(rx.totals),
    "sources": {s: [v.rcvd, v.ce, v.reported, v.key, v.n_pkts, v.seq, v.due, v.first_t, v.last_t, v.batch, v.gap] for s, v in rx._sources.items()},
    "rows": rx.rows,
    "a": {"key": key, "values": res.values.tolist(), "received": res.received.tolist(), "lost": res.lost_pkts},
    "b": {k: getattr(st_b, k) for k in ("n_received", "retx", "dups", "n_orig", "first_t", "last_t", "orig_last_t",
                                         "last_len", "first_byte_us")},
    "b_received": list(st_b.received), "b_values": st_b.buf.tolist(),
    "expected_a": values_a.tolist(), "expected_b": values_b.tolist(),
    "taken_in_cpp": int(h2.io.Rx().Absorbed()), "datagrams": int(h2.io.DataReceived()),
}
print(json.dumps(out))
"""
)


def _run(mode: str) -> dict:
    p = subprocess.run(
        [sys.executable, "-c", SCRIPT.replace("__VPP__", str(VPP))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), "DLCP_SIM_RX": mode},
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_cpp_receive_path_leaves_the_receiver_as_python_does():
    py, per, cpp = _run("python"), _run("cpp"), _run("c")
    assert py["taken_in_cpp"] == 0
    # the C++ path took the packets it may: not the duplicate, the malformed or the late one; never
    # the PROBE; counting up to a FEEDBACK decision, it takes more than the per-datagram path, which
    # passes up a message's first packet and each one a FEEDBACK may come due on
    assert cpp["taken_in_cpp"] > per["taken_in_cpp"] >= 5, (cpp["taken_in_cpp"], per["taken_in_cpp"])
    assert cpp["datagrams"] == per["datagrams"] == py["datagrams"] == 26
    py.pop("taken_in_cpp"), cpp.pop("taken_in_cpp"), per.pop("taken_in_cpp")
    assert cpp == py
    assert per == py
    # and what the receiver holds is what was sent
    a, b = cpp["a"], cpp["b"]
    expected = cpp["expected_a"]
    lost = slice(9 * VPP, 10 * VPP)
    assert a["received"] == [True] * 9 + [False] + [True] * 2 and a["lost"] == 1
    assert a["values"][: lost.start] == expected[: lost.start] and a["values"][lost.stop :] == expected[lost.stop :]
    assert a["values"][lost] == [0.0] * VPP
    assert cpp["b_values"] == cpp["expected_b"] and cpp["b_received"] == [1, 1, 1, 1] and b["n_received"] == 4
    assert cpp["drops"] == {
        "offset": 1,
        "n_pkts": 1,
        "type": 1,
        "payload": 1,
        "phase": 1,
        "seq": 1,
        "src_rank": 1,
        "job_id": 1,
        "late": 1,
    }
    stats = cpp["stats"]
    assert stats["duplicates"] == 1 and stats["ce_received"] == 6 and stats["messages_received"] == 1
    (row,) = cpp["rows"]
    assert row["retx_pkts"] == 1 and row["lost_pkts"] == 1
    # every data packet that passed the header checks counted for FEEDBACK: 14 of A (the duplicate,
    # the late one and the one of a wrong n_pkts too) and 4 of B
    assert cpp["sources"]["0"][0] == 14 + 4, cpp["sources"]
