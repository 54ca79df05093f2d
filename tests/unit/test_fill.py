"""Fill policies pinned with hand-made aggregates (formulas: dlcp/workloads/trainer/fill.py)."""

import numpy as np
import pytest
import torch

from dlcp.workloads.contract import Aggregate
from dlcp.workloads.settings import FILLS
from dlcp.workloads.trainer.fill import fill_average

# 4 workers, 4 values: all arrived / one missing / two missing / nobody delivered
AGG = Aggregate(7, np.array([8.0, 6.0, 3.0, 0.0], np.float32), np.array([4, 3, 2, 0], np.uint16), 4)
PREV = np.array([1.0, 10.0, 20.0, 5.0], np.float32)
OWN = np.array([2.0, 2.0, -1.0, 3.0], np.float32)


def fill(policy, **kw):
    return fill_average(AGG, policy, **kw).numpy()


def test_zero_counts_missing_contributions_as_zero():
    np.testing.assert_array_equal(fill("zero"), [2.0, 1.5, 0.75, 0.0])


def test_rescale_divides_by_what_arrived():
    np.testing.assert_array_equal(fill("rescale"), [2.0, 2.0, 1.5, 0.0])


def test_stale_replaces_missing_by_last_average():
    # (total + (W - count) * prev) / W
    np.testing.assert_array_equal(fill("stale", previous=PREV), [2.0, (6 + 10) / 4, (3 + 2 * 20) / 4, 5.0])
    # before the first iteration the previous value is 0: same as zero
    np.testing.assert_array_equal(fill("stale"), fill("zero"))


def test_local_replaces_missing_by_own_gradient():
    np.testing.assert_array_equal(fill("local", own=OWN), [2.0, (6 + 2) / 4, (3 - 2) / 4, 3.0])


def test_local_at_the_ps_is_rescale():
    np.testing.assert_array_equal(fill("local"), fill("rescale"))


@pytest.mark.parametrize("policy", FILLS)
def test_lossless_is_exactly_the_mean_for_every_policy(policy):
    rng = np.random.default_rng(0)
    total = rng.standard_normal(1000).astype(np.float32)
    agg = Aggregate(0, total, np.full(1000, 5, np.uint16), 5)
    got = fill_average(
        agg,
        policy,
        previous=rng.standard_normal(1000).astype(np.float32),
        own=rng.standard_normal(1000).astype(np.float32),
    ).numpy()
    np.testing.assert_array_equal(got, total / np.float32(5))


@pytest.mark.parametrize("policy", FILLS)
def test_inputs_are_not_modified_and_out_is_used(policy):
    agg = Aggregate(7, AGG.total.copy(), AGG.count.copy(), 4)
    prev, own, out = PREV.copy(), OWN.copy(), torch.full((4,), 99.0)
    res = fill_average(agg, policy, previous=prev, own=own, out=out)
    assert res is out and not torch.any(out == 99.0)
    np.testing.assert_array_equal(agg.total, AGG.total)
    np.testing.assert_array_equal(agg.count, AGG.count)
    np.testing.assert_array_equal(prev, PREV)
    np.testing.assert_array_equal(own, OWN)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="dlcp.fill: 'mean' is not one of local, rescale, stale, zero"):
        fill_average(AGG, "mean")
    with pytest.raises(ValueError, match="4 totals but 3 counts"):
        fill_average(Aggregate(1, AGG.total, AGG.count[:3], 4), "zero")
    with pytest.raises(ValueError, match="stale fill of message 7: 2 values"):
        fill_average(AGG, "stale", previous=np.zeros(2, np.float32))
