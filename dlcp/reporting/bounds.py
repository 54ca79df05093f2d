"""Lower bound: how long the same bytes would take at the bottleneck link rate, with no queueing,
no loss and no protocol gaps.

Bottleneck rate (`bottleneck_mbps`), first that applies:
  1. config.toml `[links] bottleneck_mbps` (explicit);
  2. the smallest positive number among config.toml `[links]` keys ending in `_mbps`
     (e.g. `host_mbps`, `switch_mbps`, `spine_mbps`; one level of sub-tables is searched too);
  3. the smallest positive `rate_mbps` (or Mininet-style `bw`, Mbit/s) among topology.json `links`,
     times the run's time dilation D (the emulation ran its links at the system's rates / D).
Rates are Mbit/s, i.e. bits per microsecond.

Ideal times (bytes on the wire = payload `bytes` + `pkts` x FRAME_OVERHEAD_BYTES; retransmissions
are not counted, the ideal loses nothing):
  - per message: its wire bytes / bottleneck rate;
  - per iteration: the wire bytes through the most loaded host link direction in that iteration
    (sender rows summed per sending host, and per receiving peer) / bottleneck rate. This is a true
    lower bound when every byte crosses a link of the bottleneck rate (star topologies with
    rate-limited host links); where the bottleneck is a core link some traffic may avoid, it is an
    estimate.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dlcp.reporting.load import RunData
from dlcp.reporting.stats import distribution, honest_percentile, percentile
from dlcp.wire.header import HEADER_LEN

ETH_IPV4_UDP_BYTES = 14 + 20 + 8
FRAME_OVERHEAD_BYTES = ETH_IPV4_UDP_BYTES + HEADER_LEN  # per data packet (telemetry block not counted)

IDEAL_DEFINITION = (
    "Ideal = the same data at the bottleneck link rate with no queueing, loss or gaps. Wire bytes = "
    f"payload bytes + {FRAME_OVERHEAD_BYTES} B per packet (Ethernet, IPv4, UDP, DLCP headers). "
    "Per message: its wire bytes / rate; the slowdown of a message is its MCT / that ideal. "
    "Per iteration: wire bytes through the most loaded host link direction (all messages sent by one "
    "host, or all received by one) / rate, compared with the measured communication time of the "
    "iteration (slowest worker's comm_us)."
)


def _positive(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None


def bottleneck_mbps(config: dict | None, topology: dict | None, dilation: float = 1.0) -> tuple[float | None, str]:
    """The system's bottleneck link rate in Mbit/s and where it came from (a short phrase);
    `dilation`: the run's D, which topology.json's emulated rates are multiplied by."""
    links = (config or {}).get("links")
    if isinstance(links, dict):
        explicit = _positive(links.get("bottleneck_mbps"))
        if explicit is not None:
            return explicit, "config.toml [links] bottleneck_mbps"
        rates: dict[str, Any] = {}
        for key, value in links.items():
            if isinstance(value, dict):
                rates.update({f"{key}.{k}": v for k, v in value.items() if k.endswith("_mbps")})
            elif key.endswith("_mbps"):
                rates[key] = value
        rates = {k: r for k, r in ((k, _positive(v)) for k, v in rates.items()) if r is not None}
        if rates:
            key = min(rates, key=rates.__getitem__)
            return rates[key], f"config.toml [links] {key} (smallest link rate)"
    topo_links = (topology or {}).get("links")
    if isinstance(topo_links, list):
        link_rates = [
            r
            for link in topo_links
            if isinstance(link, dict)
            for r in [_positive(link.get("rate_mbps", link.get("bw")))]
            if r is not None
        ]
        if link_rates:
            if dilation != 1:
                return min(
                    link_rates
                ) * dilation, f"topology.json links (smallest link rate x time dilation {dilation:g})"
            return min(link_rates), "topology.json links (smallest link rate)"
    return None, "no link rate in config.toml [links] or topology.json links"


def wire_bytes(payload_bytes: np.ndarray, pkts: np.ndarray) -> np.ndarray:
    pkts = np.nan_to_num(pkts, nan=np.ceil(np.nan_to_num(payload_bytes) / 1400.0))
    return payload_bytes + pkts * FRAME_OVERHEAD_BYTES


def ideal_iteration_us(senders, rate_mbps: float) -> dict[int, float]:
    """iteration -> ideal communication time (us) of the sender rows given (a messages Table)."""
    wb = wire_bytes(senders.col("bytes"), senders.col("pkts"))
    it = senders.col("iter")
    out: dict[int, float] = {}
    for i in np.unique(it[np.isfinite(it)]):
        m = (it == i) & np.isfinite(wb)
        loads: dict[tuple[str, Any], float] = {}  # ("out", host) / ("in", peer) -> wire bytes
        for host, peer, b in zip(senders.col("host")[m], senders.col("peer")[m], wb[m]):
            loads[("out", host)] = loads.get(("out", host), 0.0) + b
            loads[("in", peer)] = loads.get(("in", peer), 0.0) + b
        if loads:
            out[int(i)] = max(loads.values()) * 8 / rate_mbps
    return out


def _div(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def lower_bound(run: RunData, senders, iter_comm_us: dict[int, float]) -> dict:
    """The lower-bound section of summary.json: rate, its source, ideal times and the measured
    p50/p99 as multiples of them. `iter_comm_us`: measured communication time per iteration."""
    rate, source = bottleneck_mbps(run.config, run.topology, run.facts.dilation)
    out: dict = {
        "bottleneck_mbps": rate,
        "rate_source": source,
        "definition": IDEAL_DEFINITION,
        "frame_overhead_bytes": FRAME_OVERHEAD_BYTES,
    }
    if rate is None or len(senders) == 0:
        return out
    ideal_msg = wire_bytes(senders.col("bytes"), senders.col("pkts")) * 8 / rate
    ok = np.isfinite(ideal_msg) & (ideal_msg > 0) & np.isfinite(senders.col("mct_us"))
    if not ok.any():
        out["note"] = "no sender rows with bytes, packets and mct_us"
        return out
    slowdown = senders.col("mct_us")[ok] / ideal_msg[ok]
    out["message"] = {
        "ideal_us": distribution(ideal_msg[ok]),
        "mct_p50_us": honest_percentile(senders.col("mct_us")[ok], 50),
        "mct_p99_us": honest_percentile(senders.col("mct_us")[ok], 99),
        "slowdown": distribution(slowdown),  # MCT / ideal, per message
    }
    ideal_it = ideal_iteration_us(senders, rate)
    common = sorted(set(ideal_it) & set(iter_comm_us))
    if common:
        ideal = np.array([ideal_it[i] for i in common])
        measured = np.array([iter_comm_us[i] for i in common])
        ideal_med = percentile(ideal, 50)
        p50, p99 = honest_percentile(measured, 50), honest_percentile(measured, 99)
        out["iteration"] = {
            "iterations": len(common),
            "ideal_comm_ms": _div(ideal_med, 1e3),
            "ideal_comm_ms_range": [float(ideal.min()) / 1e3, float(ideal.max()) / 1e3],
            "comm_p50_ms": _div(p50, 1e3),
            "comm_p99_ms": _div(p99, 1e3),
            "p50_multiple": _div(p50, ideal_med),
            "p99_multiple": _div(p99, ideal_med),
        }
    return out
