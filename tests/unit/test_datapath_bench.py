"""`dlcp bench datapath`'s UDP half on real loopback sockets: each receive path delivers the whole
message, the C paths take data packets in C (the batched one nearly all of them, the per-datagram
one fewer), and the figures the table prints are there for every path."""

from __future__ import annotations

import pytest
from transport_scenarios import rx_path_or_skip

from dlcp.transport.datapath_bench import udp_round, udp_rows

VALUES = 40_000  # 115 packets of 350 values


@pytest.fixture(scope="module")
def rounds():
    rx_path_or_skip()
    return [udp_round(mode, VALUES, 1) for mode in ("python", "c-per-datagram", "c")]


def test_every_path_receives_the_message_and_reports_its_cost(rounds):
    py, per, c = rounds
    assert py["datagrams"] == per["datagrams"] == c["datagrams"] >= 115
    assert all(r["us_per_datagram"] > 0 and r["syscall_us"] > 0 for r in rounds)
    assert "taken_in_c" not in py and "c_core_us" not in py
    # the batched path counts up to each FEEDBACK decision; the per-datagram one passes those up
    assert c["taken_in_c"] > per["taken_in_c"] > 0.5 and c["taken_in_c"] > 0.95


def test_rows_give_each_path_against_the_python_baseline(rounds):
    rows, result = udp_rows(rounds)
    assert [r["receive path"] for r in rows] == ["python", "c-per-datagram", "c"]
    assert rows[0]["x less than python"].startswith("1.00")
    assert result["python"]["speedup_vs_baseline"] == 1.0 and result["c"]["datagrams"] == [rounds[2]["datagrams"]]
