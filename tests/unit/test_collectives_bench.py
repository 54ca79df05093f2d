"""`dlcp bench collectives`' arithmetic without a network: nccl-tests' bus-bandwidth factors, the
operation times read from a run's records, the alpha-beta fit, the fabric it builds, and the
one-line errors of its arguments. The bench itself runs in tests/ns3/test_ns3_collectives_bench.py."""

import csv
import json

import pytest

from dlcp.comm.costmodel import CostModel, load_fit, named_fit
from dlcp.experiment import config as configmod
from dlcp_cli import collectives_bench as B


def test_bus_factors_are_nccl_tests_and_the_ps_link():
    from dlcp.comm.plans.collective import COLLECTIVES

    # every registered collective is benched: none is listed by hand
    assert set(B.collectives_to_bench()) == {*COLLECTIVES.names(), "ps"}
    assert B.collectives_to_bench()["dssync"].bus_factor(16) == 1.0  # an all-reduce in groups of 2
    ring = B.collectives_to_bench()["ring"]
    assert ring.bus_factor(2) == 1.0 and ring.bus_factor(16) == pytest.approx(30 / 16)
    assert B.collectives_to_bench()["multitree"].bus_factor(128) == pytest.approx(254 / 128)
    assert B.collectives_to_bench()["ps"].bus_factor(16) == 16 and B.collectives_to_bench()["ps"].extra_hosts == 1


def _iterations(run, rows):
    (run / "records").mkdir(parents=True)
    by_host = {}
    for host, it, start, end, compute in rows:
        by_host.setdefault(host, []).append(
            {"host": host, "iter": it, "start_us": start, "end_us": end, "compute_us": compute}
        )
    for host, rs in by_host.items():
        with open(run / "records" / f"{host}-iterations.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rs[0]))
            w.writeheader()
            w.writerows(rs)


def test_op_times_are_the_last_workers_end_to_end_less_compute(tmp_path):
    _iterations(
        tmp_path,
        [
            ("h1", 0, 0, 900, 0),
            ("h2", 0, 0, 1000, 0),
            ("h1", 1, 900, 2100, 50),
            ("h2", 1, 1000, 2000, 100),
            ("h1", 2, 2100, 2600, 0),
            ("h2", 2, 2000, 3100, 0),
        ],
    )
    assert B.op_times_s(tmp_path) == pytest.approx([(2100 - 1000 - 100) / 1e6, (3100 - 2100) / 1e6])


def test_one_iteration_is_timed_from_the_start(tmp_path):
    _iterations(tmp_path, [("h1", 0, 0, 700, 0), ("h2", 0, 0, 800, 0)])
    assert B.op_times_s(tmp_path) == [800 / 1e6]


def test_fit_recovers_alpha_and_beta_and_needs_two_sizes():
    a, b = 25e-6, 8.5e-10
    samples = [(s, a + b * s) for s in (1_000_000, 16_000_000, 64_000_000) for _ in range(2)]
    f = B.fit_alpha_beta(samples)
    assert f["alpha_s"] == pytest.approx(a, rel=1e-6) and f["beta_s_per_byte"] == pytest.approx(b, rel=1e-9)
    assert f["max_rel_residual"] == pytest.approx(0, abs=1e-9)
    with pytest.raises(ValueError, match="two message sizes"):
        B.fit_alpha_beta([(1000, 1.0), (1000, 1.1)])


def test_rows_give_algbw_busbw_and_the_fraction_of_the_host_link():
    fabric = B.Fabric(host_mbps=10_000)
    counts = dict.fromkeys(("lost_pkts", "retx_pkts", "forced", "early_drops", "tail_drops", "ce_marked"), 0)
    pts = [
        B.Point("ring", 16, 64 * B.MB, "dlcp", seed, [0.1, 0.12], dict(counts, lost_pkts=seed), {}, "")
        for seed in (1, 2)
    ]
    (row,) = B.rows_of(pts, fabric)
    assert row["time_ms"] == pytest.approx(110) and row["time_min_ms"] == 100 and row["time_max_ms"] == 120
    assert row["algbw_gbps"] == pytest.approx(64e6 * 8 / 0.11 / 1e9, rel=1e-3)
    assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 30 / 16, rel=1e-3)
    assert row["busbw_frac"] == pytest.approx(row["busbw_gbps"] / 10, rel=1e-3)
    assert row["ops"] == 4 and row["seeds"] == 2 and row["lost_pkts"] == 2


def test_the_fabric_is_a_valid_experiment_with_one_flow_of_the_ring_per_link(tmp_path):
    fab = B.Fabric()
    topo, rate = fab.topology(128)
    assert topo == {"kind": "leaf_spine", "spines": 2, "leaves": 8, "hosts_per_leaf": 16} and rate == 10_000
    assert fab.topology(17)[0]["leaves"] == 2 and fab.topology(17)[0]["hosts_per_leaf"] == 9
    cfg = B.base_config("ns3", B.collectives_to_bench()["ps"], 16, B.Fabric(host_mbps=100_000), 2, 1)
    cfg["workload"].update(compute="profile", payload="sizes", profile=str(B.profile_file(tmp_path, 64 * B.MB)))
    done = configmod.validate(cfg)
    assert done["workload"]["mode"] == "ps" and done["links"]["fabric_mbps"] == 100_000
    assert done["comm"]["ring"]["order"] == "locality" and done["dlcp"]["load_balancing"] == "spray_random"
    assert json.loads((tmp_path / f"message-{64 * B.MB}B.json").read_text())["sizes"] == [16_000_000]
    emulated = B.base_config("builtin", B.collectives_to_bench()["ring"], 4, B.Fabric(kind="star", host_mbps=50), 3, 1)
    emulated["workload"]["layers"] = [1000]
    assert configmod.validate(emulated)["topology"] == {"kind": "star", "hosts": 4}


def _args(*argv):
    return B.settings_of(B.parser().parse_args(list(argv)))


def test_arguments_fail_in_one_line_naming_the_argument():
    st = _args("--workers", "16,64", "--sizes-mb", "1,64")
    assert st["workers"] == [16, 64] and st["sizes"] == [1_000_000, 64_000_000] and st["backend"] == "ns3"
    assert _args("--backend", "builtin")["fabric"].kind == "star"
    for argv, what in (
        (("--collectives", "ring,tree"), "--collectives: 'tree'"),
        (("--variants", "dlcp,nope"), "--variants: 'nope'"),
        (("--workers", "16,x"), "--workers 16,x"),
        (("--sizes-mb", "0"), "--sizes-mb 0"),
        (("--iterations", "0"), "--iterations"),
    ):
        with pytest.raises(ValueError, match=what):
            _args(*argv)


def test_a_fit_file_feeds_the_cost_model(tmp_path):
    fits = [
        {"collective": "ring", "workers": 64, "variant": v, "alpha_s": a, "beta_s_per_byte": 1e-9}
        for v, a in (("lossless", 1e-4), ("dlcp", 2e-4))
    ]
    path = tmp_path / "fits.json"
    path.write_text(json.dumps({"fits": fits}))
    assert load_fit(path, 64, variant="dlcp") == CostModel(alpha=2e-4, beta=1e-9, workers=64)
    with pytest.raises(ValueError, match="several fits for ring/64"):
        load_fit(path, 64)
    with pytest.raises(ValueError, match="no fit for ring/16"):
        load_fit(path, 16)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="not a fit file"):
        load_fit(tmp_path / "bad.json", 64)
    assert named_fit("10GbE", 16).alpha == pytest.approx(0.9080981007148093e-3)
    ours = named_fit("ns3-10G", 64)  # the bench's own fit: beta within 2 % of the ring's bytes at 95.5 % of 10 Gbit/s
    assert ours.workers == 64 and ours.beta == pytest.approx(2 * 63 / 64 * 8 / 9.55e9, rel=0.02)
    with pytest.raises(ValueError, match="no fit named nope/8"):
        named_fit("nope", 8)
