import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlcp.wire import header as H


def test_layout_constants_agree():
    assert sum(bits for _, bits in H.FIELD_BITS) == 8 * H.HEADER_LEN
    assert sum(bits for _, bits in H.TELEMETRY_FIELD_BITS) == 8 * H.TELEMETRY_LEN
    assert H.HEADER.size == H.HEADER_DTYPE.itemsize == 24
    assert H.VALUES_PER_PKT == 350
    # Ether 14 + IPv4 20 + UDP 8 + DLCP 24 + telemetry 8 + payload 1400 stays under 1500 + 14
    assert 20 + 8 + 24 + 8 + H.MAX_PAYLOAD_BYTES <= 1500


def test_known_bytes():
    h = H.DlcpHeader(
        type=H.TYPE_RETX,
        prio=6,
        drop_prec=2,
        phase=H.PHASE_AG,
        job_id=3,
        src_rank=9,
        iter=0x1234,
        msg_id=0xBEEF,
        layer_id=7,
        mag_class=12,
        flags=H.FLAG_LAST | H.FLAG_TELEMETRY,
        seq=4,
        n_pkts=5,
        offset=1400,
    )
    b = h.pack()
    assert b[0] == 0x11  # ver 1, type RETX
    assert b[1] == (6 << 5) | (2 << 3) | 3
    assert b[2:4] == bytes([3, 9])
    assert b[4:6] == b"\x12\x34" and b[6:8] == b"\xbe\xef"
    assert b[8:10] == b"\x00\x07" and b[10] == 12 and b[11] == 0x05
    assert struct.unpack("!III", b[12:]) == (4, 5, 1400)
    assert H.unpack_from(b) == h


def test_dscp_mapping():
    assert H.dscp_of(6, 2) == 0b110100
    assert H.tos_of(7, 0) == 7 << 5
    for p in range(8):
        for d in range(4):
            assert H.prio_dp_of_dscp(H.dscp_of(p, d)) == (p, d)
    np.testing.assert_array_equal(H.dscp_of(np.array([1, 6]), np.array([3, 0])), [(1 << 3) | 6, 6 << 3])


@pytest.mark.parametrize(
    "mutate,field",
    [
        (lambda b: b[:10], "length"),
        (lambda b: b"", "length"),
        (lambda b: bytes([0x20 | (b[0] & 0x0F)]) + b[1:], "ver"),
        (lambda b: bytes([0x1F]) + b[1:], "type"),
        (lambda b: b[:1] + bytes([b[1] | 0x07]) + b[2:], "phase"),
        (lambda b: b[:16] + struct.pack("!I", 0) + b[20:], "n_pkts"),
        (lambda b: b[:12] + struct.pack("!I", 9) + b[16:], "seq"),
        (lambda b: b[:10] + bytes([16]) + b[11:], "mag_class"),
    ],
)
def test_malformed_header_names_field(mutate, field):
    good = H.DlcpHeader(seq=1, n_pkts=3).pack()
    with pytest.raises(H.MalformedPacket) as e:
        H.unpack_from(mutate(good))
    assert e.value.field == field
    assert field in str(e.value)


def test_encode_rejects_out_of_range():
    with pytest.raises(H.MalformedPacket, match="prio"):
        H.DlcpHeader(prio=8).pack()
    with pytest.raises(H.MalformedPacket, match="iter"):
        H.DlcpHeader(iter=70000).pack()


def test_pack_into_memoryview_offset_and_no_copy_decode():
    buf = bytearray(100)
    h = H.DlcpHeader(seq=2, n_pkts=4, offset=700)
    H.pack_into(memoryview(buf), 30, h)
    assert H.unpack_from(memoryview(buf), 30) == h


headers = st.builds(
    H.DlcpHeader,
    type=st.sampled_from(sorted(H.TYPE_NAMES)),
    prio=st.integers(0, 7),
    drop_prec=st.integers(0, 3),
    phase=st.sampled_from(sorted(H.PHASE_NAMES)),
    job_id=st.integers(0, 255),
    src_rank=st.integers(0, 255),
    iter=st.integers(0, 0xFFFF),
    msg_id=st.integers(0, 0xFFFF),
    layer_id=st.integers(0, 0xFFFF),
    mag_class=st.integers(0, 15),
    flags=st.integers(0, 255),
    seq=st.integers(0, 1000),
    n_pkts=st.integers(1001, 0xFFFFFFFF),
    offset=st.integers(0, 0xFFFFFFFF),
)


# no deadline: scapy is slow on a loaded 2-core machine and speed is not what this checks
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(headers)
def test_struct_and_scapy_agree(h):
    DLCP, _ = H.scapy_layers()
    b = h.pack()
    s = DLCP(
        type=h.type,
        prio=h.prio,
        drop_prec=h.drop_prec,
        phase=h.phase,
        job_id=h.job_id,
        src_rank=h.src_rank,
        iter=h.iter,
        msg_id=h.msg_id,
        layer_id=h.layer_id,
        mag_class=h.mag_class,
        flags=h.flags,
        seq=h.seq,
        n_pkts=h.n_pkts,
        offset=h.offset,
    )
    assert bytes(s) == b
    back = DLCP(b)
    assert [back.getfieldval(n) for n, _ in H.FIELD_BITS] == [getattr(h, n) for n, _ in H.FIELD_BITS]
    assert H.unpack_from(b) == h


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(headers)
def test_numpy_and_struct_agree(h):
    rows = H.pack_headers(
        1,
        type=h.type,
        phase=h.phase,
        job_id=h.job_id,
        src_rank=h.src_rank,
        iter=h.iter,
        msg_id=h.msg_id,
        prio=h.prio,
        drop_prec=h.drop_prec,
        layer_id=h.layer_id,
        mag_class=h.mag_class,
        flags=h.flags,
        offset=h.offset,
        seq=h.seq,
    )
    h2 = H.DlcpHeader(**{**{f: getattr(h, f) for f in H.DlcpHeader.__slots__}, "n_pkts": 1})
    assert rows[0].tobytes() == h2.pack()
    fields = H.header_fields(rows)
    assert int(fields["offset"][0]) == h.offset and int(fields["seq"][0]) == h.seq


def test_scapy_binds_udp_port_and_telemetry():
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    DLCP, Tel = H.scapy_layers()
    pkt = (
        Ether()
        / IP()
        / UDP(sport=1234, dport=H.DATA_PORT)
        / DLCP(flags=H.FLAG_TELEMETRY)
        / Tel(hops=2, max_enq_qdepth=17)
        / (b"\0" * 8)
    )
    parsed = Ether(bytes(pkt))
    assert parsed.haslayer(DLCP) and parsed[Tel].hops == 2 and parsed[Tel].max_enq_qdepth == 17
    tel = H.unpack_telemetry(bytes(parsed[DLCP]))
    assert (tel.hops, tel.max_enq_qdepth) == (2, 17)
    assert H.payload_offset(H.FLAG_TELEMETRY) == 32 and H.payload_offset(0) == 24


def test_probe_packet_roundtrip_and_scapy():
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    data = H.DlcpHeader(
        type=H.TYPE_DATA,
        prio=5,
        drop_prec=3,
        phase=H.PHASE_PULL,
        job_id=2,
        src_rank=4,
        iter=9,
        msg_id=11,
        layer_id=6,
        seq=7,
        n_pkts=40,
        offset=7 * 350,
    )
    head = H.probe_header(data, prio=2)
    frame = H.pack_probe(head, H.Probe(round=3, attempt=1, round_pkts=12))
    assert len(frame) == H.HEADER_LEN + H.PROBE_LEN == 32
    h = H.unpack_from(frame)
    assert (
        h.type,
        h.prio,
        h.drop_prec,
        h.phase,
        h.src_rank,
        h.iter,
        h.msg_id,
        h.layer_id,
        h.seq,
        h.offset,
        h.n_pkts,
        h.flags,
    ) == (H.TYPE_PROBE, 2, 0, H.PHASE_PULL, 4, 9, 11, 6, 0, 0, 40, H.FLAG_PROTECTED)
    assert H.unpack_probe(frame) == H.Probe(3, 1, 12)
    with pytest.raises(H.MalformedPacket, match="probe.length"):
        H.unpack_probe(frame + b"x")
    with pytest.raises(H.MalformedPacket, match="probe.round"):
        H.unpack_probe(frame[:24] + bytes(8))
    DLCP, _ = H.scapy_layers()
    Probe = H.scapy_probe_layer()
    pkt = Ether(bytes(Ether() / IP() / UDP(sport=1, dport=H.DATA_PORT) / frame))
    assert pkt[DLCP].type == H.TYPE_PROBE and pkt[DLCP].sprintf("%DLCP.type%") == "PROBE"
    assert (pkt[Probe].round, pkt[Probe].attempt, pkt[Probe].round_pkts) == (3, 1, 12)
    assert [n for n, _ in H.PROBE_FIELD_BITS] == [f.name for f in Probe.fields_desc]


def test_layout_slots_place_every_field():
    from dlcp.wire.layout import LAYOUT, slots

    s = {x.name: x for x in slots(LAYOUT.header)}
    assert (s["ver"].word, s["ver"].offset, s["ver"].shift, s["type"].shift) == (0, 0, 4, 0)
    assert (s["prio"].offset, s["prio"].shift, s["drop_prec"].shift, s["phase"].shift) == (1, 5, 3, 0)
    assert (s["iter"].offset, s["iter"].size, s["flags"].offset, s["seq"].offset, s["offset"].offset) == (
        4,
        2,
        11,
        12,
        20,
    )
    assert s["prio"].packed and not s["seq"].packed
    assert H.HEADER.format == "!BBBBHHHBBIII" and H.TELEMETRY.format == H.PROBE_BODY.format == "!BBHI"


@pytest.mark.parametrize(
    "fields, message",
    [
        ((("a", 3), ("b", 8)), "fields a, b: 11 bits do not fill whole bytes"),
        ((("a", 48),), "fields a: 48 bits do not fill a 1-, 2- or 4-byte word"),
        ((("a", 4), ("b", 4), ("c", 0)), "field c: 0 bits"),
    ],
)
def test_layout_that_does_not_fill_words_is_refused(fields, message):
    from dlcp.wire.layout import Field, LayoutError, slots

    with pytest.raises(LayoutError, match=message):
        slots(tuple(Field(n, b) for n, b in fields))


def test_packed_fields_read_and_written_in_numpy_views():
    rows = H.pack_headers(
        3,
        type=H.TYPE_DATA,
        phase=H.PHASE_RS,
        job_id=1,
        src_rank=2,
        iter=3,
        msg_id=4,
        prio=np.array([1, 6, 7]),
        drop_prec=np.array([3, 0, 2]),
        layer_id=0,
        mag_class=8,
        flags=0,
        offset=0,
    )
    f = H.header_fields(rows)
    assert H.field_values(f, "prio").tolist() == [1, 6, 7] and H.field_values(f, "phase").tolist() == [2] * 3
    H.set_field_values(f, "drop_prec", 0)
    H.set_field_values(f, "type", H.TYPE_RETX)
    assert [H.unpack_from(r).drop_prec for r in rows] == [0, 0, 0]
    assert [(H.unpack_from(r).prio, H.unpack_from(r).type, H.unpack_from(r).phase) for r in rows] == [
        (1, H.TYPE_RETX, 2),
        (6, H.TYPE_RETX, 2),
        (7, H.TYPE_RETX, 2),
    ]
