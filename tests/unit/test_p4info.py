"""p4c's P4Info of p4/dlcp.p4 against dlcp/network/pipeline_names.py (through the P4Info the
controller tests use): every table (keys and their widths, actions, size, const default action),
action parameter width, counter, direct counter and register (size, width). Needs p4c."""

from __future__ import annotations

import pytest

pytest.importorskip("p4runtime_sh", reason="needs the bmv2 extra (make setup)")

from fake_p4runtime import expected_p4info

from emulation.bmv2 import build as p4build
from emulation.bmv2.control import load_p4info

pytestmark = pytest.mark.skipif(p4build.find_p4c() is None, reason=p4build.missing_p4c_message())


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("p4build")
    return load_p4info(p4build.build(out).p4info)


def summary(info):
    actions = {a.preamble.id: a.preamble.name for a in info.actions}
    tables = {t.preamble.id: t.preamble.name for t in info.tables}
    return {
        "tables": {
            t.preamble.name: (
                [(m.name, m.bitwidth, m.match_type) for m in t.match_fields],
                sorted(actions[r.id] for r in t.action_refs),
                t.size,
                actions.get(t.const_default_action_id),
            )
            for t in info.tables
        },
        "actions": {a.preamble.name: [(p.name, p.bitwidth) for p in a.params] for a in info.actions},
        "counters": {c.preamble.name: (c.size, c.spec.unit) for c in info.counters},
        "direct_counters": {c.preamble.name: (tables[c.direct_table_id], c.spec.unit) for c in info.direct_counters},
        "registers": {r.preamble.name: (r.size, r.type_spec.bitstring.bit.bitwidth) for r in info.registers},
    }


@pytest.mark.parametrize("part", ["tables", "actions", "counters", "direct_counters", "registers"])
def test_p4info_matches_pipeline_names(compiled, part):
    assert summary(compiled)[part] == summary(expected_p4info())[part]


def test_data_port_is_a_build_option(tmp_path):
    import json

    b = p4build.build(tmp_path, data_port=9999)
    bmv2 = json.loads(b.json.read_text())
    values = [
        t["value"]
        for p in bmv2["parsers"]
        for s in p["parse_states"]
        for t in s["transitions"]
        if s["name"].endswith("parse_udp")
    ]
    assert "0x270f" in values and "0x26b6" not in values
