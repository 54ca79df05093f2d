"""Conformance of the switch backends to docs/pipeline.md, scenario by scenario (scenarios.py):
the built-in switch's C and Python engines (root). bmv2 runs the same scenarios in
tests/bmv2/test_bmv2_conformance.py, ns-3 in tests/ns3/test_ns3_conformance.py."""

from __future__ import annotations

import pytest
from switch_harness import HAVE_C, BuiltinSwitchSUT, SwitchTestbed, check_scenario
from switch_scenarios import SCENARIOS

SUTS = {
    "builtin-c": pytest.param(
        lambda: BuiltinSwitchSUT("c"), marks=pytest.mark.skipif(not HAVE_C, reason="C engine not built")
    ),
    "builtin-python": pytest.param(lambda: BuiltinSwitchSUT("python")),
}


@pytest.fixture(scope="module")
def bed():
    b = SwitchTestbed("rs")
    yield b
    b.close()


@pytest.mark.parametrize("make_sut", list(SUTS.values()), ids=list(SUTS))
@pytest.mark.parametrize("sc", SCENARIOS, ids=[s["name"] for s in SCENARIOS])
def test_scenario(bed, make_sut, sc, tmp_path, record_property):
    check_scenario(bed, make_sut(), sc, tmp_path, record_property)
