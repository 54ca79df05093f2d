import numpy as np
import pytest
import torch

from dlcp.wire.tagging import (
    TaggingConfig,
    layer_priority,
    magnitude_class,
    magnitude_drop_precedence,
    packet_layers,
    packet_magnitudes,
    tag_message,
)


@pytest.mark.parametrize(
    "n_layers,expected",
    [
        (1, [6]),
        (2, [6, 3]),
        (6, [6, 5, 4, 3, 2, 1]),
        (7, [6, 6, 5, 4, 3, 2, 1]),
    ],
)
def test_layer_priority_input_first(n_layers, expected):
    assert layer_priority(np.arange(n_layers), n_layers).tolist() == expected
    assert layer_priority(np.arange(n_layers), n_layers, "output_first").tolist() == expected[::-1]


def test_layer_priority_fifty_layers():
    p = layer_priority(np.arange(50), 50)
    # 6 - floor(l * 6 / 50): layers 0-8 -> 6, 9-16 -> 5, 17-24 -> 4, 25-33 -> 3, 34-41 -> 2, 42-49 -> 1
    assert p[[0, 8, 9, 16, 17, 24, 25, 33, 34, 41, 42, 49]].tolist() == [6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1]
    assert np.bincount(p, minlength=7)[1:].tolist() == [8, 8, 9, 8, 8, 9]


def test_layer_priority_rejects_bad_layers():
    with pytest.raises(ValueError):
        layer_priority([3], 3)
    with pytest.raises(ValueError):
        layer_priority([0], 0)


def test_packet_layers_uses_first_value():
    # layer 0: values 0..9, layer 1: 10..24, layer 2: 25..  (5 values per packet)
    assert packet_layers([0, 10, 25], [0, 1, 2], n_pkts=7, values_per_pkt=5).tolist() == [0, 0, 1, 1, 1, 2, 2]
    # a layer boundary inside a packet: the packet belongs to the layer of its first value
    assert packet_layers([0, 7], [4, 5], n_pkts=3, values_per_pkt=5).tolist() == [4, 4, 5]


def test_magnitudes_partial_last_packet_numpy_and_torch():
    g = np.array([1, -1, 2, -2, 3], dtype=np.float32)
    np.testing.assert_allclose(packet_magnitudes(g, 2), [1, 2, 3])
    np.testing.assert_allclose(packet_magnitudes(torch.from_numpy(g), 2), [1, 2, 3])


def test_drop_precedence_eight_distinct():
    mags = np.array([8, 7, 6, 5, 4, 3, 2, 1], dtype=float)
    assert magnitude_drop_precedence(mags).tolist() == [0, 0, 0, 0, 1, 1, 2, 3]
    assert magnitude_drop_precedence(mags[::-1]).tolist() == [3, 2, 1, 1, 0, 0, 0, 0]


@pytest.mark.parametrize(
    "n,counts", [(1, [1, 0, 0, 0]), (2, [1, 1, 0, 0]), (4, [2, 1, 1, 0]), (16, [8, 4, 2, 2]), (10, [5, 3, 1, 1])]
)
def test_drop_precedence_class_sizes(n, counts):
    dp = magnitude_drop_precedence(np.arange(n, 0, -1, dtype=float))
    assert np.bincount(dp, minlength=4).tolist() == counts


def test_drop_precedence_ties_share_the_protective_class():
    # four equal magnitudes straddle the 50 % boundary: all of them stay protected
    mags = np.array([5, 3, 3, 3, 3, 1, 1, 0.5])
    assert magnitude_drop_precedence(mags).tolist() == [0, 0, 0, 0, 0, 1, 1, 3]
    assert magnitude_drop_precedence(np.full(6, 2.0)).tolist() == [0] * 6


def test_all_zero_gradient():
    g = np.zeros(35, dtype=np.float32)
    tags = tag_message(g, [0], [0], 1, TaggingConfig(policy="dlcp"), values_per_pkt=10)
    assert tags.drop_prec.tolist() == [3, 3, 3, 3]  # nothing to lose: droppable
    assert tags.mag_class.tolist() == [0, 0, 0, 0]
    assert tags.prio.tolist() == [6] * 4


def test_magnitude_class():
    mags = np.array([1.0, 2.0, 4.0, 0.25, 1e9, 0.0, 1e-9])
    # median is 1.0: log2 ratios 0, 1, 2, -2, ~30 -> clamp 15, zero -> 0, ~-30 -> clamp 0
    assert magnitude_class(mags).tolist() == [8, 9, 10, 6, 15, 0, 0]


def test_policies():
    rng = np.random.default_rng(1)
    g = rng.standard_normal(80).astype(np.float32)
    starts, ids = [0, 40], [0, 1]
    fifo = tag_message(g, starts, ids, 2, TaggingConfig(policy="fifo"), values_per_pkt=10)
    assert set(fifo.prio) == {1} and set(fifo.drop_prec) == {0}
    layer = tag_message(g, starts, ids, 2, TaggingConfig(policy="layer"), values_per_pkt=10)
    assert layer.prio.tolist() == [6] * 4 + [3] * 4 and set(layer.drop_prec) == {0}
    mag = tag_message(g, starts, ids, 2, TaggingConfig(policy="magnitude"), values_per_pkt=10)
    assert set(mag.prio) == {1} and np.bincount(mag.drop_prec, minlength=4).tolist() == [4, 2, 1, 1]
    both = tag_message(g, starts, ids, 2, TaggingConfig(policy="dlcp"), values_per_pkt=10)
    np.testing.assert_array_equal(both.prio, layer.prio)
    np.testing.assert_array_equal(both.drop_prec, mag.drop_prec)
    biased = tag_message(
        g, starts, ids, 2, TaggingConfig(policy="dlcp", drop_layer_bias="input_half"), values_per_pkt=10
    )
    np.testing.assert_array_equal(biased.drop_prec[:4], np.minimum(mag.drop_prec[:4] + 1, 3))
    np.testing.assert_array_equal(biased.drop_prec[4:], mag.drop_prec[4:])


def test_torch_and_numpy_give_same_tags():
    g = torch.randn(1234)
    a = tag_message(g, [0, 500], [0, 1], 2)
    b = tag_message(g.numpy(), [0, 500], [0, 1], 2)
    for f in ("prio", "drop_prec", "mag_class", "layer_id"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))


def test_bad_config_names_key():
    with pytest.raises(ValueError, match="dlcp.policy"):
        TaggingConfig(policy="lifo")
    with pytest.raises(ValueError, match="dlcp.layer_order"):
        TaggingConfig(layer_order="middle_out")


def test_the_worked_example_of_docs_tagging_md():
    m = np.array([8, 1, 4, 2, 0, 16, 0.5, 4])
    assert magnitude_drop_precedence(m).tolist() == [0, 1, 0, 1, 3, 0, 2, 0]
    assert magnitude_class(m).tolist() == [9, 6, 8, 7, 0, 10, 5, 8]
    assert layer_priority(np.arange(10), 10).tolist() == [6, 6, 5, 5, 4, 3, 3, 2, 2, 1]
