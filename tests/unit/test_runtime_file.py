"""The one reader of switch runtime files (dlcp/network/runtime_file.py), used by both switch
backends: typed, normalised values, and one line naming the file, entry and field for every
problem."""

from __future__ import annotations

import dataclasses
import json

import pytest
from switch_frames import entry, runtime_doc

from dlcp.network import pipeline_names as P
from dlcp.network.runtime_file import PortConfig, RegisterWrite, RuntimeFileError, load_runtime, parse_runtime


def test_values_come_out_typed_and_normalised():
    doc = runtime_doc(routes={"10.1.2.3/16": [1]}, thresholds=(40, 30, 20, 10), port_thresholds={2: (50, 5, 4, 3)})
    doc["table_entries"].append(
        entry(
            P.CLASSIFY,
            P.SET_CLASS,
            {"qid": "0x7", "color": 1},
            match={"dlcp_valid": 1, "dscp": [46, 0x3C], "dlcp_prio": 5},
            priority=20,
        )
    )
    doc["registers"] = [{"register": P.RR_NEXT, "index": 3, "value": 9}]
    rt = parse_runtime(doc, "s9-runtime.json")
    assert (rt.switch, rt.device_id, rt.target, rt.source) == ("sw", 1, "builtin", "s9-runtime.json")
    lpm = next(e for e in rt.entries if e.table == P.IPV4_LPM)
    assert lpm.match == {"ipv4_dst": (0x0A010000, 16)}  # host bits cleared
    nhop = next(e for e in rt.entries if e.table == P.NHOP)
    assert nhop.params == {"dmac": 0x020000000101, "port": 1} and nhop.match == {"nhop_group": 1, "nhop_member": 0}
    cls = rt.entries[-1]
    assert cls.params == {"qid": 7, "color": 1} and cls.priority == 20
    assert cls.match == {"dlcp_valid": 1, "dscp": (46 & 0x3C, 0x3C), "dlcp_prio": (5, 7)}  # bare value: all ones
    default = next(e for e in rt.entries if e.table == P.QUEUE_THRESHOLDS and e.default)
    assert default.params == {"qmax": 40, "k1": 30, "k2": 20, "k3": 10} and default.match == {}
    assert rt.registers == (RegisterWrite(P.RR_NEXT, 3, 9),)


def test_port_fields_and_defaults():
    doc = runtime_doc(
        port_cfg={
            1: {
                "rate_mbps": 50.0,
                "queue_depth_pkts": 100,
                "delay_us": 250,
                "loss": 0.01,
                "peer": "h1",
                "host_nic": True,
            },
            2: {"rate_pps": 500, "queue_depth_pkts": None},
        }
    )
    p1, p2, p3 = parse_runtime(doc).ports[:3]
    assert p1 == PortConfig(
        1, "sw-eth1", "h1", rate_mbps=50.0, queue_depth_pkts=100, delay_us=250, loss=0.01, host_nic=True
    )
    assert p1.rate_bps == 50e6
    assert (p2.rate_mbps, p2.rate_pps, p2.queue_depth_pkts) == (None, 500, None)  # null: the target's default
    assert (p3.rate_bps, p3.rate_pps, p3.queue_depth_pkts, p3.delay_us, p3.loss, p3.host_nic) == (
        None,
        None,
        128,
        0,
        0.0,
        False,
    )


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.pop("device_id"), "key 'device_id' missing"),
        (lambda d: d.pop("table_entries"), "key 'table_entries' missing or not a list"),
        (lambda d: d.update(target="tofino"), "unknown target 'tofino' is not one of builtin, bmv2, ns3"),
        (lambda d: d.update(target="ref"), "unknown target 'ref' is now called 'builtin'"),
        (lambda d: d["table_entries"].append(entry("Nope.table", P.MARK_NO_ROUTE, {})), "unknown table 'Nope.table'"),
        (
            lambda d: d["table_entries"].append(entry([P.NHOP], P.MARK_NO_ROUTE, {})),
            "unknown table ['DlcpIngress.nhop']",
        ),
        (
            lambda d: d["table_entries"].append(
                entry(P.NHOP, P.SET_LB_MODE, {"mode": 1}, match={"nhop_group": 1, "nhop_member": 0})
            ),
            "action 'DlcpIngress.set_lb_mode' is not an action of DlcpIngress.nhop",
        ),
        (
            lambda d: d["table_entries"].append(
                entry(P.IPV4_LPM, P.SET_NHOP_GROUP, {"group": 9}, match={"ipv4_dst": ["10.1.0.0", 16]})
            ),
            "takes parameters",
        ),
        (
            lambda d: d["table_entries"].append(
                entry(
                    P.NHOP,
                    P.SET_NHOP,
                    {"dmac": "02:00:00:00:00:01", "port": 9},
                    match={"nhop_group": 7, "nhop_member": 0},
                )
            ),
            "not in ports",
        ),
        (
            lambda d: d["table_entries"].append(
                entry(P.NHOP, P.SET_NHOP, {"dmac": "02:00:00:00:00:01", "port": 1}, match={"nhop_group": 7})
            ),
            "match.nhop_member: exact key missing",
        ),
        (
            lambda d: d["table_entries"].append(
                entry(
                    P.NHOP,
                    P.SET_NHOP,
                    {"dmac": "02:00:00:00:00:01", "port": 1},
                    match={"nhop_group": 1, "nhop_member": 0},
                )
            ),
            "DlcpIngress.nhop match {'nhop_group': 1, 'nhop_member': 0} already set by table_entries[2]",
        ),
        (
            lambda d: d["table_entries"].append(
                entry(P.IPV4_LPM, P.SET_NHOP_GROUP, {"group": 9, "size": 1}, match={"ipv4_dst": ["10.1.0.0", 33]})
            ),
            "prefix length 33",
        ),
        (
            lambda d: d["table_entries"].append(
                entry(P.IPV4_LPM, P.SET_NHOP_GROUP, {"group": 9, "size": 1}, match={"ipv4_dst": "10.1.0.0"})
            ),
            "lpm value must be [value, prefix_len]",
        ),
        (
            lambda d: d["table_entries"].append(
                entry(P.IPV4_LPM, P.SET_NHOP_GROUP, {"group": 9, "size": 0}, match={"ipv4_dst": ["10.9.0.0", 16]})
            ),
            "size must be >= 1",
        ),
        (
            lambda d: d["table_entries"].append(
                entry(P.IPV4_LPM, P.SET_NHOP_GROUP, {"group": 1, "size": 1}, default_action=True)
            ),
            "the default action of DlcpIngress.ipv4_lpm is fixed by the P4 program (DlcpIngress.mark_no_route)",
        ),
        (
            lambda d: d["table_entries"].append(entry(P.LB_CONFIG, P.SET_LB_MODE, {"mode": 1}, match={"x": 1})),
            "DlcpIngress.lb_config is keyless",
        ),
        (
            lambda d: d["table_entries"].append(
                entry(P.CLASSIFY, P.SET_CLASS, {"qid": 9, "color": 0}, match={"dlcp_valid": 1}, priority=1)
            ),
            "action_params.qid: 9 does not fit in 3 bits",
        ),
        (
            lambda d: d["table_entries"].append(
                entry(P.CLASSIFY, P.SET_CLASS, {"qid": 1, "color": 0}, match={"dlcp_valid": 1})
            ),
            "need an integer priority",
        ),
        (
            lambda d: d["table_entries"].append(
                entry(
                    P.CLASSIFY,
                    P.SET_CLASS,
                    {"qid": 1, "color": 0},
                    match={"dlcp_valid": 1, "dscp": [1, 2, 3]},
                    priority=1,
                )
            ),
            "ternary value must be [value, mask] or a value",
        ),
        (
            lambda d: d["table_entries"].append(
                entry(
                    P.NHOP,
                    P.SET_NHOP,
                    {"dmac": "02:00:00:00:00:zz", "port": 1},
                    match={"nhop_group": 9, "nhop_member": 0},
                )
            ),
            "bad MAC address",
        ),
        (
            lambda d: d["table_entries"].append(
                entry(
                    P.QUEUE_THRESHOLDS,
                    P.SET_THRESHOLDS,
                    {"qmax": 10, "k1": 20, "k2": 5, "k3": 1},
                    match={"egress_port": 1},
                )
            ),
            "need 0 <= k3 <= k2 <= k1 <= qmax",
        ),
        (lambda d: d["ports"].append({"port": 2, "intf": "x"}), "port 2 already used"),
        (lambda d: d["ports"].append({"port": 9, "intf": "sw-eth1"}), "intf 'sw-eth1' already used"),
        (lambda d: d["ports"].append({"port": 0, "intf": "x"}), "port must be an integer 1..63, got 0"),
        (lambda d: d["ports"][0].update(intf="a-very-long-interface"), "intf must be an interface name"),
        (lambda d: d["ports"][0].update(rate_mbps=-1), "rate_mbps must be a number > 0"),
        (lambda d: d["ports"][0].update(rate_mbps=10, rate_pps=100), "rate_mbps and rate_pps are alternatives"),
        (lambda d: d["ports"][0].update(host_nic="yes"), "host_nic must be true or false, got 'yes'"),
        (lambda d: d["ports"][0].update(loss=2), "loss must be a number"),
        (
            lambda d: d.update(target="bmv2") or d["ports"][0].update(queue_depth_pkts=64),
            "ports[0]: queue_depth_pkts 64 must exceed qmax 64",
        ),
        (lambda d: d.update(registers=[{"register": P.OCCUPANCY, "index": 0, "value": 1}]), "cannot be written"),
        (lambda d: d.update(registers=[{"register": {}, "index": 0, "value": 1}]), "register {} cannot be written"),
        (
            lambda d: d.update(registers=[{"register": P.RR_NEXT, "index": P.MAX_GROUPS, "value": 1}]),
            "registers[0]: index 1024 >= size 1024",
        ),
        (
            lambda d: d.update(registers=[{"register": P.RR_NEXT, "index": 0, "value": 1 << 16}]),
            "registers[0].value: 65536 does not fit in 16 bits",
        ),
    ],
)
def test_errors_name_the_problem(mutate, message):
    doc = runtime_doc()
    mutate(doc)
    with pytest.raises(RuntimeFileError) as e:
        parse_runtime(doc, "s9-runtime.json")
    assert message in str(e.value) and str(e.value).startswith("s9-runtime.json") and "\n" not in str(e.value)


def test_per_port_qmax_sets_the_depth_floor_on_bmv2():
    doc = dict(runtime_doc(port_thresholds={1: (100, 50, 40, 30)}), target="bmv2")
    with pytest.raises(RuntimeFileError, match=r"ports\[0\]: queue_depth_pkts 100 must exceed qmax 100") as e:
        doc["ports"][0]["queue_depth_pkts"] = 100
        parse_runtime(doc, "s9-runtime.json")
    assert "\n" not in str(e.value)
    doc["ports"][0]["queue_depth_pkts"] = 101
    assert parse_runtime(doc).ports[0].queue_depth_pkts == 101
    # the built-in switch counts what its own queue refuses (queue_overflow_pkts)
    doc["ports"][0]["queue_depth_pkts"] = 8
    assert parse_runtime(dict(doc, target="builtin")).ports[0].queue_depth_pkts == 8


def test_load_runtime_reads_a_file_and_names_it(tmp_path):
    path = tmp_path / "s1-runtime.json"
    path.write_text(json.dumps(runtime_doc()))
    assert load_runtime(path).source == str(path)
    path.write_text("{")
    with pytest.raises(RuntimeFileError, match=f"{path}: not JSON"):
        load_runtime(path)
    with pytest.raises(RuntimeFileError, match="cannot read"):
        load_runtime(tmp_path / "missing.json")


def test_checks_follow_the_pipeline_definition():
    """The reader has no table names or widths of its own: a renamed table in another definition is
    what it then accepts."""
    lpm = P.TABLES[P.IPV4_LPM]
    renamed = dataclasses.replace(
        P.PIPELINE,
        tables=tuple(dataclasses.replace(t, name="DlcpIngress.routes") if t is lpm else t for t in P.PIPELINE.tables),
    )
    doc = runtime_doc()
    for e in doc["table_entries"]:
        if e["table"] == P.IPV4_LPM:
            e["table"] = "DlcpIngress.routes"
    with pytest.raises(RuntimeFileError, match="unknown table 'DlcpIngress.routes'"):
        parse_runtime(doc)
    assert {e.table for e in parse_runtime(doc, spec=renamed).entries} >= {"DlcpIngress.routes"}
