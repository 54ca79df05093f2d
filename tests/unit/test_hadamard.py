"""OptiReduce's randomised Hadamard transform (dlcp/workloads/hadamard.py): an orthogonal map that
keeps a message's length, sums commute with it, and a lost packet spreads over its block."""

import numpy as np
import pytest

from dlcp.experiment.config import validate
from dlcp.settings import ConfigError
from dlcp.workloads.hadamard import MAX_BLOCK, blocks, decode, encode, signs


def test_blocks_are_powers_of_two_that_add_up():
    assert blocks(156) == [128, 16, 8, 4]
    assert blocks(2 * MAX_BLOCK + 3) == [MAX_BLOCK, MAX_BLOCK, 2, 1]
    for n in (1, 850, 2416, 30840, 100_000):
        b = blocks(n)
        assert sum(b) == n and all(x & (x - 1) == 0 for x in b)


@pytest.mark.parametrize("n", [1, 156, 2416, 30840])
def test_decode_inverts_encode_and_keeps_the_norm(n):
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    y = x.copy()
    encode(y, 1, 7, 3)
    assert np.linalg.norm(y) == pytest.approx(np.linalg.norm(x), rel=1e-5)
    assert n == 1 or not np.allclose(y, x)  # one value: its sign at most
    decode(y, 1, 7, 3)
    np.testing.assert_allclose(y, x, atol=1e-5)


def test_the_sum_of_transformed_contributions_is_the_transformed_sum():
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(2416).astype(np.float32) for _ in range(4)]
    ys = [x.copy() for x in xs]
    for y in ys:
        encode(y, 5, 2, 1)  # every rank: the same signs for (seed, iteration, message)
    total = np.sum(ys, axis=0)
    decode(total, 5, 2, 1)
    np.testing.assert_allclose(total, np.sum(xs, axis=0), atol=1e-4)


def test_signs_depend_on_the_iteration_and_the_message():
    a, b, c = signs(1, 0, 0, 64), signs(1, 1, 0, 64), signs(1, 0, 1, 64)
    assert set(np.unique(a)) == {-1.0, 1.0} and not np.array_equal(a, b) and not np.array_equal(a, c)
    np.testing.assert_array_equal(a, signs(1, 0, 0, 64))


def test_a_lost_packet_spreads_over_its_block_instead_of_wiping_its_values():
    x = np.random.default_rng(3).standard_normal(MAX_BLOCK).astype(np.float32)
    y = x.copy()
    encode(y, 1, 0, 0)
    y[:350] = 0  # the first packet lost (350 values), filled with zeros
    decode(y, 1, 0, 0)
    err = np.abs(y - x)
    assert (err > 0).mean() > 0.99  # every value a little wrong ...
    assert err.max() < np.abs(x).max()  # ... none wiped out as the untransformed packet's 350 are
    assert np.linalg.norm(y - x) ** 2 == pytest.approx(350 / MAX_BLOCK * np.linalg.norm(x) ** 2, rel=0.3)


def test_stale_fill_is_refused_with_the_transform():
    with pytest.raises(ConfigError, match="workload.hadamard: the transform needs a fill rule"):
        validate({"name": "t", "workload": {"hadamard": True}, "dlcp": {"fill": "stale"}})
    assert validate({"name": "t", "workload": {"hadamard": True}})["workload"]["hadamard"] is True
