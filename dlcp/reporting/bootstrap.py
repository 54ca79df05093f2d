"""Paired bootstrap: a 95 % confidence interval for the ratio of a statistic between two variants
measured in repeated, paired runs, and the plain verdict it supports.

Data: n pairs; pair i is one run of variant A and one of variant B made back to back with the same
seed (`dlcp run --repeat`). A statistic f maps a set of runs of one variant to a number: a
percentile of everything the runs measured pooled together (MCT, iteration time), a sum ratio
(lost packets / packets) or a mean over runs (accuracy). The ratio is R = f(B's runs) / f(A's runs).

What is resampled: whole pairs. Each of `resamples` (2,000) times, n pair indices are drawn
uniformly with replacement, the same draw for both variants (so a pair stays together and what the
two runs of a pair shared, seed and machine state, cancels), and R is recomputed on the runs of
the drawn pairs. Runs are the independent units: the samples inside a run (its messages, its
iterations) are correlated and are never resampled one by one. The point is R on all n pairs.

The interval: log R +- t(n-1, 0.975) x se, where se is the standard deviation of the resampled
log R times sqrt(n / (n - 1)), and t the Student quantile with n - 1 degrees of freedom: a
bootstrap standard error with a small-sample critical value. Why not the plain 2.5th-97.5th
percentiles of the resampled R: with 5-8 pairs those gave intervals that missed a true ratio
of 1 in 9-14 % of simulated comparisons instead of 5 % (the bootstrap spread of n items is
(n-1)/n of the true one, and 5 pairs leave the spread itself uncertain); this interval missed it
in 3-5 % (pooled p50 and p99 of lognormal runs whose scale varies +-30 % between pairs, 5 and 10
pairs, 400 comparisons each; tests/unit/test_repeats.py repeats a smaller version). The random draws are seeded, so the same runs
give the same interval.

At least MIN_PAIRS (5) pairs are needed: with fewer, the resampled sets are so few and alike
that no interval is honest.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import t as student_t

RESAMPLES = 2000
CONFIDENCE = 0.95
MIN_PAIRS = 5
SEED = 20240617


@dataclass(frozen=True)
class RatioCI:
    point: float | None
    ci95: tuple[float, float] | None
    n_pairs: int
    resamples: int

    def as_dict(self) -> dict:
        return {
            "point": self.point,
            "ci95": list(self.ci95) if self.ci95 else None,
            "n_pairs": self.n_pairs,
            "resamples": self.resamples,
        }


def _ratio(b: float | None, a: float | None) -> float | None:
    if a is None or b is None or not math.isfinite(a) or not math.isfinite(b) or a == 0:
        return None
    return b / a


def paired_ratio(
    a_runs: Sequence,
    b_runs: Sequence,
    stat: Callable[[list], float | None],
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
    min_pairs: int = MIN_PAIRS,
) -> RatioCI:
    """R = stat(b_runs) / stat(a_runs) with its paired-bootstrap interval (module docstring).
    a_runs[i] and b_runs[i] form pair i. No interval with fewer than `min_pairs` pairs or when the
    point cannot be computed (a zero or missing baseline)."""
    if len(a_runs) != len(b_runs):
        raise ValueError(f"paired_ratio: {len(a_runs)} runs of A but {len(b_runs)} of B (they come in pairs)")
    n = len(a_runs)
    if n == 0:
        raise ValueError("paired_ratio: no pairs")
    point = _ratio(stat(list(b_runs)), stat(list(a_runs)))
    if point is None or n < min_pairs:
        return RatioCI(point, None, n, 0)
    rng = np.random.default_rng(seed)
    memo: dict[tuple, float | None] = {}  # a statistic depends only on which runs were drawn, not their order
    ratios: list[float] = []
    for draw in rng.integers(0, n, size=(resamples, n)):
        key = tuple(sorted(draw.tolist()))
        if key not in memo:
            memo[key] = _ratio(stat([b_runs[i] for i in key]), stat([a_runs[i] for i in key]))
        r = memo[key]
        if r is not None:
            ratios.append(r)
    good = [r for r in ratios if r > 0]
    if len(good) < resamples / 2 or point <= 0:  # undefined on most resamples: no honest interval
        return RatioCI(point, None, n, len(good))
    se = float(np.std(np.log(good))) * math.sqrt(n / (n - 1))
    return RatioCI(point, _log_t_interval(point, se, n, confidence), n, len(good))


def _log_t_interval(point: float, se: float, n: int, confidence: float) -> tuple[float, float]:
    """point x exp(-+ t(n - 1) x se): an interval symmetric in log ratio, `se` the log ratio's."""
    half = float(student_t.ppf(1 - (1 - confidence) / 2, n - 1)) * se
    return point * math.exp(-half), point * math.exp(half)


def geometric_mean_ratio(
    ratios: Sequence[float | None], confidence: float = CONFIDENCE, min_pairs: int = MIN_PAIRS
) -> RatioCI:
    """The other estimator: each pair's own ratio, combined as a geometric mean, with a Student-t
    interval on the log ratios (n - 1 degrees of freedom). Pooling (`paired_ratio`) lets the pairs
    with the longest tails set a percentile; here every pair weighs the same, which is what a
    comparison between backends whose runs differ by seed (ns-3's exact background phase) needs.
    Pairs without a positive ratio are left out; no interval below `min_pairs` of them."""
    logs = np.log([r for r in ratios if r is not None and math.isfinite(r) and r > 0])
    n = len(logs)
    if n == 0:
        return RatioCI(None, None, 0, 0)
    point = float(math.exp(logs.mean()))
    if n < min_pairs:
        return RatioCI(point, None, n, 0)
    return RatioCI(point, _log_t_interval(point, float(logs.std(ddof=1)) / math.sqrt(n), n, confidence), n, 0)


def verdict(ci: RatioCI, kind: str) -> str:
    """ "faster" / "slower" for times (kind "time"), "lower" / "higher" for anything else, when the
    interval lies wholly below / above 1; otherwise "no significant difference"."""
    if ci.ci95 is None:
        if ci.point is None:
            return "no ratio (baseline missing or zero)"
        return f"no interval ({ci.n_pairs} pair(s); at least {MIN_PAIRS} needed)"
    lo, hi = ci.ci95
    if hi < 1:
        return "faster" if kind == "time" else "lower"
    if lo > 1:
        return "slower" if kind == "time" else "higher"
    return "no significant difference"


def block_ratio(
    a_blocks: Sequence[np.ndarray],
    b_blocks: Sequence[np.ndarray],
    stat: Callable[[np.ndarray], float | None],
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
    min_blocks: int = MIN_PAIRS,
) -> RatioCI:
    """R = stat(all of B's samples) / stat(all of A's) for two single runs, with an interval from a
    bootstrap over blocks: each run's samples come in blocks (a rank's iterations after warm-up),
    and each resample draws as many blocks as the run has, with replacement, independently for
    the two runs (they are not paired: different runs). Interval as `paired_ratio`'s: log R +-
    t(n - 1) x the resampled log ratios' standard deviation x sqrt(n / (n - 1)), n the fewer
    blocks. It says how sure the pooled statistic is within these two runs (over their ranks),
    not across seeds: that is what repeated pairs (`paired_ratio`) measure."""
    n = min(len(a_blocks), len(b_blocks))
    if n == 0:
        raise ValueError("block_ratio: a run without blocks")

    def pooled(blocks, idx=None) -> float | None:
        chosen = blocks if idx is None else [blocks[i] for i in idx]
        x = np.concatenate([np.asarray(b, dtype=float) for b in chosen])
        x = x[np.isfinite(x)]
        return stat(x) if x.size else None

    point = _ratio(pooled(b_blocks), pooled(a_blocks))
    if point is None or n < min_blocks:
        return RatioCI(point, None, n, 0)
    rng = np.random.default_rng(seed)
    ratios = []
    for _ in range(resamples):
        ia = rng.integers(0, len(a_blocks), size=len(a_blocks))
        ib = rng.integers(0, len(b_blocks), size=len(b_blocks))
        r = _ratio(pooled(b_blocks, ib), pooled(a_blocks, ia))
        if r is not None and r > 0:
            ratios.append(r)
    if len(ratios) < resamples / 2 or point <= 0:
        return RatioCI(point, None, n, len(ratios))
    se = float(np.std(np.log(ratios))) * math.sqrt(n / (n - 1))
    return RatioCI(point, _log_t_interval(point, se, n, confidence), n, len(ratios))
