"""A minimal pcap writer (classic format, Ethernet link type, microsecond timestamps)."""

from __future__ import annotations

import struct
import time

_GLOBAL = struct.Struct("<IHHiIII")
_RECORD = struct.Struct("<IIII")
MAGIC = 0xA1B2C3D4
LINKTYPE_ETHERNET = 1
SNAPLEN = 65535


class PcapWriter:
    def __init__(self, path):
        self.path = path
        self.f = open(path, "wb", buffering=1 << 20)  # noqa: SIM115
        self.f.write(_GLOBAL.pack(MAGIC, 2, 4, 0, 0, SNAPLEN, LINKTYPE_ETHERNET))
        self.packets = 0

    def write(self, frame, ts: float | None = None) -> None:
        ts = time.time() if ts is None else ts
        sec = int(ts)
        cap = min(len(frame), SNAPLEN)
        self.f.write(_RECORD.pack(sec, int((ts - sec) * 1e6), cap, len(frame)))
        self.f.write(frame[:cap] if cap < len(frame) else frame)
        self.packets += 1

    def flush(self) -> None:
        self.f.flush()

    def close(self) -> None:
        self.f.close()


def read_pcap(path) -> list[tuple[float, bytes]]:
    """(timestamp, frame) records of a file written by PcapWriter (tests, quick analysis)."""
    data = open(path, "rb").read()  # noqa: SIM115
    magic, *_ = _GLOBAL.unpack_from(data, 0)
    if magic != MAGIC:
        raise ValueError(f"{path}: not a little-endian microsecond pcap file")
    out, off = [], _GLOBAL.size
    while off + _RECORD.size <= len(data):
        sec, usec, cap, _ = _RECORD.unpack_from(data, off)
        off += _RECORD.size
        out.append((sec + usec / 1e6, data[off : off + cap]))
        off += cap
    return out
