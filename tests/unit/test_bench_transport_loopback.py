"""`dlcp bench transport` on loopback (no root): its table and, with --json, the figures on its
last line. The emulated-link rows are in tests/root/test_bench_transport.py."""

from cli_runs import bench_json


def test_loopback_only():
    out, res = bench_json("transport", "--skip-link", "--size-mb", "2", "--repeats", "1")
    assert "loopback dlcp" in out and res["loopback_mbps"] > 0
    assert res["goodput_mbps"] is None and res["link_mbps"] == 200.0
    assert set(res["variants"]["loopback dlcp"]) >= {"forced", "lost_pkts", "retx_pkts", "min_mbps", "max_mbps"}
    assert "forced" in out.splitlines()[1]  # a column of the table
    # protected packets lost are recorded (a column), and every run's own figures are kept
    loop = res["variants"]["loopback dlcp"]
    assert loop["protected_lost"] == 0 and "protected_lost" in out.splitlines()[1]
    assert [set(r) >= {"lost_pkts", "retx_pkts", "protected_lost", "forced"} for r in loop["per_run"]] == [True]
