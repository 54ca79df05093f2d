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
    with pytest.raises(ValueError, match="dlcp.fill: 'mean' is not one of bubble, local, rescale, stale, zero"):
        fill_average(AGG, "mean")
    with pytest.raises(ValueError, match="4 totals but 3 counts"):
        fill_average(Aggregate(1, AGG.total, AGG.count[:3], 4), "zero")
    with pytest.raises(ValueError, match="stale fill of message 7: 2 values"):
        fill_average(AGG, "stale", previous=np.zeros(2, np.float32))


# --- bubble (LTP's Bubble Filling, reconstructed): per worker at the PS, before the sum -----------


def test_bubble_fills_a_workers_hole_with_its_last_delivered_value():
    from dlcp.workloads.fills.bubble import BubbleMemory

    mem = BubbleMemory()
    v1, lost1 = np.array([1, 2, 3, 4], np.float32), np.array([False, False, True, False])
    out, delivered = mem.fill(0, 7, v1, lost1)
    np.testing.assert_array_equal(delivered, ~lost1)  # nothing remembered yet: still a hole
    v2, lost2 = np.array([10, 0, 0, 40], np.float32), np.array([False, True, True, False])
    out, delivered = mem.fill(0, 7, v2, lost2)
    np.testing.assert_array_equal(out, [10, 2, 0, 40])  # value 1 from the first push; 2 never arrived
    np.testing.assert_array_equal(delivered, [True, True, False, True])
    out, _ = mem.fill(1, 7, v2, lost2)  # another worker: its own memory
    np.testing.assert_array_equal(out, [10, 0, 0, 40])
    assert mem.filled == 1


def test_ps_sum_with_bubbles_counts_filled_values_and_rescales_the_rest():
    from dlcp.comm.ps import bubble_memory, sum_pushes
    from dlcp.transport.api import RecvResult
    from dlcp.workloads.contract import MessageLayout
    from dlcp.workloads.fills import fill_mean

    lay = {0: MessageLayout(0, 4, (0,), (0,))}

    def push(src, values, received):
        return RecvResult(src, 0, 0, 0, np.array(values, np.float32), np.array(received), None, 2, 0, 0, False, 1)

    mem = bubble_memory("bubble")
    assert mem is not None and bubble_memory("rescale") is None
    sum_pushes(lay, 2, {(0, 0): push(0, [1, 1, 1, 1], [True, True]), (1, 0): push(1, [2, 2, 2, 2], [True, True])}, mem)
    agg = sum_pushes(
        lay, 2, {(0, 0): push(0, [5, 5, 0, 0], [True, False]), (1, 0): push(1, [6, 6, 6, 6], [True, True])}, mem
    )[0]
    np.testing.assert_array_equal(agg.total, [11, 11, 7, 7])  # worker 0's second packet from its first push
    np.testing.assert_array_equal(agg.count, [2, 2, 2, 2])
    assert fill_mean("bubble", agg.total, agg.count, 2).tolist() == [5.5, 5.5, 3.5, 3.5]
