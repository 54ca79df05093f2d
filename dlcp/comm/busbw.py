"""Bus bandwidth and alpha-beta fits of measured collectives (`dlcp bench collectives`,
dlcp_cli/collectives_bench.py).

nccl-tests (`doc/PERFORMANCE.md` [C]) reports for an operation on S bytes that takes t seconds the
algorithm bandwidth algbw = S / t and the bus bandwidth busbw = algbw x a factor that makes it
comparable with one link's rate whatever the number of ranks n: for an all-reduce 2(n - 1)/n
(each rank sends, and receives, 2(n - 1)/n S: a ring's bytes, the least any all-reduce algorithm
moves per rank). For a parameter server (every worker pushes S to one server and pulls S back)
the server's link carries n S each way, so its factor is n [D: the same reasoning; nccl-tests has
no PS]. `collectives_to_bench()` is what the bench runs: every collective of the registry
(`comm.collective`, dlcp/comm/plans/, each with its entry's bus factor) and the parameter server.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

NCCL_TESTS = "nccl-tests doc/PERFORMANCE.md (github.com/NVIDIA/nccl-tests)"


def ps_factor(n: int) -> float:
    """One parameter server: its link carries every worker's S, each way [D]."""
    return float(n)


@dataclass(frozen=True)
class BenchCollective:
    """A collective the bench runs: the experiment keys that select it, its bus-bandwidth factor,
    and how many hosts beyond the workers it needs (the PS)."""

    name: str
    mode: str  # workload.mode
    sets: dict = field(default_factory=dict)  # dotted experiment keys -> values
    bus_factor: Callable[[int], float] = ps_factor
    extra_hosts: int = 0
    about: str = ""


PS = BenchCollective("ps", "ps", {}, ps_factor, extra_hosts=1, about="push + pull through one parameter server")


def collectives_to_bench() -> dict[str, BenchCollective]:
    """Every registered collective, with its default options' bus factor, then the PS."""
    from dlcp.comm.plans.collective import COLLECTIVES

    out = {}
    for name in COLLECTIVES.names():
        e = COLLECTIVES[name]
        options = e.options() if e.options is not None else None
        factor = functools.partial(e.bus_factor, options)
        out[name] = BenchCollective(name, "allreduce", {"comm.collective": name}, factor, about=e.description)
    return {**out, PS.name: PS}


def fit_alpha_beta(samples: list[tuple[int, float]]) -> dict:
    """Least-squares alpha (s) and beta (s/byte) of t = alpha + beta S over (S bytes, t s) samples
    of two sizes or more; with the largest relative residual of a size's median."""
    sizes = sorted({s for s, _ in samples})
    if len(sizes) < 2:
        raise ValueError(f"an alpha-beta fit needs two message sizes or more, got {len(sizes)}")
    x = np.array([s for s, _ in samples], float)
    y = np.array([t for _, t in samples], float)
    beta, alpha = np.polyfit(x, y, 1)
    worst = 0.0
    for s in sizes:
        med = statistics.median(t for size, t in samples if size == s)
        worst = max(worst, abs(alpha + beta * s - med) / med)
    return {"alpha_s": float(alpha), "beta_s_per_byte": float(beta), "max_rel_residual": round(worst, 4)}
