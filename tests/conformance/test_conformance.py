"""Conformance of the switch backends to docs/pipeline.md, scenario by scenario (scenarios.py):
the built-in dataplane's C and Python engines, and bmv2 running p4/dlcp.p4 (root + bmv2).

Where bmv2 cannot agree (its rates are per priority queue; it has no link delay or loss), the
scenario says why in its `bmv2` section and what bmv2 is held to instead; nothing is skipped."""

from __future__ import annotations

import pytest
from harness import HAVE_C, Bmv2SUT, RefSwitchSUT, SwitchTestbed, for_backend, run_scenario, verify
from scenarios import SCENARIOS

from emulation.dataplane import SwitchStartError

pytestmark = pytest.mark.root


def _p4runtime_usable() -> bool:
    import importlib.util
    return importlib.util.find_spec("p4runtime_sh") is not None


SUTS = {
    "ref-c": pytest.param(lambda: RefSwitchSUT("c"),
                          marks=pytest.mark.skipif(not HAVE_C, reason="C engine not built")),
    "ref-python": pytest.param(lambda: RefSwitchSUT("python")),
    "bmv2": pytest.param(Bmv2SUT, marks=[pytest.mark.bmv2, pytest.mark.skipif(
        not _p4runtime_usable(), reason="needs the bmv2 extra (p4runtime-shell; make setup)")]),
}


@pytest.fixture(scope="module")
def bed():
    b = SwitchTestbed("rs")
    yield b
    b.close()


@pytest.mark.parametrize("make_sut", list(SUTS.values()), ids=list(SUTS))
@pytest.mark.parametrize("sc", SCENARIOS, ids=[s["name"] for s in SCENARIOS])
def test_scenario(bed, make_sut, sc, tmp_path, record_property):
    sut = make_sut()
    own = sc.get(sut.name, {})
    if own:
        record_property("differs", own["differs"])
    if "start_error" in own:
        with pytest.raises(SwitchStartError, match=own["start_error"]):
            run_scenario(bed, sut, sc, tmp_path)
        assert not sut.alive()
        return
    sc = for_backend(sc, sut.name)
    r = run_scenario(bed, sut, sc, tmp_path)
    verify(sc, r)
