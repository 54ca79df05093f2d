"""`dlcp bench transport` and `dlcp bench incast` print their tables and, with --json, the figures on
their last line."""

import json
import subprocess
import sys

import pytest


def bench(*args):
    p = subprocess.run([sys.executable, "-m", "dlcp_cli", "bench", "transport", *args, "--json"],
                       capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stderr
    return p.stdout, json.loads(p.stdout.strip().splitlines()[-1])


def test_loopback_only():
    out, res = bench("--skip-link", "--size-mb", "2", "--repeats", "1")
    assert "loopback dlcp" in out and res["loopback_mbps"] > 0
    assert res["goodput_mbps"] is None and res["link_mbps"] == 200.0
    assert set(res["variants"]["loopback dlcp"]) >= {"forced", "lost_pkts", "retx_pkts", "min_mbps", "max_mbps"}
    assert "forced" in out.splitlines()[1]  # a column of the table


@pytest.mark.root
def test_emulated_link_reaches_the_link_rate():
    out, res = bench("--size-mb", "4", "--repeats", "1", "--link-mbps", "100")
    assert set(res) >= {"link_mbps", "goodput_mbps", "fraction_of_link", "loopback_mbps"}
    # the TBF bucket lets its first burst through at once, so a short transfer may beat the payload
    # ceiling by a hair; 1 % above it would mean the link was not shaped at all
    assert res["link_mbps"] == 100 and 0 < res["fraction_of_link"] <= res["max_fraction"] * 1.01
    assert res["variants"]["link dlcp"]["lost_pkts"] == 0  # backpressure, not drops
    assert "link tcp" in out
    assert all(v["forced"] == 0 for v in res["variants"].values())  # the 1 MB send buffer too: the window holds


@pytest.mark.root
def test_incast_rows_and_congestion_control():
    p = subprocess.run([sys.executable, "-m", "dlcp_cli", "bench", "incast", "--senders", "4", "--cc", "dctcp",
                        "--rounds", "2", "--repeats", "1", "--size-kb", "200", "--json"],
                       capture_output=True, text=True, timeout=600, check=False)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout.strip().splitlines()[-1])
    (row,) = res["rows"]
    assert {"senders", "cc", "goodput_fraction", "forced", "protected_lost", "mct_p99_over_ideal"} <= set(row)
    assert (row["senders"], row["cc"], row["forced"], row["protected_lost"]) == (4, "dctcp", 0, 0)
    assert 0.5 < row["goodput_fraction"] <= 0.96 and row["mct_p99_over_ideal"] >= 1.0
