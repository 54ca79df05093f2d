"""Report statistics helpers (dlcp/reporting/stats.py)."""

import numpy as np

from dlcp.reporting.stats import drawable_ecdf, ecdf


def test_drawable_ecdf_keeps_the_tail_and_thins_the_body():
    values = np.random.default_rng(3).lognormal(size=100_000)
    x, y = drawable_ecdf(values, body_points=500, tail_points=300)
    fx, fy = ecdf(values)
    assert x.size <= 800 and np.all(np.diff(x) >= 0)
    np.testing.assert_array_equal(x[-300:], fx[-300:])  # every tail sample, exactly
    np.testing.assert_array_equal(y[-300:], fy[-300:])
    assert x[0] == fx[0] and y[-1] == 1.0
    # each kept point is a point of the full CDF: at most 1/500 of a step between kept body ranks
    assert np.max(np.diff(y[:-300])) <= 1 / 499 + 1e-12
    small = np.arange(10.0)
    np.testing.assert_array_equal(drawable_ecdf(small)[0], ecdf(small)[0])
