"""Conformance of the switch backends to docs/pipeline.md, scenario by scenario (scenarios.py).

Runs against the built-in dataplane's C and Python engines; a bmv2 SwitchUnderTest can be added to
SUTS and must pass the same scenarios."""

from __future__ import annotations


import pytest

from harness import RefSwitchSUT, SwitchTestbed, run_scenario, verify
from scenarios import SCENARIOS

pytestmark = pytest.mark.root


def _fastpath_usable() -> bool:
    from emulation.refswitch.switch import load_fastpath
    try:
        load_fastpath()
        return True
    except ImportError:
        return False

HAVE_C = _fastpath_usable()
SUTS = {
    "ref-c": pytest.param(lambda: RefSwitchSUT("c"), marks=pytest.mark.skipif(not HAVE_C, reason="C engine not built")),
    "ref-python": pytest.param(lambda: RefSwitchSUT("python")),
}


@pytest.fixture(scope="module")
def bed():
    b = SwitchTestbed("rs")
    yield b
    b.close()


@pytest.mark.parametrize("make_sut", list(SUTS.values()), ids=list(SUTS))
@pytest.mark.parametrize("sc", SCENARIOS, ids=[s["name"] for s in SCENARIOS])
def test_scenario(bed, make_sut, sc, tmp_path):
    r = run_scenario(bed, make_sut(), sc, tmp_path)
    verify(sc, r)
