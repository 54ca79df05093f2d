"""Percentiles and distribution summaries: the one percentile method every report uses, and the
rule for when a percentile is reported at all.

Method: `numpy.percentile(values, q, method="linear")`, numpy's default (type 7 of Hyndman & Fan,
1996): sort the n values, take the fractional rank h = (n - 1) * q / 100 and interpolate linearly
between the values at floor(h) and ceil(h). p0 is the minimum, p100 the maximum. A percentile of no
values is None (never NaN, so summary.json stays strict JSON).

Too few samples: the q-th percentile is reported only when at least MIN_BEYOND (10) samples lie
beyond it, n * (1 - q/100) >= 10: p50 needs 20 samples, p90 100, p99 1,000, p99.9 10,000. Below
that it is an interpolation between the few largest values, whose count above the true percentile
varies by +-sqrt(n (1 - q/100)): with 2 samples beyond it, it could as well be p97.6 as p100.
A refused percentile is None and its key is listed in the distribution's `too_few`; reports
print "too few (n < 1,000)" instead of a number. The maximum and the mean are always given.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Final

import numpy as np

PERCENTILE_METHOD: Final = "linear"
PERCENTILE_METHOD_TEXT = (
    "numpy.percentile with method='linear' (numpy's default; Hyndman & Fan type 7: "
    "linear interpolation between the order statistics at rank (n-1)*q/100)"
)
# Percentiles every distribution summary carries, and their key names (p999 = p99.9).
QUANTILES = ((50.0, "p50"), (90.0, "p90"), (99.0, "p99"), (99.9, "p999"))
MIN_BEYOND = 10  # samples that must lie beyond a percentile for it to be reported
MIN_SAMPLES_RULE = (
    f"a percentile q is reported only when at least {MIN_BEYOND} samples lie beyond it "
    f"(n x (1 - q/100) >= {MIN_BEYOND}: p50 needs 20 samples, p90 100, p99 1,000, p99.9 10,000)"
)


def min_samples(q: float, min_beyond: int = MIN_BEYOND) -> int:
    """The smallest sample count for which the q-th percentile is reported."""
    if min_beyond <= 0:
        return 1
    return max(1, math.ceil(min_beyond * 100 / (100 - q) - 1e-9)) if q < 100 else 1


def enough_for(n: int, q: float, min_beyond: int = MIN_BEYOND) -> bool:
    return n >= min_samples(q, min_beyond)


def as_finite(values: Iterable[float]) -> np.ndarray:
    """Values as a float array without NaN (NaN marks a missing cell in the records)."""
    arr = np.asarray(values, dtype=float).ravel()
    return arr[np.isfinite(arr)]


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (0..100) with the report's method, or None when there are no values."""
    arr = as_finite(values)
    if arr.size == 0:
        return None
    return float(np.percentile(arr, q, method=PERCENTILE_METHOD))


def honest_percentile(values: Iterable[float], q: float, min_beyond: int = MIN_BEYOND) -> float | None:
    """The q-th percentile, or None when there are too few values for it (module docstring)."""
    arr = as_finite(values)
    if arr.size == 0 or not enough_for(arr.size, q, min_beyond):
        return None
    return float(np.percentile(arr, q, method=PERCENTILE_METHOD))


def distribution(values: Iterable[float], scale: float = 1.0, min_beyond: int = MIN_BEYOND) -> dict:
    """count, mean, p50, p90, p99, p999 and max of the values, each multiplied by `scale`
    (e.g. 1e-3 to turn microseconds into milliseconds). Empty input gives count 0 and Nones.
    Percentiles with too few samples (module docstring; `min_beyond` = 0 turns the rule off) are
    None and listed in `too_few`."""
    arr = as_finite(values) * scale
    out: dict = {"count": int(arr.size)}
    if arr.size == 0:
        out.update({"mean": None, **{k: None for _, k in QUANTILES}, "max": None, "too_few": []})
        return out
    qs = np.percentile(arr, [q for q, _ in QUANTILES], method=PERCENTILE_METHOD)
    out["mean"] = float(arr.mean())
    refused = [k for q, k in QUANTILES if not enough_for(arr.size, q, min_beyond)]
    out.update({k: None if k in refused else float(v) for (_, k), v in zip(QUANTILES, qs)})
    out["max"] = float(arr.max())
    out["too_few"] = refused
    return out


def quantile_of(key: str) -> float:
    """50.0 for "p50", 99.9 for "p999"."""
    return {k: q for q, k in QUANTILES}[key]


def refused_text(n: int, key: str) -> str:
    """What a report prints instead of a percentile with too few samples."""
    return f"too few (n={n:,} < {min_samples(quantile_of(key)):,})"


def ecdf(values: Iterable[float]) -> tuple[np.ndarray, np.ndarray]:
    """Sorted values and their empirical CDF (i/n for the i-th smallest, 1-based)."""
    arr = np.sort(as_finite(values))
    return arr, np.arange(1, arr.size + 1) / max(arr.size, 1)


def drawable_ecdf(
    values: Iterable[float], body_points: int = 2000, tail_points: int = 2000
) -> tuple[np.ndarray, np.ndarray]:
    """`ecdf` thinned for drawing: the largest `tail_points` samples all kept (the tail panel shows
    them one by one), the rest at `body_points` evenly spaced ranks (a CDF step of at most
    1/body_points, below what a figure shows). A plot of 10^6 messages then renders in the time of
    a few thousand."""
    x, y = ecdf(values)
    n = x.size
    if n <= body_points + tail_points:
        return x, y
    body = np.linspace(0, n - tail_points - 1, body_points).round().astype(int)
    keep = np.concatenate([np.unique(body), np.arange(n - tail_points, n)])
    return x[keep], y[keep]


def ratio(value: float | None, base: float | None) -> float | None:
    """value / base, or None when either is missing or the base is zero."""
    if value is None or base is None or base == 0:
        return None
    return float(value) / float(base)
