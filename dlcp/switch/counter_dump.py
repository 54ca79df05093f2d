"""The counter dump `counters/sN.json` (shape: docs/pipeline.md "Counter dump"), the same keys from
every engine of the pipeline core (the built-in switch's C and Python engines, the ns-3 switch),
and the queueing-time histogram behind its telemetry section."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from dlcp.network import pipeline_names as P
from dlcp.transport.core.waits import WaitHistogram

_FINE = 256  # 1 us buckets below this, then 32 log-spaced buckets per power of two (~3 % error)


class DelayHistogram:
    """Queueing times in microseconds, bucketed so percentiles cost no per-packet memory."""

    def __init__(self):
        self.counts: dict[int, int] = {}
        self.fine = [0] * _FINE
        self.max = 0
        self.n = 0

    def add(self, us: int) -> None:
        self.n += 1
        if us < _FINE:
            self.fine[us] += 1
        else:
            b = us.bit_length()
            key = (b << 5) | ((us >> (b - 6)) & 31)
            self.counts[key] = self.counts.get(key, 0) + 1
        if us > self.max:
            self.max = us

    @classmethod
    def from_counts(cls, fine, coarse, n: int, max_us: int) -> DelayHistogram:
        """Rebuild from an engine's counters (coarse: dict key -> count, or a list indexed by key)."""
        h = cls()
        h.fine = list(fine)
        h.counts = dict(coarse) if isinstance(coarse, dict) else {k: v for k, v in enumerate(coarse) if v}
        h.n, h.max = n, max_us
        return h

    @staticmethod
    def _value(key: int) -> int:
        b, frac = key >> 5, key & 31
        return (32 | frac) << (b - 6)

    def percentile(self, q: float) -> int:
        if not self.n:
            return 0
        rank = q * (self.n - 1)
        seen = 0
        for us, c in enumerate(self.fine):
            seen += c
            if seen > rank:
                return us
        for key in sorted(self.counts):
            seen += self.counts[key]
            if seen > rank:
                return min(self._value(key), self.max)
        return self.max


def queue_rows(raw: dict) -> list[dict]:
    rows = []
    adm_p, adm_b = raw["admitted_pkts"], raw["admitted_bytes"]
    early_p, early_b = raw["early_pkts"], raw["early_bytes"]
    tail_p, tail_b = raw["tail_pkts"], raw["tail_bytes"]
    for i in range(len(adm_p)):
        if adm_p[i] or early_p[i] or tail_p[i]:
            port, qid, color = P.queue_counter_key(i)
            rows.append(
                {
                    "port": port,
                    "qid": qid,
                    "color": color,
                    "admitted_pkts": adm_p[i],
                    "admitted_bytes": adm_b[i],
                    "early_drop_pkts": early_p[i],
                    "early_drop_bytes": early_b[i],
                    "tail_drop_pkts": tail_p[i],
                    "tail_drop_bytes": tail_b[i],
                }
            )
    return rows


def ecn_rows(pkts, nbytes) -> list[dict]:
    """CE marks per port and queue (index port * 8 + qid), non-zero rows only."""
    return [
        {"port": i // P.N_QUEUES, "qid": i % P.N_QUEUES, "ce_marked_pkts": p, "ce_marked_bytes": b}
        for i, (p, b) in enumerate(zip(pkts, nbytes))
        if p
    ]


def non_dlcp_rows(raw: dict) -> list[dict]:
    """The part of `queues` counted from frames without a DLCP header, by queue and the frame's DSCP
    class (dscp >> 3): what tells background (and the transport's TCP control) from gradients."""
    rows = []
    for index, (adm, early, tail) in sorted(raw["non_dlcp"].items()):
        port, qid, color, dscp_class = P.non_dlcp_key(index)
        rows.append(
            {
                "port": port,
                "qid": qid,
                "color": color,
                "dscp_class": dscp_class,
                "admitted_pkts": adm,
                "early_drop_pkts": early,
                "tail_drop_pkts": tail,
            }
        )
    return rows


def engine_waits(raw: dict, prefix: str) -> WaitHistogram:
    """An engine's wait histogram from its counters `<prefix>_bins`, `_n`, `_max_s`."""
    return WaitHistogram.from_bins(raw[f"{prefix}_bins"], raw[f"{prefix}_n"], raw[f"{prefix}_max_s"])


def burst_bytes(h: WaitHistogram) -> dict:
    """The engines' host-burst histogram (bytes still on a host's link as its next frame came,
    recorded one byte per microsecond) in bytes: count, p50_bytes, p99_bytes, max_bytes."""
    b = lambda s: None if s is None else round(s * 1e6)
    return {
        "count": h.count,
        "p50_bytes": b(h.quantile_s(0.5)),
        "p99_bytes": b(h.quantile_s(0.99)),
        "max_bytes": b(h.max_s) if h.count else None,
    }


# every port row has these; what an engine has no such thing for is 0 (a simulated port has no
# kernel to drop frames, no socket to fail) and its state "up"
PORT_COUNTS = (
    "rx_pkts",
    "rx_bytes",
    "tx_pkts",
    "tx_bytes",
    "tx_errors",
    "queue_overflow_pkts",
    "link_loss_pkts",
    "rx_truncated",
    "queued_pkts",
    "pending_pkts",
    "rx_kernel_drops",
)
DUMP_KEYS = (
    "switch",
    "backend",
    "engine",
    "time_unix",
    "queues",
    "ecn_marks",
    "drops",
    "ports",
    "telemetry",
    "tables",
    "registers",
    "non_dlcp",
    "read_lag",
    "send_late",
    "host_burst",
)


def port_row(port: int, intf: str, counts: dict, state: str = "up") -> dict:
    """One `ports` row: the port, its interface, every count of PORT_COUNTS, its state."""
    return {"port": port, "intf": intf, **{k: int(counts.get(k, 0)) for k in PORT_COUNTS}, "state": state}


def snapshot(name: str, raw: dict, ports: list[dict], engine: str, backend: str) -> dict:
    """The counter dump from an engine's raw counters (the layout of `Pipeline.counters()`) plus its
    `port_row`s. The wait histograms `read_lag`, `send_late` and `host_burst` are the built-in
    switch's wall-clock measurements of its own I/O; an engine without them (ns-3: it reads and
    sends at the simulated instant) writes them empty (count 0)."""
    delays = DelayHistogram.from_counts(raw["delay_fine"], raw["delay_coarse"], raw["delay_n"], raw["delay_max"])
    pairs = lambda v: {"pkts": sum(v[0::2]), "bytes": sum(v[1::2])}
    waits = lambda prefix: engine_waits(raw, prefix) if f"{prefix}_bins" in raw else WaitHistogram()
    dump = {
        "switch": name,
        "backend": backend,
        "engine": engine,
        "time_unix": time.time(),
        "queues": queue_rows(raw),
        "ecn_marks": ecn_rows(raw["ce_pkts"], raw["ce_bytes"]),
        "drops": {reason: raw["drops_pkts"][i] for reason, i in P.DROP_REASONS.items()},
        "ports": ports,
        "telemetry": {
            "max_enq_qdepth": raw["max_enq_qdepth"],
            "deq_timedelta_us": {"p50": delays.percentile(0.5), "p99": delays.percentile(0.99), "max": delays.max},
        },
        "tables": {P.IPV4_LPM_HITS: pairs(raw["lpm_hits"]), P.CLASSIFY_HITS: pairs(raw["classify_hits"])},
        "registers": {P.RR_NEXT: {str(i): v for i, v in enumerate(raw["rr_next"]) if v}},
        "non_dlcp": non_dlcp_rows(raw),
        "read_lag": waits("rx_lag").as_dict(),
        "send_late": waits("tx_late").as_dict(),
        "host_burst": burst_bytes(waits("rx_burst")),
    }
    assert tuple(dump) == DUMP_KEYS
    return dump


def write_json_atomic(path: str | Path, doc: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)
