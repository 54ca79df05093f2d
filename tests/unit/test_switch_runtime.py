"""Runtime-entry generation (dlcp/network/switch_runtime.py): topology in, sN-runtime.json out, no switch needed."""

from __future__ import annotations

import json

import pytest

from dlcp.network import pipeline_names as pn
from dlcp.network.runtime_file import PortConfig, load_runtime
from dlcp.network.switch_runtime import (
    DATA_FRAME_BYTES,
    Host,
    Link,
    Port,
    Route,
    RuntimeSpecError,
    SwitchConfig,
    SwitchTopo,
    Thresholds,
    queue_rate_pps,
    runtime_for,
    switch_port_mac,
    switch_topos,
    write_runtime,
)
from dlcp.settings import ConfigError


def leaf_spine():
    """2 spines (s1, s2), 2 leaves (s3, s4), 2 hosts per leaf."""
    hosts = [Host(f"h{i}", f"10.0.0.{i}", f"00:00:00:00:00:{i:02x}") for i in range(1, 5)]
    switches = {"s1": 1, "s2": 2, "s3": 3, "s4": 4}
    links = [
        Link("h1", 0, "s3", 1),
        Link("h2", 0, "s3", 2),
        Link("h3", 0, "s4", 1),
        Link("h4", 0, "s4", 2),
        Link("s3", 3, "s1", 1),
        Link("s3", 4, "s2", 1),
        Link("s4", 3, "s1", 2),
        Link("s4", 4, "s2", 2, rate_mbps=20.0),
    ]
    return hosts, switches, links


def test_leaf_spine_routes_use_every_equal_cost_path():
    topos = {t.name: t for t in switch_topos(*leaf_spine())}
    leaf = topos["s3"]
    routes = {r.prefix: r.ports for r in leaf.routes}
    assert routes == {"10.0.0.1/32": (1,), "10.0.0.2/32": (2,), "10.0.0.3/32": (3, 4), "10.0.0.4/32": (3, 4)}
    spine = {r.prefix: r.ports for r in topos["s2"].routes}
    assert spine == {"10.0.0.1/32": (1,), "10.0.0.2/32": (1,), "10.0.0.3/32": (2,), "10.0.0.4/32": (2,)}
    ports = {p.port: p for p in leaf.ports}
    assert ports[1].peer == "h1" and ports[1].peer_mac == "00:00:00:00:00:01" and ports[1].intf == "s3-eth1"
    assert ports[3].peer == "s1" and ports[3].peer_mac == switch_port_mac(1, 1)
    assert {p.port: p.rate_mbps for p in topos["s2"].ports} == {1: None, 2: 20.0}


def test_groups_are_shared_by_routes_with_the_same_ports():
    rt = runtime_for(next(t for t in switch_topos(*leaf_spine()) if t.name == "s3"), SwitchConfig())
    lpm = [e for e in rt["table_entries"] if e["table"] == pn.IPV4_LPM]
    assert [(e["match"]["ipv4_dst"], e["action_params"]) for e in lpm] == [
        (["10.0.0.1", 32], {"group": 1, "size": 1}),
        (["10.0.0.2", 32], {"group": 2, "size": 1}),
        (["10.0.0.3", 32], {"group": 3, "size": 2}),
        (["10.0.0.4", 32], {"group": 3, "size": 2}),
    ]
    nhop = [
        (e["match"]["nhop_group"], e["match"]["nhop_member"], e["action_params"]["port"])
        for e in rt["table_entries"]
        if e["table"] == pn.NHOP
    ]
    assert nhop == [(1, 0, 1), (2, 0, 2), (3, 0, 3), (3, 1, 4)]


def test_policy_lb_mode_and_thresholds():
    sw = SwitchTopo("s1", 1, (Port(1, "s1-eth1", "h1", "00:00:00:00:00:01"),), (Route("10.0.0.1/32", (1,)),))
    rt = runtime_for(
        sw,
        SwitchConfig(
            policy="layer",
            load_balancing="per_flow",
            qmax=20,
            k1=15,
            k2=10,
            k3=5,
            port_thresholds={1: Thresholds(qmax=30, k1=3, k2=2, k3=1)},
        ),
    )
    by_table = {}
    for e in rt["table_entries"]:
        by_table.setdefault(e["table"], []).append(e)
    assert by_table[pn.LB_CONFIG] == [
        {"table": pn.LB_CONFIG, "default_action": True, "action_name": pn.SET_LB_MODE, "action_params": {"mode": 0}}
    ]
    assert [e.get("match") for e in by_table[pn.QUEUE_THRESHOLDS]] == [None, {"egress_port": 1}]
    assert by_table[pn.QUEUE_THRESHOLDS][0]["action_params"] == {"qmax": 20, "k1": 15, "k2": 10, "k3": 5}
    assert [e["action_name"] for e in by_table[pn.CLASSIFY]] == [pn.CLASSIFY_FROM_DLCP, pn.CLASSIFY_FROM_DSCP]
    fifo = runtime_for(sw, SwitchConfig(policy="fifo"))
    assert not [e for e in fifo["table_entries"] if e["table"] == pn.CLASSIFY]


def test_written_file_is_readable_and_replays(tmp_path):
    sw = next(t for t in switch_topos(*leaf_spine()) if t.name == "s4")
    rt = runtime_for(sw, SwitchConfig())
    path = write_runtime(rt, tmp_path / "runtime")
    assert path.name == "s4-runtime.json"
    text = path.read_text()
    assert json.loads(text) == rt
    assert text.count("\n") > len(rt["table_entries"])  # one entry per line, not one long line
    back = load_runtime(path)
    assert back.switch == "s4" and len(back.entries) == len(rt["table_entries"])
    assert [p.port for p in back.ports] == [p["port"] for p in rt["ports"]]
    # a leaf's ports toward its hosts model their NICs' links, its ports toward the spines do not
    assert {p.peer: p.host_nic for p in back.ports} == {"s1": False, "s2": False, "h3": True, "h4": True}


def test_rates_in_packets_per_second():
    assert queue_rate_pps(PortConfig(1, "x", rate_pps=1000)) == 1000
    assert queue_rate_pps(PortConfig(1, "x", rate_mbps=50.0)) == round(50e6 / 8 / DATA_FRAME_BYTES)
    assert queue_rate_pps(PortConfig(1, "x")) is None
    assert DATA_FRAME_BYTES == 1466


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"load_balancing": "ecmp"}, "dlcp.load_balancing: 'ecmp' is not one of per_flow, spray_random, spray_rr"),
        ({"policy": "strict"}, "dlcp.policy: 'strict' is not one of fifo, layer, magnitude, dlcp"),
        ({"qmax": 10, "k1": 20, "k2": 5, "k3": 1}, "dlcp.k1: thresholds must satisfy k3 <= k2 <= k1 <= qmax"),
        ({"port_thresholds": {3: {"qmax": 0}}}, "dlcp.port_thresholds.3.qmax: 0 is below the minimum 1"),
    ],
)
def test_bad_switch_config_is_one_line_error(settings, message):
    with pytest.raises(ConfigError) as e:
        SwitchConfig(**settings)
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (
            lambda s, c: (SwitchTopo("s1", 1, s.ports, (Route("10.0.0.9/32", (7,)),)), c),
            "s1: route 10.0.0.9/32 leaves through port 7",
        ),
        (lambda s, c: (SwitchTopo("s1", 1, s.ports, (Route("10.0.0.300/32", (1,)),)), c), "s1: route prefix"),
        (
            lambda s, c: (SwitchTopo("s1", 1, (Port(64, "s1-eth64", "h1", "00:00:00:00:00:01"),), ()), c),
            "s1: ports[0]: port must be an integer 1..63, got 64",
        ),
        (
            lambda s, c: (
                SwitchTopo("s1", 1, (Port(1, "s1-eth1", "h1", "00:00:00:00:00:01", rate_mbps=1.0, rate_pps=10),), ()),
                c,
            ),
            "rate_mbps and rate_pps are alternatives",
        ),
        (
            lambda s, c: (SwitchTopo("s1", 1, (Port(1, "s1-eth1", "h1", "00-00-00-00-00-01"),), ()), c),
            "peer MAC '00-00-00-00-00-01'",
        ),
        (
            lambda s, c: (
                SwitchTopo("s1", 1, (Port(1, "s1-eth1", "h1", "00:00:00:00:00:01", queue_depth_pkts=64),), ()),
                c,
            ),
            "queue_depth_pkts 64 must exceed qmax 64",
        ),
    ],
)
def test_bad_topology_or_config_is_one_line_error(mutate, message):
    sw = SwitchTopo("s1", 1, (Port(1, "s1-eth1", "h1", "00:00:00:00:00:01"),), (Route("10.0.0.1/32", (1,)),))
    sw, cfg = mutate(sw, SwitchConfig())
    with pytest.raises(RuntimeSpecError) as e:
        runtime_for(sw, cfg)
    assert message in str(e.value) and "\n" not in str(e.value)
