"""Time dilation: run the emulation D times slower than the system the config describes.

A config describes the system (`links.host_mbps = 10000`, a ResNet-50 profile); with
`[scale] dilation = D` the emulation runs it D times slower, so a 2-core machine keeps up: every
rate is divided by D and every duration multiplied by D, which leaves every ratio (bytes per
compute second, queue fill per burst, time-outs per round trip) as in the system. Reports divide
every measured time by D again (dlcp/reporting), so they speak of the system.

`emulated(cfg)` is the config the network and the agents get; the run directory keeps the
system config (config.toml), and reports read D from its `scale.dilation`. The agents get D in
their `workload.dilation` (dlcp/experiment/agent_config.py) and multiply profile times by it.

What scales (SCALED below), and why the transport's timers do: a timer set for the system's
time scale would fire D times too early against a D times slower network (the PROBE timeout
floor before every PROBE round trip ended, FORCE_STOP deadlines before messages could finish, the
receiver's quiet time before a round's packets could arrive). Timers the transport derives from
what it measures (the smoothed PROBE round trip, the adaptive quiet time) scale by themselves.
The control connections' kernel timers (TCP's retransmission floor and delayed-ACK cap) scale
the same way (dlcp/transport/sockets.py): left at the system's 10 ms, the delayed ACK fired D times
more often per control frame, and the extra pure ACKs filled packet-counted switch queues.
What does not scale: packet and queue sizes (a packet is a packet), loss rates, budgets, the
iteration count, `timeout_s` (a wall-clock limit of the emulation, not a time of the system) and
real compute (a CPU cannot be slowed down: runs with dilation need `workload.compute = "profile"`
for torch models; the synthetic model's `compute_ms` sleep scales).
"""

from __future__ import annotations

import copy
from typing import ClassVar

from pydantic import Field

from dlcp.settings import Settings

# (section, key, how): "rate" is divided by D, "time" multiplied by D.
SCALED = (
    ("links", "host_mbps", "rate"),
    ("links", "fabric_mbps", "rate"),
    ("links", "delay_us", "time"),
    ("workload", "compute_ms", "time"),
    ("dlcp", "pacing_mbps", "rate"),
    ("dlcp", "deadline_ms", "time"),
    ("dlcp", "probe_quiet_ms", "time"),
    ("dlcp", "probe_rto_ms", "time"),
    ("dlcp", "host_mark_ms", "time"),
    ("background[]", "rate_mbps", "rate"),
    ("background[]", "on_ms", "time"),
    ("background[]", "off_ms", "time"),
    ("background[]", "start_s", "time"),
    ("background[]", "stop_s", "time"),
    ("jobs[]", "start_s", "time"),
    ("jobs[]", "shift_s", "time"),
    ("jobs[].workload", "compute_ms", "time"),
    ("jobs[].dlcp", "pacing_mbps", "rate"),
    ("jobs[].dlcp", "deadline_ms", "time"),
    ("jobs[].dlcp", "probe_quiet_ms", "time"),
    ("jobs[].dlcp", "probe_rto_ms", "time"),
    ("jobs[].dlcp", "host_mark_ms", "time"),
)


class ScaleSettings(Settings):
    """`[scale]`: how much slower than the system it describes the emulation runs."""

    section: ClassVar[str] = "scale"
    dilation: float = Field(
        1.0,
        ge=1,
        le=10000,
        description="run D times slower than the system described: rates / D, times x D, reports / D",
    )


def dilation(cfg: dict) -> float:
    """D of a resolved config (1 when it has no [scale] section)."""
    return float((cfg.get("scale") or {}).get("dilation", 1))


def _scale(value, how: str, d: float):
    if how == "rate":
        return value / d
    out = value * d
    return round(out) if isinstance(value, int) and not isinstance(value, bool) else out


def emulated(cfg: dict) -> dict:
    """The config the emulation runs: rates / D, times x D (SCALED); `scale.dilation` stays, for
    the agents. D = 1 changes nothing."""
    d = dilation(cfg)
    out = copy.deepcopy(cfg)
    if d == 1:
        return out
    for section, key, how in SCALED:
        for table in _tables(out, section):
            if table.get(key):
                table[key] = _scale(table[key], how, d)
    return out


def _tables(cfg: dict, section: str) -> list[dict]:
    """The tables `section` names: `links`, every `background[]` entry, every job's `jobs[].dlcp`."""
    if "[]" not in section:
        return [cfg.get(section, {})]
    listed, _, sub = section.partition("[]")
    entries = cfg.get(listed, [])
    return [e.get(sub.lstrip("."), {}) for e in entries] if sub else entries
