"""Conformance of bmv2 running p4/dlcp.p4 to docs/pipeline.md, on the scenarios the built-in
dataplane's engines run (tests/root/test_switch_conformance.py). Where bmv2 cannot agree (its rates
are per priority queue; it has no link delay or loss), the scenario says why in its `bmv2` section
and what bmv2 is held to instead; nothing is skipped."""

from __future__ import annotations

import importlib.util

import pytest
from switch_harness import Bmv2SUT, SwitchTestbed, check_scenario
from switch_scenarios import SCENARIOS

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("p4runtime_sh") is None, reason="needs the bmv2 extra (p4runtime-shell; make setup)"
)


@pytest.fixture(scope="module")
def bed():
    b = SwitchTestbed("rs")
    yield b
    b.close()


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s["name"] for s in SCENARIOS])
def test_scenario(bed, sc, tmp_path, record_property):
    check_scenario(bed, Bmv2SUT(), sc, tmp_path, record_property)
