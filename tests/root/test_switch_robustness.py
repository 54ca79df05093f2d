"""The running switch under abuse: 100k random, truncated and malformed frames are all counted and
handled exactly as the pipeline model says (and the switch lives on); a port whose link is deleted
while it runs retires cleanly while the other ports keep forwarding."""

from __future__ import annotations

import random
import time

import pytest
from switch_frames import dlcp_frame, udp_frame
from switch_harness import ENGINES, PORTS, BuiltinSwitchSUT, SwitchTestbed

from dlcp.network import pipeline_names as P
from dlcp.network.runtime_file import parse_runtime
from dlcp.switch.pipeline import Pipeline
from emulation.netns import link_counters, sh

ENGINE = ENGINES[0]  # the C engine where it is built
N_FUZZ = 100_000
CHUNK = 2000
HUGE = 10**9  # thresholds no queue reaches: admission never drops, so the outcome is deterministic


@pytest.fixture(scope="module")
def bed():
    b = SwitchTestbed("rsr")
    yield b
    b.close()


def fuzz_frames(n: int, seed: int = 11) -> list[bytes]:
    """Random bytes, truncations, byte flips of valid frames, and scapy fuzz() of the DLCP stack."""
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import fuzz

    from dlcp.wire.header import scapy_layers

    DLCP, Tel = scapy_layers()
    rng = random.Random(seed)
    templates = [
        dlcp_frame(
            dst=f"10.0.{rng.randrange(2)}.{rng.randrange(1, 9)}",
            prio=p,
            drop_prec=p % 4,
            telemetry=p % 2 == 0,
            sport=rng.randrange(65536),
            ttl=rng.choice([1, 2, 64]),
        )
        for p in range(8)
    ]
    templates += [udp_frame(dst="10.0.0.3", sport=s) for s in range(4)]
    templates.append(bytes(Ether() / IP(dst="10.0.0.4") / TCP(sport=1, dport=2)))
    scapy_fuzzed = []
    for i in range(400):
        layer = fuzz(DLCP()) / fuzz(Tel()) if i % 2 else fuzz(DLCP())
        pkt = Ether() / fuzz(IP(dst=f"10.0.0.{1 + i % 8}", proto=17, ihl=5, frag=0)) / UDP(dport=9910) / layer
        scapy_fuzzed.append(bytes(pkt)[:1514])
    out = []
    for i in range(n):
        kind = i % 4
        if kind == 0:
            f = bytearray(rng.randbytes(rng.randrange(14, 1515)))
            if rng.random() < 0.5:
                f[12:14] = b"\x08\x00"
                if len(f) > 14 and rng.random() < 0.7:
                    f[14] = 0x45
        elif kind == 1:
            t = rng.choice(templates)
            f = t[: rng.randrange(14, len(t) + 1)]
        elif kind == 2:
            f = bytearray(rng.choice(templates))
            for _ in range(rng.randrange(1, 5)):
                f[rng.randrange(14, min(len(f), 80))] = rng.randrange(256)
        else:
            f = rng.choice(scapy_fuzzed)
        out.append(bytes(f))
    return out


def test_fuzz_100k_frames_counted_per_model(bed, tmp_path):
    runtime = bed.runtime(
        routes={"10.0.0.0/24": [2, 3, 4], "10.0.1.0/24": [2, None]},
        lb_mode="per_flow",
        thresholds=(HUGE, HUGE, HUGE, HUGE),
    )
    frames = fuzz_frames(N_FUZZ)
    # what the pipeline model says about every frame (admission never drops with these thresholds)
    model = Pipeline(parse_runtime(runtime))
    want_out = dict.fromkeys(PORTS, 0)
    for f in frames:
        r = model.ingress(bytearray(f), 1)
        if r is not None:
            want_out[r[0]] += 1
            model.egress(bytearray(f), r[0], r[1], -1, 0, 0, False)
    before = {k: link_counters(bed.tester_intf[k], bed.tester)["rx_packets"] for k in PORTS}
    sut = BuiltinSwitchSUT(ENGINE)
    sut.start(runtime, tmp_path)
    try:
        sock = bed.socks[1]
        sock.setblocking(True)
        for start in range(0, len(frames), CHUNK):  # paced, so no frame dies in a full socket buffer
            for f in frames[start : start + CHUNK]:
                sock.send(f)
            deadline = time.monotonic() + 10
            while sum(p["rx_pkts"] for p in sut.counters()["ports"]) < start + CHUNK and time.monotonic() < deadline:
                time.sleep(0.01)
            assert sut.alive(), "the switch died"
        time.sleep(0.2)
    finally:
        sock.setblocking(False)
        c = sut.stop()
    ports = {p["port"]: p for p in c["ports"]}
    assert ports[1]["rx_pkts"] == N_FUZZ and ports[1]["rx_kernel_drops"] == 0
    assert c["drops"] == {name: model.drops[0][i] for name, i in P.DROP_REASONS.items()}
    assert all(c["drops"].values()), c["drops"]  # every drop reason was exercised
    admitted = sum(q["admitted_pkts"] for q in c["queues"])
    assert admitted == sum(model.admitted[0]) == sum(want_out.values()) > 0
    got_out = {k: link_counters(bed.tester_intf[k], bed.tester)["rx_packets"] - before[k] for k in PORTS}
    assert got_out == want_out and {k: ports[k]["tx_pkts"] for k in PORTS} == want_out


@pytest.mark.parametrize("engine", ENGINES)
def test_deleted_link_does_not_stop_the_switch(bed, tmp_path, engine):
    # a testbed of its own: this test deletes one of its links
    own = SwitchTestbed(f"rsd{engine[0]}")
    sut = BuiltinSwitchSUT(engine)
    sut.start(own.runtime(), tmp_path)
    try:
        for dst in ("10.0.0.2", "10.0.0.3"):
            for _ in range(20):
                own.socks[1].send(dlcp_frame(dst=dst))
        time.sleep(0.3)
        sh("ip", "link", "del", own.tester_intf[3], ns=own.tester)  # takes the switch's p3 with it
        own.socks.pop(3).close()
        time.sleep(0.3)
        own.drain()
        for dst in ("10.0.0.2", "10.0.0.3"):
            for _ in range(20):
                own.socks[1].send(dlcp_frame(dst=dst))
        out = own.capture(0.5)
        assert sut.alive(), "the switch died when a port vanished"
        assert len(out[2]) == 20 and not out[3], "the other ports must keep forwarding"
        live = sut.counters()
    finally:
        c = sut.stop()
        own.close()
    assert c, "no counter dump after the port vanished"
    ports = {p["port"]: p for p in c["ports"]}
    assert ports[3]["state"] == "gone" and ports[2]["state"] == "up"
    assert ports[2]["tx_pkts"] == 40 and ports[3]["tx_pkts"] == 20
    live_ports = {p["port"]: p for p in live["ports"]}
    assert ports[3]["tx_errors"] + ports[3]["queued_pkts"] == 20 and live_ports[3]["state"] == "gone"
