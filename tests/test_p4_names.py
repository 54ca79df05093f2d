"""The built-in dataplane and p4/dlcp.p4 use the same names (dlcp/network/pipeline_names.py): tables, keys, actions
and their parameters, counters, registers. Reads build/p4/dlcp.p4info.txtpb when it exists (p4c ran),
else the P4 source's declarations."""

from __future__ import annotations

from pathlib import Path

import pytest
from p4_declarations import from_p4info, from_source

from dlcp.network import pipeline_names as P

ROOT = Path(__file__).resolve().parents[1]
P4INFO = ROOT / "build" / "p4" / "dlcp.p4info.txtpb"

SYNTHETIC = """
#include <v1model.p4>
// a comment with table fake { }
typedef bit<16> group_t;
@name(".DlcpIngress.rr_next") register<bit<16>>(1024) rr_next;
control Inner(inout headers_t hdr) {
    action set_class(bit<3> qid, bit<2> color) { }
    @name("classify") table cls {
        key = { hdr.dlcp.isValid() : exact @name("dlcp_valid"); hdr.ipv4.dscp : ternary @name("dscp"); }
        actions = { set_class; @defaultonly NoAction; }
    }
    apply { cls.apply(); }
}
control DlcpIngress(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {
    register<bit<32>>(512) occupancy;
    @name(".Global.hits") counter(8, CounterType.packets_and_bytes) drops;
    direct_counter(CounterType.packets_and_bytes) ipv4_lpm_hits;
    Inner() inner;
    @name(".DlcpIngress.set_nhop_group") action set_group(in group_t group, bit<16> size) { }
    table ipv4_lpm { key = { hdr.ipv4.dst_addr : lpm @name("ipv4_dst"); } actions = { set_group; } }
    apply { inner.apply(hdr); }
}
V1Switch(P(), V(), DlcpIngress(), E(), C(), D()) main;
"""

SYNTHETIC_P4INFO = """
pkg_info { arch: "v1model" }
tables {
  preamble { id: 1 name: "DlcpIngress.ipv4_lpm" alias: "ipv4_lpm" }
  match_fields { id: 1 name: "ipv4_dst" bitwidth: 32 match_type: LPM }
  action_refs { id: 7 }
  size: 1024
}
actions { preamble { id: 7 name: "DlcpIngress.set_nhop_group" } params { id: 1 name: "group" bitwidth: 16 } }
registers { preamble { id: 9 name: "DlcpIngress.occupancy" } size: 512 }
"""


def test_source_parser_on_a_synthetic_program(tmp_path):
    (tmp_path / "x.p4").write_text(SYNTHETIC)
    d = from_source(tmp_path)
    assert d["tables"] == {
        "DlcpIngress.inner.classify": {"keys": [("dlcp_valid", "exact"), ("dscp", "ternary")],
                                       "actions": ["DlcpIngress.inner.set_class", "NoAction"]},
        "DlcpIngress.ipv4_lpm": {"keys": [("ipv4_dst", "lpm")], "actions": ["DlcpIngress.set_nhop_group"]},
    }
    assert d["actions"]["DlcpIngress.set_nhop_group"] == [("group", 16), ("size", 16)]
    assert d["registers"] == {"DlcpIngress.occupancy", "DlcpIngress.rr_next"} and d["counters"] == {"Global.hits"}
    assert d["direct_counters"] == {"DlcpIngress.ipv4_lpm_hits"}


def test_p4info_parser_on_a_synthetic_p4info():
    d = from_p4info(SYNTHETIC_P4INFO)
    assert d["tables"] == {"DlcpIngress.ipv4_lpm": {"keys": [("ipv4_dst", "lpm")],
                                                    "actions": ["DlcpIngress.set_nhop_group"]}}
    assert d["actions"] == {"DlcpIngress.set_nhop_group": [("group", 16)]}
    assert d["registers"] == {"DlcpIngress.occupancy"}


def declared() -> tuple[dict, str]:
    if P4INFO.exists():
        return from_p4info(P4INFO.read_text()), str(P4INFO.relative_to(ROOT))
    if not (ROOT / "p4" / "dlcp.p4").exists():
        pytest.skip("p4/dlcp.p4 does not exist yet in this tree (written on another branch)")
    return from_source(ROOT / "p4"), "p4/ sources"


def test_refswitch_names_match_the_p4_program():
    d, where = declared()
    for table, spec in P.TABLES.items():
        assert table in d["tables"], f"{where}: no table {table}"
        assert d["tables"][table]["keys"] == spec["keys"], f"{where}: keys of {table}"
        missing = set(spec["actions"]) - set(d["tables"][table]["actions"])
        assert not missing, f"{where}: {table} lacks actions {sorted(missing)}"
    for action, params in P.ACTION_PARAMS.items():
        assert action in d["actions"], f"{where}: no action {action}"
        assert d["actions"][action] == params, f"{where}: parameters of {action}"
    assert set(P.COUNTERS) <= d["counters"], f"{where}: counters {sorted(set(P.COUNTERS) - d['counters'])}"
    assert set(P.REGISTERS) <= d["registers"], f"{where}: registers {sorted(set(P.REGISTERS) - d['registers'])}"
    assert set(P.DIRECT_COUNTERS) <= d["direct_counters"], f"{where}: direct counters"
