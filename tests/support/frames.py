"""Whole Ethernet/IPv4/UDP(/DLCP) frames as bytes for switch tests, and their fields read back.
Built with struct (fast enough to pre-build bursts), checksums computed here."""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

from dlcp.wire.header import (
    FLAG_TELEMETRY,
    HEADER_LEN,
    TELEMETRY_LEN,
    DlcpHeader,
    dscp_of,
    unpack_from,
    unpack_telemetry,
)

ETH_IPV4 = 0x0800


def mac_bytes(mac: str) -> bytes:
    return bytes.fromhex(mac.replace(":", ""))


def ones_sum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def checksum(data: bytes) -> int:
    return ~ones_sum(data) & 0xFFFF


def udp_frame(
    src_ip: str,
    dst_ip: str,
    sport: int,
    dport: int,
    payload: bytes,
    *,
    dscp: int = 0,
    ttl: int = 64,
    src_mac: str = "00:00:00:00:00:aa",
    dst_mac: str = "00:00:00:00:00:bb",
    udp_checksum: bool = True,
    proto: int = 17,
) -> bytes:
    src, dst = ipaddress.IPv4Address(src_ip).packed, ipaddress.IPv4Address(dst_ip).packed
    l4 = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    if udp_checksum and proto == 17:
        c = checksum(src + dst + struct.pack("!BBH", 0, 17, len(l4)) + l4) or 0xFFFF
        l4 = l4[:6] + struct.pack("!H", c) + l4[8:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, dscp << 2, 20 + len(l4), 1, 0, ttl, proto, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", checksum(ip)) + ip[12:]
    return mac_bytes(dst_mac) + mac_bytes(src_mac) + struct.pack("!H", ETH_IPV4) + ip + l4


def dlcp_frame(
    src_ip: str,
    dst_ip: str,
    *,
    prio: int = 1,
    drop_prec: int = 0,
    seq: int = 0,
    n_pkts: int = 1 << 20,
    telemetry: bool = False,
    payload_len: int = 64,
    sport: int = 40000,
    dport: int = 9910,
    ver: int = 1,
    **kw,
) -> bytes:
    flags = FLAG_TELEMETRY if telemetry else 0
    h = DlcpHeader(prio=prio, drop_prec=drop_prec, seq=seq, n_pkts=n_pkts, flags=flags)
    raw = bytearray(h.pack())
    raw[0] = (ver << 4) | (raw[0] & 0x0F)
    body = bytes(raw) + (bytes(TELEMETRY_LEN) if telemetry else b"") + bytes(range(256))[:payload_len]
    return udp_frame(src_ip, dst_ip, sport, dport, body, dscp=dscp_of(prio, drop_prec), **kw)


@dataclass
class Parsed:
    dst_mac: str
    src_mac: str
    ttl: int
    dscp: int
    ip_ok: bool
    src_ip: str
    dst_ip: str
    sport: int
    dport: int
    udp_ok: bool
    udp_checksum: int
    dlcp: DlcpHeader | None
    telemetry: object | None
    length: int


def parse(frame: bytes, dlcp_port: int = 9910) -> Parsed | None:
    """Fields of an Ethernet/IPv4/UDP frame (TCP: ports only); None for anything else."""
    if len(frame) < 42 or struct.unpack_from("!H", frame, 12)[0] != ETH_IPV4 or frame[23] not in (6, 17):
        return None
    ip = frame[14:34]
    udp = frame[23] == 17
    udp_len = struct.unpack_from("!H", frame, 38)[0] if udp else len(frame) - 34
    seg = frame[34 : 34 + udp_len]
    ucs = struct.unpack_from("!H", seg, 6)[0] if udp else 0
    udp_ok = ucs == 0 or ones_sum(ip[12:20] + struct.pack("!BBH", 0, 17, udp_len) + seg) == 0xFFFF
    sport, dport = struct.unpack_from("!HH", seg)
    dl = tel = None
    if udp and dport == dlcp_port and len(seg) >= 8 + HEADER_LEN:
        dl = unpack_from(seg, 8)
        if dl.has_telemetry:
            tel = unpack_telemetry(seg, 8 + HEADER_LEN)
    return Parsed(
        frame[0:6].hex(":"),
        frame[6:12].hex(":"),
        ip[8],
        ip[1] >> 2,
        ones_sum(ip) == 0xFFFF,
        str(ipaddress.IPv4Address(ip[12:16])),
        str(ipaddress.IPv4Address(ip[16:20])),
        sport,
        dport,
        udp_ok,
        ucs,
        dl,
        tel,
        len(frame),
    )


def crc16_arc(data: bytes) -> int:
    """CRC-16/ARC (poly 0x8005 reflected, init 0): bmv2's HashAlgorithm.crc16."""
    crc = 0
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
    return crc


def flow_member(src_ip: str, dst_ip: str, proto: int, sport: int, dport: int, size: int) -> int:
    """The member the per-flow hash of docs/pipeline.md picks: crc16(src, dst, proto, sport, dport) mod size."""
    key = (
        ipaddress.IPv4Address(src_ip).packed
        + ipaddress.IPv4Address(dst_ip).packed
        + struct.pack("!BHH", proto, sport, dport)
    )
    return crc16_arc(key) % size
