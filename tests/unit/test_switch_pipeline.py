"""The built-in switch's pipeline model (no sockets): bmv2's crc16, each
table's semantics, admission control, checksums and telemetry."""

from __future__ import annotations

import random
import struct

import pytest
from switch_frames import dlcp_frame, probe_frame, runtime_doc, udp_frame

from dlcp.network import pipeline_names as P
from dlcp.network.runtime_file import parse_runtime
from dlcp.switch.hashing import crc16, five_tuple_bytes
from dlcp.switch.pipeline import Pipeline, stamp_telemetry


def pipeline(**kw) -> Pipeline:
    return Pipeline(parse_runtime(runtime_doc(**kw)), seed=1)


# --- crc16 ------------------------------------------------------------------------------------------


def _bmv2_crc16(data: bytes) -> int:
    """A literal transcription of bmv2's struct crc16 (src/bm_sim/calculations.cpp): a non-reflected
    0x8005 table, every input byte reflected, the remainder reflected at the end."""

    def reflect(v, n):
        return int(f"{v:0{n}b}"[::-1], 2)

    table = []
    for dividend in range(256):
        rem = dividend << 8
        for _ in range(8):
            rem = ((rem << 1) ^ 0x8005) if rem & 0x8000 else rem << 1
        table.append(rem & 0xFFFF)
    rem = 0
    for b in data:
        rem = (table[reflect(b, 8) ^ (rem >> 8)] ^ (rem << 8)) & 0xFFFF
    return reflect(rem, 16)


def test_crc16_is_bmv2s():
    assert crc16(b"123456789") == 0xBB3D  # CRC-16/ARC check value
    assert _bmv2_crc16(b"123456789") == 0xBB3D
    rng = random.Random(3)
    for n in (0, 1, 13, 40):
        data = bytes(rng.randrange(256) for _ in range(n))
        assert crc16(data) == _bmv2_crc16(data)
    # the 5-tuple field list as bmv2 concatenates it, pinned
    key = five_tuple_bytes(bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]), 17, 5000, 6000)
    assert key == bytes.fromhex("0a0000010a0000021113881770")
    assert crc16(key) == _bmv2_crc16(key) == 0x3440


# --- tables ----------------------------------------------------------------------------------------


def test_lpm_longest_prefix_and_default_drop():
    p = pipeline(routes={"10.0.0.0/8": [1], "10.0.0.0/24": [2], "10.0.0.7/32": [3]})
    assert p.ingress(bytearray(udp_frame(dst="10.0.0.7")), 4)[0] == 3
    assert p.ingress(bytearray(udp_frame(dst="10.0.0.8")), 4)[0] == 2
    assert p.ingress(bytearray(udp_frame(dst="10.9.0.8")), 4)[0] == 1
    assert p.ingress(bytearray(udp_frame(dst="11.0.0.1")), 4) is None
    assert p.drops[0][P.DROP_REASONS["no_route"]] == 1
    assert [h[0] for h in p.lpm_table.hits] == [1, 1, 1]


def test_nhop_rewrites_macs_and_misses_drop():
    p = pipeline(routes={"10.0.0.2/32": [2, None]}, lb_mode="spray_rr")
    f = bytearray(dlcp_frame())
    assert p.ingress(f, 1)[0] == 2
    assert f[0:6] == bytes.fromhex("020000000102") and f[6:12] == bytes.fromhex("0200000000fe")
    assert p.ingress(bytearray(dlcp_frame()), 1) is None  # member 1 has no nhop entry
    assert p.drops[0][P.DROP_REASONS["no_route"]] == 1
    assert p.rr_next[1] == 2


def test_drop_reasons_in_order():
    p = pipeline()
    arp = bytes.fromhex("ffffffffffff0200000000010806") + bytes(28)
    cases = [
        (b"\x00" * 10, "parser_error"),  # shorter than Ethernet
        (arp, "not_ipv4"),
        (udp_frame()[:30], "parser_error"),  # truncated IPv4
        (dlcp_frame()[:55], "parser_error"),  # truncated DLCP header
        (dlcp_frame(telemetry=True, payload=0)[:70], "parser_error"),  # truncated telemetry block
        (dlcp_frame(ttl=1, dst="99.0.0.1"), "ttl_expired"),  # TTL is checked before the route
        (dlcp_frame(dst="99.0.0.1"), "no_route"),
    ]
    bad_ver = bytearray(dlcp_frame())
    bad_ver[42] = 0x20
    cases.append((bytes(bad_ver), "parser_error"))
    for frame, reason in cases:
        before = list(p.drops[0])
        assert p.ingress(bytearray(frame), 1) is None, reason
        assert [a - b for a, b in zip(p.drops[0], before)][P.DROP_REASONS[reason]] == 1, reason
    assert sum(p.admitted[0]) == 0 and not any(p.occupancy)


def test_non_dlcp_udp_and_ipv4_with_options_are_forwarded():
    p = pipeline()
    assert p.ingress(bytearray(udp_frame(dport=9911)), 1)[:3] == (2, 0, 0)
    from scapy.layers.inet import IP, UDP, IPOption_NOP
    from scapy.layers.l2 import Ether

    f = bytes(Ether() / IP(dst="10.0.0.3", options=[IPOption_NOP()] * 4) / UDP(dport=9910) / b"x")
    assert p.ingress(bytearray(f), 1)[:4] == (3, 0, 0, -1)  # transport not parsed behind options


def test_per_flow_hash_is_sticky_and_matches_crc16():
    p = pipeline(routes={"10.0.0.2/32": [1, 2, 3, 4]}, lb_mode="spray_random")
    for sport in range(20):
        f = udp_frame(sport=sport)  # not DLCP: hashed even in a spray mode
        want = [1, 2, 3, 4][crc16(five_tuple_bytes(bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]), 17, sport, 6000)) % 4]
        for _ in range(3):
            r = p.ingress(bytearray(f), 1)
            assert r[0] == want
            p.egress(bytearray(f), r[0], r[1], -1, 0, 0, False)


def test_spray_round_robin_and_random():
    p = pipeline(routes={"10.0.0.2/32": [1, 2, 3, 4]}, lb_mode="spray_rr")
    ports = [p.ingress(bytearray(dlcp_frame()), 1)[0] for _ in range(8)]
    assert ports == [1, 2, 3, 4, 1, 2, 3, 4]
    p = pipeline(routes={"10.0.0.2/32": [1, 2, 3, 4]}, lb_mode="spray_random", thresholds=(10**6, 10**6, 10**6, 10**6))
    counts = dict.fromkeys((1, 2, 3, 4), 0)
    frame = dlcp_frame()
    for _ in range(4000):
        counts[p.ingress(bytearray(frame), 1)[0]] += 1
    assert all(800 < c < 1200 for c in counts.values()), counts


def test_classify_dlcp_dscp_and_default():
    p = pipeline()
    assert p.ingress(bytearray(dlcp_frame(prio=5, drop_prec=2, tos=0)), 1)[1:3] == (5, 2)  # from the DLCP header
    assert p.ingress(bytearray(udp_frame(tos=(6 << 5) | (3 << 3))), 1)[1:3] == (6, 3)  # from DSCP
    assert pipeline(classify=False).ingress(bytearray(dlcp_frame(prio=5, drop_prec=2)), 1)[1:3] == (0, 0)  # fifo


def test_in_band_probe_is_a_dlcp_packet():
    # parsed as DLCP (the parser checks the version only), classified by its prio / drop_prec
    # whatever the DSCP says, sprayed like data; drop precedence 0: only tail-dropped
    p = pipeline(routes={"10.0.0.2/32": [1, 2, 3, 4]}, lb_mode="spray_rr", thresholds=(2, 1, 1, 1))
    f = bytearray(probe_frame(prio=3))
    f[15] = 0  # DSCP 0: classification must come from the DLCP header
    ports = []
    for _ in range(4):
        port, qid, color, _ = p.ingress(bytearray(f), 1)
        ports.append(port)
        assert (qid, color) == (3, 0)
    assert ports == [1, 2, 3, 4]
    p = pipeline(thresholds=(2, 1, 1, 1))
    assert [p.ingress(bytearray(probe_frame(prio=1)), 1) is not None for _ in range(3)] == [True, True, False]
    assert p.counters()["tail_pkts"][(2 * 8 + 1) * 4 + 0] == 1  # port 2, queue 1, color 0: a tail drop


def test_admission_early_and_tail_drops():
    p = pipeline(thresholds=(8, 6, 4, 2))
    results = {
        c: [p.ingress(bytearray(dlcp_frame(prio=3, drop_prec=c)), 1) is not None for _ in range(10)]
        for c in (3, 2, 1, 0)
    }
    # occupancy of (port 2, q3) grows only with admitted packets; each color stops at its threshold
    assert sum(results[3]) == 2 and sum(results[2]) == 2 and sum(results[1]) == 2 and sum(results[0]) == 2
    assert p.occupancy[2 * 8 + 3] == 8
    idx = lambda c: P.queue_counter_index(2, 3, c)
    assert [p.early[0][idx(c)] for c in (1, 2, 3)] == [8, 8, 8]
    assert p.tail[0][idx(0)] == 8 and p.admitted[0][idx(0)] == 2
    p.egress(bytearray(dlcp_frame()), 2, 3, -1, 0, 0, False)
    assert p.occupancy[2 * 8 + 3] == 7


@pytest.mark.parametrize("ect", [1, 2])
def test_ecn_marks_from_the_kth_packet_of_a_queue(ect):
    # K = 3 switch-wide, 1 for queue 5 anywhere, 5 for queue 5 of port 2 (the most specific entry wins
    # by priority); packets go to port 2 (10.0.0.2)
    p = pipeline(
        thresholds=(64, 48, 32, 16), ecn_k=3, ecn_entries=[({"qid": 5}, 10, 1), ({"egress_port": 2, "qid": 5}, 20, 5)]
    )
    for prio, k in ((3, 3), (5, 5)):
        marks = []
        for _ in range(8):
            f = bytearray(dlcp_frame(prio=prio, tos=(prio << 5) | ect))
            assert p.ingress(f, 1)
            marks.append(f[15] & 3 == 3)
            assert _ipv4_ok(f)
        assert marks == [False] * k + [True] * (8 - k), (prio, marks)  # queued before it: 0, 1, ...
        assert p.ce_marked[0][2 * 8 + prio] == 8 - k
    q = pipeline(ecn_k=0, ecn_entries=[({"qid": 5}, 10, 1)])  # queue 5 of every port: K = 1
    f = bytearray(dlcp_frame(prio=5, dst="10.0.0.3", tos=(5 << 5) | ect))
    q.ingress(f, 1)
    q.ingress(f2 := bytearray(dlcp_frame(prio=5, dst="10.0.0.3", tos=(5 << 5) | ect)), 1)
    assert f[15] & 3 == ect and f2[15] & 3 == 3


def test_ecn_leaves_not_ect_and_ce_alone():
    p = pipeline(ecn_k=0)  # every admitted ECN-capable packet is marked
    for ecn, after in ((0, 0), (3, 3), (2, 3), (1, 3)):
        f = bytearray(dlcp_frame(prio=2, tos=(2 << 5) | ecn))
        assert p.ingress(f, 1) and f[15] & 3 == after and _ipv4_ok(f)
    assert p.ce_marked[0][2 * 8 + 2] == 2  # only the ECT(0) and ECT(1) packets were marked here
    d = pipeline(ecn_k=P.ECN_NEVER)
    f = bytearray(dlcp_frame(prio=2, tos=(2 << 5) | 2))
    assert d.ingress(f, 1) and f[15] & 3 == 2


def _ipv4_ok(f: bytes) -> bool:
    s = sum(struct.unpack("!10H", f[14:34]))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s == 0xFFFF


def test_ttl_decrement_keeps_ipv4_checksum_valid():
    p = pipeline()
    for ttl in (2, 64, 255):
        f = bytearray(dlcp_frame(ttl=ttl))
        assert p.ingress(f, 1)
        assert f[22] == ttl - 1 and _ipv4_ok(f)


def _udp_ok(f: bytes) -> bool:
    from scapy.layers.l2 import Ether

    pkt = Ether(bytes(f))
    want = pkt["UDP"].chksum
    del pkt["UDP"].chksum
    return Ether(bytes(pkt))["UDP"].chksum == want


def test_telemetry_stamp_and_udp_checksum():
    f = bytearray(dlcp_frame(telemetry=True))
    stamp_telemetry(f, 66, 17, 1234, False)
    stamp_telemetry(f, 66, 5, 1000, False)
    hops, _, qd, total = struct.unpack_from("!BBHI", f, 66)
    assert (hops, qd, total) == (2, 17, 2234) and _udp_ok(f)
    zero = bytearray(dlcp_frame(telemetry=True, udp_csum=0))
    stamp_telemetry(zero, 66, 3, 10, False)
    assert zero[40:42] == b"\x00\x00"  # no checksum stays no checksum
    partial = bytearray(dlcp_frame(telemetry=True))
    before = bytes(partial[40:42])
    stamp_telemetry(partial, 66, 3, 10, True)
    assert partial[40:42] == before  # the kernel completes a partial checksum on the way out


def test_dropped_packets_touch_no_queue_state():
    p = pipeline()
    for frame in (b"\x01" * 20, dlcp_frame(ttl=0), dlcp_frame(dst="1.2.3.4")):
        p.ingress(bytearray(frame), 1)
    assert not any(p.occupancy) and not any(p.admitted[0]) and not any(p.early[0]) and not any(p.tail[0])
