"""The alpha-beta cost of one collective operation (seeds-brief §1).

The model is the fitted form that MG-WFBP and US-Byte plan with [C]: an all-reduce of an M-byte
message on the cluster's P workers takes

    T_allreduce(M) = alpha + beta * M          alpha in seconds, beta in seconds per byte

where (alpha, beta) are either fitted by regression on all-reduce micro-benchmarks at that P (the
papers' way; the P dependence is inside the constants) or derived from a link's rate and latency
with an algorithm's formula (`from_link`). Every other primitive is expressed against the same
two constants, so one calibration serves every scheduler:

* reduce-scatter and all-gather each cost half an all-reduce: alpha/2 + beta*M/2. This is exact
  for ring ((P-1) steps of the 2(P-1)) and for halving-doubling (log2 P steps of the 2 log2 P),
  the algorithms the fit stands for; it is our decision for a fitted (alpha, beta) [D].
  M is always the full, unsharded message (the M of the formulas), not the 1/P shard.
* PS push (or pull) of M bytes by every worker at once to S servers holding M/S each: one link
  start-up plus the bottleneck NIC's bytes, link_alpha + max(1, P/S) * M * link_beta (the worker
  sends M; each server receives P*M/S) [D, §1's PS row]. The link constants come from `from_link`
  or, for a fitted all-reduce, are backed out of it assuming ring:
  link_alpha = alpha / (2(P-1)), link_beta = beta * P / (2(P-1)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PRIMITIVES = ("allreduce", "reduce_scatter", "all_gather", "push", "pull")
ALGORITHMS = ("ring", "halving_doubling")


def _check(name: str, value, minimum: float = 0.0, integer: bool = False):
    ok = (
        not isinstance(value, bool)
        and isinstance(value, int if integer else (int, float))
        and math.isfinite(value)
        and value >= minimum
    )
    if not ok:
        kind = "an integer" if integer else "a finite number"
        raise ValueError(f"cost model: {name}: must be {kind} >= {minimum:g}, got {value!r}")


@dataclass(frozen=True)
class CostModel:
    """alpha: start-up of one all-reduce, seconds. beta: seconds per byte of all-reduce message.
    workers: the P these constants hold for (needed only for PS costs when no link constants are
    given). link_alpha (s) / link_beta (s/B): one point-to-point message on one link."""

    alpha: float
    beta: float
    workers: int | None = None
    link_alpha: float | None = None
    link_beta: float | None = None

    def __post_init__(self):
        _check("alpha", self.alpha)
        _check("beta", self.beta)
        if self.workers is not None:
            _check("workers", self.workers, 1, integer=True)
        for key in ("link_alpha", "link_beta"):
            if getattr(self, key) is not None:
                _check(key, getattr(self, key))

    @classmethod
    def from_link(cls, rate_bps: float, latency_s: float, workers: int, algorithm: str = "ring") -> CostModel:
        """Constants of an all-reduce over `workers` ranks on links of `rate_bps` bits/s with
        `latency_s` per message step: ring 2(P-1)a + 2(P-1)/P M b; halving-doubling
        2 log2(P) a + 2(P-1)/P M b (P a power of two), with a = latency_s, b = 8 / rate_bps."""
        _check("rate_bps", rate_bps, 1e-300)
        _check("latency_s", latency_s)
        _check("workers", workers, 1, integer=True)
        link_beta = 8.0 / rate_bps
        p = workers
        if algorithm == "ring":
            steps = 2 * (p - 1)
        elif algorithm == "halving_doubling":
            if p & (p - 1):
                raise ValueError(f"cost model: halving_doubling needs a power-of-two worker count, got {p}")
            steps = 2 * int(math.log2(p))
        else:
            raise ValueError(f"cost model: algorithm: {algorithm!r} is not one of {', '.join(ALGORITHMS)}")
        return cls(
            alpha=steps * latency_s,
            beta=2 * (p - 1) / p * link_beta,
            workers=p,
            link_alpha=latency_s,
            link_beta=link_beta,
        )

    def allreduce_s(self, nbytes: float) -> float:
        return self.alpha + self.beta * nbytes

    def reduce_scatter_s(self, nbytes: float) -> float:
        """Half an all-reduce of the full nbytes-byte buffer (see module docstring)."""
        return 0.5 * (self.alpha + self.beta * nbytes)

    def all_gather_s(self, nbytes: float) -> float:
        return 0.5 * (self.alpha + self.beta * nbytes)

    def link_constants(self) -> tuple[float, float]:
        """(link_alpha s, link_beta s/B): given, or backed out of a ring all-reduce fit."""
        if self.link_alpha is not None and self.link_beta is not None:
            return self.link_alpha, self.link_beta
        if self.workers is None or self.workers < 2:
            raise ValueError(
                "cost model: PS costs need link_alpha/link_beta or workers >= 2 "
                "(to back them out of the all-reduce fit)"
            )
        p = self.workers
        return self.alpha / (2 * (p - 1)), self.beta * p / (2 * (p - 1))

    def push_s(self, nbytes: float, servers: int = 1) -> float:
        """Every worker pushes nbytes, sharded over `servers` PS shards, at the same time."""
        _check("servers", servers, 1, integer=True)
        a, b = self.link_constants()
        fan_in = max(1.0, (self.workers or 1) / servers)
        return a + fan_in * nbytes * b

    def pull_s(self, nbytes: float, servers: int = 1) -> float:
        return self.push_s(nbytes, servers)  # same bottleneck NIC, the other direction

    def op_s(self, primitive: str, nbytes: float) -> float:
        """Duration of one operation of `primitive` on an nbytes-byte (full) message."""
        if primitive == "allreduce":
            return self.allreduce_s(nbytes)
        if primitive == "reduce_scatter":
            return self.reduce_scatter_s(nbytes)
        if primitive == "all_gather":
            return self.all_gather_s(nbytes)
        if primitive == "push":
            return self.push_s(nbytes)
        if primitive == "pull":
            return self.pull_s(nbytes)
        raise ValueError(f"cost model: primitive {primitive!r} is not one of {', '.join(PRIMITIVES)}")


# Fitted all-reduce constants (a in seconds, b in seconds per byte of the all-reduced message),
# keyed by (network, workers), as the source papers' code plans with them [C]:
#
# "10GbE", "56GbIB": lzhangbv/dear_pytorch mgwfbp/dopt.py `_generate_groups_mgwfbp`
#   (p_alpha_beta_10Gbps, p_alpha_beta_56Gbps; commit 249a7e94), the MG-WFBP baseline of DeAR's
#   64-GPU evaluation, used as T = a + b * bytes (their utils.predict_allreduce_time_with_size).
#   Written as the authors wrote them: the 32- and 64-worker alphas are a base alpha x 3 and the
#   56 Gb 32- and 64-worker betas a base beta x 1.5 and x 1.8 (hand adjustments in their code);
#   the 2- and 4-worker entries are the same in both tables. Their 56 Gb table is what
#   `rdma = 1` selects; DeAR's paper calls that network 100 Gb/s InfiniBand [V abstract].
# "US-Byte": ZJU-CNLAB/US-Byte dist_trainer_US-Byte.py `Get_a_and_b` (commit 625318ff), fitted on
#   the authors' cluster for 2, 4, 8 workers; their b is seconds per fp32 element (T_ar = a + b x
#   S_p x units), divided by 4 here.
PAPER_FITS = {
    ("10GbE", 2): (2.554691138304671e-06, 9.837548167872609e-11),
    ("10GbE", 4): (4.204298980348825e-05, 2.0589360830118177e-10),
    ("10GbE", 8): (0.5230272768511732e-3, 8.570746975492128e-10),
    ("10GbE", 16): (0.9080981007148093e-3, 7.395651186836712e-10),
    ("10GbE", 32): (0.0013476410788581382 * 3, 8.643300782166769e-10),
    ("10GbE", 64): (0.0023476410788581382 * 3, 9.643300782166769e-10),
    ("56GbIB", 2): (2.554691138304671e-06, 9.837548167872609e-11),
    ("56GbIB", 4): (4.204298980348825e-05, 2.0589360830118177e-10),
    ("56GbIB", 8): (9.75367204301171e-05, 3.0568230536676206e-10),
    ("56GbIB", 16): (0.00023583677659915685 * 3, 4.0594787739537565e-10),
    ("56GbIB", 32): (0.00040632079996292579, 1.5 * 3.2713239529771973e-10),
    ("56GbIB", 64): (0.00080632079996292579, 1.8 * 3.2713239529771973e-10),
    ("US-Byte", 2): (556.6e-6, 0.352e-10 / 4),
    ("US-Byte", 4): (948.98e-6, 1.541e-10 / 4),
    ("US-Byte", 8): (1318.6e-6, 2.406e-10 / 4),
}
PAPER_FIT_SOURCES = {
    "10GbE": "lzhangbv/dear_pytorch mgwfbp/dopt.py p_alpha_beta_10Gbps [C]",
    "56GbIB": "lzhangbv/dear_pytorch mgwfbp/dopt.py p_alpha_beta_56Gbps (rdma = 1) [C]",
    "US-Byte": "ZJU-CNLAB/US-Byte dist_trainer_US-Byte.py Get_a_and_b (b per element / 4) [C]",
}


# Fitted from this tool's own network: `dlcp bench collectives` on ns-3 (docs/collectives.md, "Bus
# bandwidth"), ring all-reduce in locality order, policy dlcp, keyed as PAPER_FITS. "ns3-10G":
# leaf-spine of 16 hosts per leaf (8 at 16 workers) under 2 spines, every link 10 Gbit/s, MTU
# 1500; 16 workers over 4 and 16 MB, 64 over 1 and 4 MB
# (docs/notes/2026-11-27-collectives-line-rate.md).
NS3_FITS: dict[tuple[str, int], tuple[float, float]] = {
    ("ns3-10G", 16): (0.12916666666666678e-3, 1.5812083333333341e-09),
    ("ns3-10G", 64): (0.6109999999999998e-3, 1.6745000000000006e-09),
}


def load_fit(path, workers: int, collective: str = "ring", variant: str | None = None) -> CostModel:
    """The (alpha, beta) that `dlcp bench collectives --fit FILE` wrote for `collective` at
    `workers` workers (and `variant`, needed when the file has several). ValueError with one line
    naming the file and what it has otherwise."""
    import json
    from pathlib import Path

    p = Path(path)
    try:
        fits = json.loads(p.read_text())["fits"]
    except OSError as e:
        raise ValueError(f"{p}: cannot read ({e.strerror or e})") from None
    except (json.JSONDecodeError, KeyError, TypeError):
        raise ValueError(f"{p}: not a fit file of dlcp bench collectives --fit (no 'fits' list)") from None
    match = [
        f
        for f in fits
        if f.get("collective") == collective
        and f.get("workers") == workers
        and (variant is None or f.get("variant") == variant)
    ]
    if len(match) != 1:
        have = ", ".join(f"{f.get('collective')}/{f.get('workers')}/{f.get('variant')}" for f in fits) or "none"
        want = f"{collective}/{workers}" + (f"/{variant}" if variant else "")
        why = "several fits" if match else "no fit"
        raise ValueError(f"{p}: {why} for {want} (collective/workers/variant: {have})")
    return CostModel(alpha=match[0]["alpha_s"], beta=match[0]["beta_s_per_byte"], workers=workers)


def named_fit(name: str, workers: int) -> CostModel:
    """A fit by name: a paper's (PAPER_FITS) or this tool's ns-3 network's (NS3_FITS)."""
    for table in (PAPER_FITS, NS3_FITS):
        if (name, workers) in table:
            a, b = table[(name, workers)]
            return CostModel(alpha=a, beta=b, workers=workers)
    known = ", ".join(f"{n}/{p}" for n, p in (*PAPER_FITS, *NS3_FITS))
    raise ValueError(f"cost model: no fit named {name}/{workers} (known: {known})")


def paper_fit(network: str, workers: int) -> CostModel:
    """The fitted constants of PAPER_FITS for (network, workers), e.g. ('10GbE', 64)."""
    try:
        a, b = PAPER_FITS[(network, workers)]
    except KeyError:
        known = ", ".join(f"{n}/{p}" for n, p in PAPER_FITS)
        raise ValueError(f"cost model: no paper fit for {network}/{workers} (known: {known})") from None
    return CostModel(alpha=a, beta=b, workers=workers)
