"""`dlcp bench transport` and `dlcp bench incast` print their tables and, with --json, the figures on
their last line."""

from cli_runs import bench_json


def test_emulated_link_reaches_the_link_rate():
    out, res = bench_json("transport", "--size-mb", "4", "--repeats", "1", "--link-mbps", "100")
    assert set(res) >= {"link_mbps", "goodput_mbps", "fraction_of_link", "loopback_mbps"}
    # the TBF bucket lets its first burst through at once, so a short transfer may beat the payload
    # ceiling by a hair; 1 % above it would mean the link was not shaped at all
    assert res["link_mbps"] == 100 and 0 < res["fraction_of_link"] <= res["max_fraction"] * 1.01
    assert res["variants"]["link dlcp"]["lost_pkts"] == 0  # backpressure, not drops
    assert "link tcp" in out
    assert all(v["forced"] == 0 for v in res["variants"].values())  # the 1 MB send buffer too: the window holds


def test_incast_rows_and_congestion_control():
    out, res = bench_json(
        "incast",
        "--senders",
        "4",
        "--cc",
        "dctcp",
        "--rounds",
        "2",
        "--repeats",
        "1",
        "--size-kb",
        "200",
        timeout_s=600,
    )
    (row,) = res["rows"]
    assert {"senders", "cc", "goodput_fraction", "forced", "protected_lost", "mct_p99_over_ideal"} <= set(row)
    assert (row["senders"], row["cc"], row["forced"], row["protected_lost"]) == (4, "dctcp", 0, 0)
    assert 0.5 < row["goodput_fraction"] <= 0.96 and row["mct_p99_over_ideal"] >= 1.0
    assert (row["failed"], row["errors"]) == (0, []) and row["early_drops"] >= 0
    header = next(line for line in out.splitlines() if "senders" in line and "cc" in line)
    assert "early_drops" in header and "failed" in header  # columns of the table
