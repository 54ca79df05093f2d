"""Conformance of the ns-3 switch (simulation/ns3, cpp/dlcp_switch.h) to docs/pipeline.md: the
scenarios of scenarios.py, checked by the same `verify` as the built-in switch and bmv2. No root:
the frames go into a simulated switch. Where ns-3 cannot agree, the scenario's `ns3` section says
why and what it is held to instead (none does today). Skips when the `sim` extra is absent."""

from __future__ import annotations

import pytest
from switch_harness import Ns3SUT, for_backend, verify
from switch_scenarios import SCENARIOS


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    sut = Ns3SUT()
    return sut.run_all([for_backend(sc, sut.name) for sc in SCENARIOS], tmp_path_factory.mktemp("ns3"))


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s["name"] for s in SCENARIOS])
def test_scenario(results, sc, record_property):
    own = sc.get(Ns3SUT.name, {})
    if own:
        record_property("differs", own["differs"])
    sc = for_backend(sc, Ns3SUT.name)
    verify(sc, results[sc["name"]], Ns3SUT.name)


TIMED = [s for s in SCENARIOS if s["expect"].get("tol")]


@pytest.mark.parametrize("sc", TIMED, ids=[s["name"] for s in TIMED])
def test_exact_where_emulators_need_slack(results, sc):
    """Simulated time has no scheduling jitter: the counts the emulators meet within `tol` hold
    exactly (the first packet of a burst leaves at once, the rest queue)."""
    sc = for_backend(sc, Ns3SUT.name)
    verify({**sc, "expect": {**sc["expect"], "tol": 0}}, results[sc["name"]], Ns3SUT.name)
