"""The ns-3 backend's network (simulation/ns3/network.py) on hand-made cases with known answers:
link rates counted on Ethernet frames, the bottleneck's tail drops, background applications, the
counter dump's shape and conservation; and its one-line errors. Each simulation runs in a child
process (ns-3's simulator is one per process). Skipped when the sim extra is absent."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

from ns3_scripts import STAR3_NETWORK

ROOT = Path(__file__).resolve().parents[2]

STAR_CBR = r"""
import json, sys
from dlcp.experiment import config as C
from dlcp.network import topology as T
from simulation.ns3 import loader
from simulation.ns3.network import build_network, add_background
cfg = C.validate({"name": "t", "topology": {"kind": "star", "hosts": 3}, "workload": {"workers": 1},
                  "dlcp": {"policy": POLICY}, "links": {"host_mbps": 50},
                  "background": [{"kind": "udp_cbr", "src": "h1", "dst": "h3", "rate_mbps": 40, "dscp": DSCP1},
                                 {"kind": "udp_cbr", "src": "h2", "dst": "h3", "rate_mbps": 40, "dscp": DSCP2}]})
spec = T.star(3, 50.0)
T.assign_roles(spec, 0, False, cfg["background"])
ns = loader.ns()
net = build_network(spec, spec.runtimes(cfg), cfg["links"], cfg["dlcp"]["data_port"])
add_background(net, cfg["background"])
ns.Simulator.Stop(ns.Seconds(0.5))
ns.Simulator.Run()
print(json.dumps({"flows": [{**f.sender_record(), "received": f.sink_record()["bytes"]} for f in net.background],
                  "s1": net.switches["s1"].counter_dump()}))
"""


def _simulate(script: str, **subs) -> dict:
    for k, v in subs.items():
        script = script.replace(k, repr(v))
    p = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_bottleneck_port_drains_at_the_link_rate_of_ethernet_frames():
    """Two 40 Mbit/s UDP flows (1400-byte payloads) into one 50 Mbit/s port for 0.5 s, fifo: the
    port sends one 1442-byte frame (1400 + UDP 8 + IPv4 20 + Ethernet 14) every 230.72 us, holds
    qmax - 1 = 63 packets behind the one on the wire, and tail-drops the rest."""
    r = _simulate(STAR_CBR, POLICY="fifo", DSCP1=0, DSCP2=0)
    s1 = r["s1"]
    assert s1["backend"] == "ns3" and s1["switch"] == "s1"
    ports = {p["port"]: p for p in s1["ports"]}
    sent = sum(f["pkts"] for f in r["flows"])
    assert ports[1]["rx_pkts"] + ports[2]["rx_pkts"] == sent - 2  # one packet per flow still on its link
    (row,) = s1["queues"]
    assert (row["port"], row["qid"], row["color"]) == (3, 0, 0)
    assert row["admitted_pkts"] + row["tail_drop_pkts"] == sent - 2 and row["early_drop_pkts"] == 0
    assert row["admitted_bytes"] == 1442 * row["admitted_pkts"]
    slot = 1442 * 8 / 50e6
    # an ns-3 OnOff source sends its first datagram one packet interval after it starts (1400 B at
    # 40 Mbit/s), which then takes IP + 2 bytes (PPP) of time on the 50 Mbit/s host link
    first_arrival = 1400 * 8 / 40e6 + (1400 + 28 + 2) * 8 / 50e6
    assert ports[3]["tx_pkts"] == int((0.5 - first_arrival) / slot) + 1
    assert ports[3]["queued_pkts"] == 63
    assert row["admitted_pkts"] == ports[3]["tx_pkts"] + ports[3]["queued_pkts"]
    # the last frame the port sent is still on its way to h3
    assert sum(f["received"] for f in r["flows"]) == 1400 * (ports[3]["tx_pkts"] - 1)
    assert s1["drops"] == {"parser_error": 0, "not_ipv4": 0, "no_route": 0, "ttl_expired": 0}
    assert s1["telemetry"]["max_enq_qdepth"] == 63


def test_strict_priority_starves_the_lower_class_at_a_bottleneck():
    """dlcp policy, the same two flows at DSCP 16 (qid 2) and DSCP 8 (qid 1): qid 2 alone sends
    40 of the port's 50 Mbit/s; qid 1 gets the rest and loses everything else at its tail."""
    r = _simulate(STAR_CBR, POLICY="dlcp", DSCP1=16, DSCP2=8)
    rows = {(q["port"], q["qid"], q["color"]): q for q in r["s1"]["queues"]}
    high, low = rows[(3, 2, 0)], rows[(3, 1, 0)]
    assert high["tail_drop_pkts"] == 0 and low["tail_drop_pkts"] > 0
    got = {f["host"]: f["received"] // 1400 for f in r["flows"]}
    assert got["h1"] >= r["flows"][0]["pkts"] - 3  # all but what is still on the way
    # the last packet the port sent is still on its way to h3
    assert got["h1"] + got["h2"] == {p["port"]: p for p in r["s1"]["ports"]}[3]["tx_pkts"] - 1


ECN_BURST = r"""
import json
import sys
sys.path.insert(0, "tests/support")
from switch_frames import runtime_doc, udp_frame
from simulation.ns3 import loader
from simulation.ns3.simulated_switch import Ns3Switch
ns = loader.compile_cpp("dlcp_switch")
sw = Ns3Switch(runtime_doc(port_cfg={2: {"rate_pps": 100}}), source="ecn")
sw.add_ports()
sw.sw.SetEcnK(2, 1, 5)  # port 2, queue 1: mark from 5 packets on
for i in range(20):
    ns.ScheduleInject(sw.obj, i * 1e-6, 1, udp_frame(dst="10.0.0.2", tos=(8 << 2) | 2))
ns.Simulator.Stop(ns.Seconds(0.5))
ns.Simulator.Run()
raw = sw.raw_counters()
print(json.dumps({"tos": [f[15] for _, _, f in sw.captured()], "ce": raw["ce_pkts"][2 * 8 + 1],
                  "frames": [f.hex() for _, _, f in sw.captured()]}))
"""


def test_ecn_marks_ect_packets_admitted_at_or_above_k():
    """20 ECT(0) packets of queue 1 back to back into a 100 packets/s port, K = 5: the first
    leaves at once, packet i (i >= 1) is admitted behind i - 1 others, so packets 6..19 leave CE
    (TOS ECN bits 3) with a still valid IPv4 checksum, and the switch counts 14 marks."""
    r = _simulate(ECN_BURST)
    assert [t & 3 for t in r["tos"]] == [2] * 6 + [3] * 14 and r["ce"] == 14
    assert all(_ipv4_checksum_ok(bytes.fromhex(f)[14:34]) for f in r["frames"])


def _ipv4_checksum_ok(header: bytes) -> bool:
    s = sum(int.from_bytes(header[i : i + 2], "big") for i in range(0, 20, 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s == 0xFFFF


CONTROL_BOTH_ENDS = (
    r"""
import json
from dlcp.experiment import config as C
from dlcp.network import topology as T
from simulation.ns3 import loader
from simulation.ns3.hosts import Clock, ip_int
from simulation.ns3.network import build_network
from dlcp.wire.header import DlcpHeader, tos_of
"""
    + STAR3_NETWORK
    + r"""
events = []
def up(index, kind, conn, data, ecn, peer):
    events.append((index, kind, int(conn), len(bytes(data))))
ns.DlcpHostIo.SetDispatcher(up)
ptrs = [ns.CreateObject["DlcpHostIo"]() for _ in range(2)]  # the Ptrs keep the objects alive
ios = [p.__deref__() for p in ptrs]
for i, (h, io) in enumerate(zip(("h1", "h2"), ios)):
    io.Setup(net.nodes[h], i, d["data_port"], d["control_port"], net.host_devices[h], 100, RTO_MIN_S)
clock = Clock(ns)
own = []
clock.at(0.001, lambda: own.append(int(ios[0].Connect(ip_int(spec.hosts["h2"].ip)))))
def answer():  # h2 writes on the connection h1 opened, then six datagrams to h1 in the same instant
    (acc,) = [c for (i, k, c, n) in events if i == 1 and k == 4]
    ios[1].SendFrame(acc, "x" * 100)
    for seq in range(6):  # DLCP data packets at priority 1
        ios[1].SendData(ip_int(spec.hosts["h1"].ip), DlcpHeader(prio=1, n_pkts=6, seq=seq).pack() + bytes(1380),
                        tos_of(1, 0))
    own.append(acc)
clock.at(0.05, answer)
ns.Simulator.Stop(ns.Seconds(0.1))
ns.Simulator.Run()
print(json.dumps({"own": list(ios[0].ConnState(own[0])), "accepted": list(ios[1].ConnState(own[1])),
                  "received": sum(n for (i, k, c, n) in events if i == 0 and k == 1),
                  "h1_order": [k for (i, k, c, n) in events if i == 0 and k in (0, 1)],
                  "queues": [[q["port"], q["qid"], q["admitted_pkts"]] for q in net.switches["s1"].counter_dump()["queues"]]}))
"""
)


def test_control_connections_go_at_priority_seven_from_both_ends_with_the_rto_floor():
    """h1 opens a control connection to h2 and h2 answers on it: the SYN-ACK and the answer (h2's
    accepted end, toward h1 = port 1) as well as h1's segments (port 2) are classified into queue 7,
    and both ends have the emulated control sockets' 10 ms RTO floor, which caps their delayed ACKs
    too (ns-3's fork of a listening socket does not carry its TOS: answers went at priority 0,
    behind background traffic). The answer reaches h1 before the datagrams h2 wrote after it, as
    Linux sends them (ns-3's TCP sends one time step after the write: a BITMAP waited behind the
    next ring step's data)."""
    from dlcp.transport.sockets import CONTROL_RTO_MIN_US

    r = _simulate(CONTROL_BOTH_ENDS, RTO_MIN_S=CONTROL_RTO_MIN_US / 1e6)
    assert r["received"] == 100
    assert r["h1_order"] == [1] + [0] * 6  # the control answer, then the six datagrams
    for end in ("own", "accepted"):
        unsent, _room, is_up, tos, rto_min_us, delack_us = r[end]
        assert (unsent, is_up, tos, rto_min_us, delack_us) == (0, 1, 0xE0, CONTROL_RTO_MIN_US, CONTROL_RTO_MIN_US)
    queues = {(p, q): n for p, q, n in r["queues"]}
    assert {(p, q) for p, q in queues if q != 1} == {(1, 7), (2, 7)}  # control in no other queue
    assert queues[(1, 7)] == 2  # the SYN-ACK and the answer
    assert queues[(1, 1)] == 6  # the datagrams


ONOFF = r"""
import json
from dlcp.experiment import config as C
from dlcp.network import topology as T
from simulation.ns3 import loader
from simulation.ns3.network import build_network, add_background
cfg = C.validate({"name": "t", "topology": {"kind": "star", "hosts": 3}, "workload": {"workers": 1},
                  "dlcp": {"policy": "fifo"}, "links": {"host_mbps": 500},
                  "background": [{"kind": "udp_onoff", "src": "h1", "dst": "h3", "rate_mbps": 400,
                                  "on_ms": 3, "off_ms": 7, "start_s": 0.05}]})
spec = T.star(3, 500.0)
T.assign_roles(spec, 0, False, cfg["background"])
ns = loader.ns()
ns.RngSeedManager.SetSeed(SEED)
net = build_network(spec, spec.runtimes(cfg), cfg["links"], cfg["dlcp"]["data_port"])
add_background(net, cfg["background"])
net.background[0].counter.keepTimes = True
ns.Simulator.Stop(ns.Seconds(0.5))
ns.Simulator.Run()
print(json.dumps({"times": list(net.background[0].counter.times), "flow": net.background[0].sender_record()}))
"""


def _bursts(times: list[float], gap_s: float) -> list[list[float]]:
    out = [[times[0]]]
    for a, b in itertools.pairwise(times):
        (out[-1].append(b) if b - a < gap_s else out.append([b]))
    return out


def test_onoff_background_offers_the_configured_bursts_from_a_seeded_phase():
    """udp_onoff at 400 Mbit/s of 1400-byte payloads, 3 ms on, 7 ms off: datagrams 28 us apart,
    107.14 per burst on average (3 ms / 28 us), one burst every 10 ms, 120 Mbit/s offered over
    whole cycles; the first burst starts start_s plus a phase within one period, which the seed
    draws (two seeds, two phases)."""
    interval, period = 1400 * 8 / 400e6, 0.010
    firsts = []
    for seed in (1, 2):
        r = _simulate(ONOFF, SEED=seed)
        t = r["times"]
        assert r["flow"]["pkts"] == len(t)
        bursts = _bursts(t, 1e-3)
        whole = bursts[1:-1]  # the last may be cut by the end of the run
        assert max(b2 - b1 for b in whole for b1, b2 in itertools.pairwise(b)) < interval + 1e-9
        assert {len(b) for b in whole} <= {107, 108}
        assert abs(sum(len(b) for b in whole) / len(whole) - 0.003 / interval) < 0.2
        starts = [b[0] for b in bursts]
        # a burst's first datagram waits what is left of the interval the last burst began
        assert all(abs(b - a - period) < interval for a, b in itertools.pairwise(starts))
        load_bps = sum(len(b) for b in whole) * 1400 * 8 / (len(whole) * period)
        assert abs(load_bps - 120e6) < 0.01 * 120e6
        assert 0.05 <= starts[0] - interval < 0.05 + period + 1e-9
        firsts.append(starts[0])
    assert abs(firsts[0] - firsts[1]) > 1e-6
