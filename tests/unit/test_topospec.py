import pytest

from dlcp.experiment import config
from dlcp.experiment.config import ConfigError
from dlcp.network import pipeline_names as N
from dlcp.network import topology as topospec


def cfg_for(**kw):
    raw = {"name": "t"}
    raw.update(kw)
    return config.validate(raw)


def test_star_roles_ports_and_routes():
    cfg = cfg_for(
        topology={"kind": "star", "hosts": 7},
        background=[{"kind": "udp_onoff", "dst": "ps"}, {"kind": "tcp", "dst": "worker0"}],
    )
    spec = topospec.from_config(cfg)
    assert [h.name for h in spec.by_role("worker")] == ["h1", "h2", "h3", "h4"]
    assert spec.by_role("ps")[0].name == "h5" and spec.background_sources == ["h6", "h7"]
    assert spec.switches["s1"].ports[3].intf == "s1-eth3"
    assert spec.host_named("worker2").name == "h3"


def test_leaf_spine_equal_cost_paths_and_interleaved_workers():
    cfg = cfg_for(
        topology={"kind": "leaf_spine", "spines": 2, "leaves": 2, "hosts_per_leaf": 3},
        workload={"mode": "allreduce", "workers": 4},
    )
    spec = topospec.from_config(cfg)
    ranks = {h.rank: h.switch for h in spec.by_role("worker")}
    assert [ranks[r] for r in range(4)] == ["s3", "s4", "s3", "s4"]  # every ring step crosses the spines
    assert len(spec.links()) == 4 + 6


def test_dumbbell_puts_ps_across_the_bottleneck():
    cfg = cfg_for(
        topology={"kind": "dumbbell", "hosts_left": 3, "hosts_right": 3}, workload={"mode": "ps", "workers": 3}
    )
    spec = topospec.from_config(cfg)
    assert {h.switch for h in spec.by_role("worker")} == {"s1"}
    assert spec.by_role("ps")[0].switch == "s2"
    s1 = spec.runtimes(cfg)["s1"]
    [lpm] = [e for e in s1["table_entries"] if e.get("match", {}).get("ipv4_dst") == ["10.0.0.6", 32]]
    [member] = [e for e in s1["table_entries"] if e.get("match", {}).get("nhop_group") == lpm["action_params"]["group"]]
    assert member["action_params"]["port"] == 1  # across the bottleneck link


@pytest.mark.parametrize(
    "bg,message",
    [
        ({"src": "h9"}, "background[0].src: no host 'h9'"),
        ({"src": "h1"}, "background[0].src: h1 is already a worker"),
        ({"dst": "worker7"}, "background[0].dst: no host or role 'worker7'"),
    ],
)
def test_background_placement_errors(bg, message):
    cfg = cfg_for(topology={"kind": "star", "hosts": 6}, background=[dict({"kind": "tcp"}, **bg)])
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        topospec.from_config(cfg)


def test_runtime_entries_follow_policy_and_routes():
    cfg = cfg_for(
        topology={"kind": "leaf_spine", "spines": 2, "leaves": 2, "hosts_per_leaf": 2},
        workload={"mode": "allreduce", "workers": 2},
        dlcp={"load_balancing": "spray_rr"},
    )
    files = topospec.from_config(cfg).runtimes(cfg)
    leaf = files["s3"]
    by_table = {}
    for e in leaf["table_entries"]:
        by_table.setdefault(e["table"], []).append(e)
    assert by_table[N.LB_CONFIG][0]["action_params"] == {"mode": N.LB_MODES["spray_rr"]}
    lpm_h3 = next(e for e in by_table[N.IPV4_LPM] if e["match"]["ipv4_dst"] == ["10.0.0.3", 32])
    assert lpm_h3["action_params"]["size"] == 2  # h3 sits under the other leaf: two spines
    members = [e for e in by_table[N.NHOP] if e["match"]["nhop_group"] == lpm_h3["action_params"]["group"]]
    assert sorted(e["action_params"]["port"] for e in members) == [1, 2]
    assert {e["action_name"] for e in by_table[N.CLASSIFY]} == {N.CLASSIFY_FROM_DLCP, N.CLASSIFY_FROM_DSCP}
    assert [p["intf"] for p in leaf["ports"]] == ["s3-eth1", "s3-eth2", "s3-eth3", "s3-eth4"]
    fifo_cfg = dict(cfg, dlcp=dict(cfg["dlcp"], policy="fifo"))
    fifo = topospec.from_config(fifo_cfg).runtimes(fifo_cfg)
    assert not [e for e in fifo["s3"]["table_entries"] if e["table"] == N.CLASSIFY]
    for e in leaf["table_entries"]:
        assert set(e["action_params"]) == {p.name for p in N.ACTIONS[e["action_name"]].params}
