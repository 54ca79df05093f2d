"""The frame helpers the switch tests rely on agree with scapy and with the CRC-16/ARC check value."""

from frames import crc16_arc, dlcp_frame, parse
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from dlcp.wire.header import scapy_layers


def test_crc16_is_arc():
    assert crc16_arc(b"123456789") == 0xBB3D


def test_dlcp_frame_checksums_and_fields_agree_with_scapy():
    frame = dlcp_frame("10.0.0.1", "10.0.0.2", prio=6, drop_prec=3, seq=5, telemetry=True, ttl=9)
    DLCP, Tel = scapy_layers()
    pkt = Ether(frame)
    rebuilt = Ether(bytes(pkt.__class__(frame)))
    del rebuilt[IP].chksum, rebuilt[UDP].chksum
    assert bytes(Ether(bytes(rebuilt))) == frame  # scapy computes the same checksums
    assert pkt[DLCP].prio == 6 and pkt[DLCP].drop_prec == 3 and pkt[IP].tos == ((6 << 3 | 3 << 1) << 2)
    p = parse(frame)
    assert p.ip_ok and p.udp_ok and p.ttl == 9 and p.dlcp.seq == 5 and p.telemetry.hops == 0
