"""How a run was made, as far as its directory records it: the backend, the time dilation and the
warm-up a report needs before it can state a single time.

Each fact comes from the first file that records it: meta.json (what the runner did: backend,
policy, `dilation`), then config.toml (the resolved config the run was given: `[scale] dilation`,
`[workload] warmup_iterations`, the link rates). A fact neither records is unknown; the report
then says which file is missing or damaged and what that leaves unknown, and states times as
measured (dilation 1) and every iteration as counted (no warm-up). The link rates a lower bound
needs fall back to topology.json, whose links carry the rates the emulation ran (the system's / D:
dlcp/reporting/bounds.py multiplies them back).
"""

from __future__ import annotations

from dataclasses import dataclass

import dlcp.backends as backends

MEASURED = "unknown: times are shown as measured"
EVERY_ITERATION = "unknown: every iteration counts"


def _number(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class RunFacts:
    """A run's facts with where each came from ("meta.json", "config.toml", or None: unknown)."""

    backend: str | None = None
    backend_from: str | None = None
    dilation: float = 1.0  # measured times / dilation = the system's time (1 when unknown)
    dilation_from: str | None = None
    warmup_iterations: int = 0  # left out of MCT and iteration statistics (0 when unknown)
    warmup_from: str | None = None
    clock: str | None = None  # "wall" or "simulated" (meta.json, else the backend's; None: unknown)

    @property
    def simulated(self) -> bool:
        return self.clock == "simulated"  # simulated time is the system's: nothing ran slower


def _clock(meta: dict, backend: str | None) -> tuple[str | None, str | None]:
    """The run's clock and where it came from: meta.json `clock`, else what its backend runs on."""
    if meta.get("clock") in ("wall", "simulated"):
        return meta["clock"], "meta.json"
    if backend in backends.names():
        return backends.capabilities(backend).clock, None
    return None, None


def run_facts(meta: dict | None, config: dict | None) -> RunFacts:
    """The facts of a run from its meta.json and config.toml (None: missing, empty or unreadable)."""
    meta, config = meta or {}, config or {}
    backend, backend_from = None, None
    if isinstance(meta.get("backend"), str):
        backend, backend_from = meta["backend"], "meta.json"
    elif isinstance(config.get("backend"), str):
        backend, backend_from = config["backend"], "config.toml"
    dilation, dilation_from = 1.0, None
    clock, clock_from = _clock(meta, backend)
    if clock == "simulated":
        dilation_from = clock_from or backend_from
    else:
        recorded = _number(meta.get("dilation"))
        scale = config.get("scale")
        configured = _number(scale.get("dilation", 1)) if isinstance(scale, dict) else None
        if recorded is not None and recorded >= 1:
            dilation, dilation_from = recorded, "meta.json"
        elif configured is not None and configured >= 1:
            dilation, dilation_from = configured, "config.toml"
        elif config and "scale" not in config:  # a config written before [scale] existed: D = 1
            dilation_from = "config.toml"
    warmup, warmup_from = 0, None
    workload = config.get("workload")
    if isinstance(workload, dict):
        w = workload.get("warmup_iterations", 0)  # a config without the key (older runs): W = 0
        if isinstance(w, int) and not isinstance(w, bool) and w >= 0:
            warmup, warmup_from = w, "config.toml"
    return RunFacts(backend, backend_from, dilation, dilation_from, warmup, warmup_from, clock)


def config_unknowns(facts: RunFacts) -> str:
    """What a missing, empty or unreadable config.toml leaves unknown, and where the rest comes from."""
    parts = [f"warm-up iterations {EVERY_ITERATION}", "link rates from topology.json (x the dilation)"]
    if facts.dilation_from == "meta.json":
        parts.append(f"time dilation {facts.dilation:g} from meta.json")
    elif not facts.simulated:
        parts.append(f"time dilation {MEASURED}")
    return "; ".join(parts)


def meta_unknowns(facts: RunFacts) -> str:
    """What a missing or unreadable meta.json leaves unknown, and where the rest comes from."""
    parts = ["versions, git revision, start time and how the run ended unknown"]
    parts.append(f"backend {facts.backend} from config.toml" if facts.backend else "backend unknown")
    if facts.dilation_from == "config.toml" and not facts.simulated:
        parts.append(f"time dilation {facts.dilation:g} from config.toml")
    elif facts.dilation_from is None:
        parts.append(f"time dilation {MEASURED}")
    return "; ".join(parts)


def disagreement(meta: dict | None, config: dict | None, facts: RunFacts) -> str | None:
    """A line when meta.json and config.toml record different dilations (meta.json's is used).
    None for a run in simulated time: `[scale] dilation` slows an emulation down, and a simulator
    (ns-3 records dilation 1) has nothing to slow, so an experiment file run on both disagrees with
    nothing."""
    if facts.simulated:
        return None
    recorded = _number((meta or {}).get("dilation"))
    scale = (config or {}).get("scale")
    configured = _number(scale.get("dilation")) if isinstance(scale, dict) else None
    if recorded is None or configured is None or recorded == configured:
        return None
    return (
        f"meta.json records time dilation {recorded:g}, config.toml [scale] dilation {configured:g}: "
        "the report uses meta.json's (what the run did)"
    )
