"""bmv2's `HashAlgorithm.crc16`, so both backends send a flow to the same next-hop member.

bmv2 (src/bm_sim/calculations.cpp, struct crc16) computes CRC-16/ARC: polynomial 0x8005, initial
remainder 0, input and output reflected, no final xor. It does so with a non-reflected table and
reflects every byte; the reflected table below (polynomial 0xA001) gives the same value.
tests/unit/test_switch_pipeline.py pins it with known answers and against a literal transcription
of bmv2's loop.
"""

from __future__ import annotations

import struct


def _reflected_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _reflected_table()
_FIVE_TUPLE = struct.Struct("!4s4sBHH")  # bit<32> src, bit<32> dst, bit<8> proto, bit<16> sport, dport


def crc16(data: bytes) -> int:
    crc = 0
    table = _TABLE
    for b in data:
        crc = (crc >> 8) ^ table[(crc ^ b) & 0xFF]
    return crc


def five_tuple_bytes(src: bytes, dst: bytes, proto: int, sport: int, dport: int) -> bytes:
    """The field list `{src_addr, dst_addr, protocol, sport, dport}` as bmv2 concatenates it."""
    return _FIVE_TUPLE.pack(src, dst, proto, sport, dport)
