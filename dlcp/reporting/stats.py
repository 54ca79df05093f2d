"""Percentiles and distribution summaries: the one percentile method every report uses.

Method: `numpy.percentile(values, q, method="linear")`, numpy's default (type 7 of Hyndman & Fan,
1996): sort the n values, take the fractional rank h = (n - 1) * q / 100 and interpolate linearly
between the values at floor(h) and ceil(h). p0 is the minimum, p100 the maximum. A percentile of no
values is None (never NaN, so summary.json stays strict JSON).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

PERCENTILE_METHOD = "linear"
PERCENTILE_METHOD_TEXT = ("numpy.percentile with method='linear' (numpy's default; Hyndman & Fan type 7: "
                          "linear interpolation between the order statistics at rank (n-1)*q/100)")
# Percentiles every distribution summary carries, and their key names (p999 = p99.9).
QUANTILES = ((50.0, "p50"), (90.0, "p90"), (99.0, "p99"), (99.9, "p999"))


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


def distribution(values: Iterable[float], scale: float = 1.0) -> dict:
    """count, mean, p50, p90, p99, p999 and max of the values, each multiplied by `scale`
    (e.g. 1e-3 to turn microseconds into milliseconds). Empty input gives count 0 and Nones."""
    arr = as_finite(values) * scale
    out: dict = {"count": int(arr.size)}
    if arr.size == 0:
        out.update({"mean": None, **{k: None for _, k in QUANTILES}, "max": None})
        return out
    qs = np.percentile(arr, [q for q, _ in QUANTILES], method=PERCENTILE_METHOD)
    out["mean"] = float(arr.mean())
    out.update({k: float(v) for (_, k), v in zip(QUANTILES, qs)})
    out["max"] = float(arr.max())
    return out


def ecdf(values: Iterable[float]) -> tuple[np.ndarray, np.ndarray]:
    """Sorted values and their empirical CDF (i/n for the i-th smallest, 1-based)."""
    arr = np.sort(as_finite(values))
    return arr, np.arange(1, arr.size + 1) / max(arr.size, 1)


def ratio(value: float | None, base: float | None) -> float | None:
    """value / base, or None when either is missing or the base is zero."""
    if value is None or base is None or base == 0:
        return None
    return float(value) / float(base)
