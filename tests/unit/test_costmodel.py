import pytest

from dlcp.comm.costmodel import CostModel, paper_fit


def test_ring_from_link():
    # P=4, 8 Gb/s -> 1 ns/B per link, 10 us per step: alpha = 2(P-1)*10us, beta = 2(P-1)/P * 1ns
    c = CostModel.from_link(8e9, 1e-5, 4)
    assert c.alpha == pytest.approx(6e-5) and c.beta == pytest.approx(1.5e-9)
    assert c.allreduce_s(1e6) == pytest.approx(6e-5 + 1.5e-3)
    # reduce-scatter and all-gather: each exactly half the ring all-reduce, (P-1) steps of 2(P-1)
    assert c.reduce_scatter_s(1e6) == pytest.approx(3 * 1e-5 + 0.75 * 1e6 * 1e-9)
    assert c.all_gather_s(1e6) == pytest.approx(c.allreduce_s(1e6) / 2)
    assert c.op_s("reduce_scatter", 1e6) + c.op_s("all_gather", 1e6) == pytest.approx(c.op_s("allreduce", 1e6))


def test_halving_doubling_from_link():
    c = CostModel.from_link(8e9, 1e-5, 8, algorithm="halving_doubling")
    assert c.alpha == pytest.approx(6e-5) and c.beta == pytest.approx(2 * 7 / 8 * 1e-9)
    with pytest.raises(ValueError, match="power-of-two"):
        CostModel.from_link(8e9, 1e-5, 6, algorithm="halving_doubling")
    with pytest.raises(ValueError, match="algorithm"):
        CostModel.from_link(8e9, 1e-5, 4, algorithm="tree")


def test_ps_push_pull_bottleneck_is_the_server_nic():
    c = CostModel.from_link(8e9, 1e-5, 4)
    assert c.push_s(1e6) == pytest.approx(1e-5 + 4 * 1e6 * 1e-9)  # one server takes 4 x M
    assert c.push_s(1e6, servers=4) == pytest.approx(1e-5 + 1e6 * 1e-9)  # 4 shards: the worker NIC
    assert c.pull_s(1e6, servers=2) == pytest.approx(1e-5 + 2 * 1e6 * 1e-9)
    # from a fitted all-reduce the link constants are backed out assuming ring
    fitted = CostModel(alpha=6e-5, beta=1.5e-9, workers=4)
    assert fitted.link_constants() == pytest.approx((1e-5, 1e-9))
    assert fitted.push_s(1e6) == pytest.approx(c.push_s(1e6))
    with pytest.raises(ValueError, match="PS costs need"):
        CostModel(alpha=1e-3, beta=1e-9).push_s(10)


def test_paper_fit_and_validation():
    c = paper_fit("10GbE", 16)
    assert c.alpha == pytest.approx(0.908e-3, rel=1e-3) and c.beta == pytest.approx(7.40e-10, rel=1e-3)
    with pytest.raises(ValueError, match="no paper fit for 10GbE/128"):
        paper_fit("10GbE", 128)
    with pytest.raises(ValueError, match="alpha: must be a finite number >= 0"):
        CostModel(alpha=-1, beta=0)
    with pytest.raises(ValueError, match="workers"):
        CostModel(alpha=1, beta=0, workers=0)
    with pytest.raises(ValueError, match="primitive 'bcast'"):
        CostModel(1, 1).op_s("bcast", 1)


def test_the_32_and_64_worker_fits_of_the_dear_pytorch_table_are_there():
    # mgwfbp/dopt.py writes them as a base alpha x 3 (10GbE) and a base beta x 1.5 / x 1.8 (56 Gb IB)
    assert paper_fit("10GbE", 32).alpha == pytest.approx(4.0429e-3, rel=1e-4)
    assert paper_fit("10GbE", 64).alpha == pytest.approx(7.0429e-3, rel=1e-4)
    assert paper_fit("10GbE", 64).beta == pytest.approx(9.6433e-10, rel=1e-4)
    assert paper_fit("56GbIB", 64).alpha == pytest.approx(8.0632e-4, rel=1e-4)
    assert paper_fit("56GbIB", 64).beta == pytest.approx(1.8 * 3.2713e-10, rel=1e-4)
    assert paper_fit("56GbIB", 32).beta == pytest.approx(1.5 * 3.2713e-10, rel=1e-4)
    assert paper_fit("10GbE", 64).workers == 64
    # US-Byte's own fit is per fp32 element in their code, per byte here
    assert paper_fit("US-Byte", 8).beta == pytest.approx(2.406e-10 / 4)
