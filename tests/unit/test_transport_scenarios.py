"""The protocol scenarios of transport_scenarios.py on both drivers of the protocol core: virtual
time (deterministic, no sockets or sleeps) and the UDP driver over loopback, each with the receiver
taking every datagram through the core and through the C receive path (dlcp/transport/rx_mirror.py;
the virtual one skips where the extension is not built)."""

from __future__ import annotations

import pytest
from transport_scenarios import DRIVERS, SCENARIOS, rx_path_or_skip


@pytest.fixture(params=sorted(DRIVERS))
def make(request):
    if request.param == "virtual-c":
        rx_path_or_skip()
    made = []

    def make_pair(faults=None, send_cfg=None, recv_cfg=None):
        p = DRIVERS[request.param](faults or {}, send_cfg or {}, recv_cfg or {})
        made.append(p)
        return p

    yield make_pair
    for p in made:
        p.close()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__)
def test_scenario(make, scenario):
    scenario(make)
