"""The socket-wait histogram (dlcp/transport/core/waits.py): percentiles within one bin of the truth
on hand-made waits, the maximum exact."""

import pytest

from dlcp.transport.core.waits import BINS_PER_OCTAVE, WaitHistogram

STEP = 2 ** (1 / BINS_PER_OCTAVE)


def test_percentiles_are_within_one_bin_above_the_true_value():
    h = WaitHistogram()
    for _ in range(98):
        h.record(20e-6)
    h.record(0.004)
    h.record(0.050)
    assert h.count == 100 and h.max_s == 0.050
    assert 20e-6 <= h.quantile_s(0.5) <= 20e-6 * STEP
    assert 20e-6 <= h.quantile_s(0.98) <= 20e-6 * STEP
    assert 0.004 <= h.quantile_s(0.99) <= 0.004 * STEP
    assert h.quantile_s(1.0) == 0.050  # capped at the maximum, not the bin's edge
    d = h.as_dict()
    assert d["count"] == 100 and d["max_ms"] == 50.0 and 4.0 <= d["p99_ms"] <= 4.0 * STEP


def test_tiny_negative_and_huge_waits_land_in_the_end_bins():
    h = WaitHistogram()
    for w in (-0.5, 0.0, 5e-7, 1e9):
        h.record(w)
    assert h.bins[0] == 3 and h.bins[-1] == 1 and h.max_s == 1e9
    assert h.quantile_s(0.5) <= 1e-6 * STEP


def test_empty_histogram_says_nothing():
    d = WaitHistogram().as_dict()
    assert d == {"count": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}


@pytest.mark.parametrize("wait", [1.3e-6, 7e-5, 0.0123, 1.7])
def test_one_wait_is_its_own_every_percentile(wait):
    h = WaitHistogram()
    h.record(wait)
    for q in (0.01, 0.5, 0.99):
        assert h.quantile_s(q) == wait  # the bin's upper edge, capped at the maximum
