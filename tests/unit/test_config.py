import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlcp.experiment import config
from dlcp.experiment.config import ConfigError

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXPERIMENTS = sorted((ROOT / "experiments").glob("*.toml"))


def minimal(**sections):
    raw = {"name": "t"}
    raw.update(sections)
    return raw


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.name)
def test_examples_validate_and_round_trip(path):
    cfg = config.load(path)
    again = config.validate(config.tomllib.loads(config.dumps(cfg)))
    assert again == cfg


def test_defaults_filled():
    cfg = config.validate(minimal())
    assert cfg["backend"] == "builtin" and cfg["dlcp"]["policy"] == "dlcp" and cfg["dlcp"]["loss_budget"] == 0.01
    assert cfg["topology"] == {"kind": "star", "hosts": 6} and cfg["background"] == []


@pytest.mark.parametrize(
    "raw,message",
    [
        (minimal(colour="red"), "colour: unknown key"),
        (minimal(dlcp={"polcy": "fifo"}), "dlcp.polcy: unknown key"),
        (minimal(dlcp={"loss_budget": 1.5}), "dlcp.loss_budget: 1.5 is not a fraction"),
        (minimal(dlcp={"loss_budget": "1%"}), "dlcp.loss_budget: expected number, got str"),
        (minimal(dlcp={"reliable": 1}), "dlcp.reliable: expected boolean"),
        (minimal(workload={"iterations": True}), "workload.iterations: expected integer, got bool"),
        (minimal(workload={"workers": 9}, topology={"hosts": 6}), "workload.workers: 9 workers + 1 PS need 10 hosts"),
        (minimal(workload={"mode": "gossip"}), "workload.mode: 'gossip' is not one of ps, allreduce"),
        (minimal(backend="ovs"), "backend: 'ovs' is not one of builtin, bmv2, ns3"),
        (minimal(backend="ref"), "backend: 'ref' is now called 'builtin'"),
        (minimal(dlcp={"k1": 70}), "dlcp.k1: thresholds must satisfy"),
        (minimal(dlcp={"qmax": 200}), "dlcp.qmax: 200 must be below links.queue_pkts 128"),
        (minimal(dlcp={"qmax": 128, "k1": 64}), "dlcp.qmax: 128 must be below links.queue_pkts 128"),
        (minimal(topology={"kind": "leaf_spine", "hosts": 4}), "topology.hosts: not a setting of kind 'leaf_spine'"),
        (minimal(background=[{"kind": "udp_onoff", "off_ms": 0}]), "background[0].off_ms"),
        (minimal(background={"kind": "tcp"}), "background: expected a list of tables"),
        ({"backend": "builtin"}, "name: required"),
        (minimal(name="a b"), "name: 'a b' may only hold"),
        (minimal(backend="bmv2", links={"loss": 0.01}), "links.delay_us: delay and loss emulation exist only"),
        (
            minimal(workload={"workers": 65}, topology={"kind": "leaf_spine", "leaves": 8, "hosts_per_leaf": 16}),
            "workload.workers: 65 workers: more than 64 need backend = 'ns3'",
        ),
        (minimal(backend="ns3", workload={"workers": 254}), "workload.workers: 254 is above the maximum 253"),
        (minimal(links={"mtu": 9000}), "links.mtu: 9000: jumbo links exist only on backend = 'ns3'"),
        (minimal(backend="ns3", links={"mtu": 9001}), "links.mtu: 9001 is above the maximum 9000"),
    ],
)
def test_bad_configs_fail_with_one_line_naming_the_key(raw, message):
    with pytest.raises(ConfigError) as e:
        config.validate(raw)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_ns3_takes_more_workers_than_mininet():
    cfg = config.validate(
        minimal(
            backend="ns3",
            workload={"workers": 128, "mode": "allreduce"},
            topology={"kind": "leaf_spine", "spines": 4, "leaves": 8, "hosts_per_leaf": 16},
        )
    )
    assert cfg["backend"] == "ns3" and cfg["workload"]["workers"] == 128


def test_jumbo_links_fill_packets_with_more_values():
    from dlcp.wire.header import VALUES_PER_PKT, values_per_pkt_for_mtu

    assert values_per_pkt_for_mtu(1500) == VALUES_PER_PKT == 350  # 1400 payload bytes
    assert values_per_pkt_for_mtu(9000) == 2225  # 8900 bytes: IPv4 20 + UDP 8 + DLCP 24 + telemetry 8 + 8900 = 8960
    cfg = config.validate(minimal(backend="ns3", links={"mtu": 9000}))
    assert cfg["links"]["mtu"] == 9000 and config.validate(minimal())["links"]["mtu"] == 1500


def test_overrides():
    raw = minimal(background=[{"kind": "tcp", "rate_mbps": 5}])
    config.apply_override(raw, "dlcp.policy=fifo")
    config.apply_override(raw, "workload.iterations=3")
    config.apply_override(raw, "background.0.rate_mbps=7.5")
    config.apply_override(raw, "links.loss=0.02")
    cfg = config.validate(raw)
    assert cfg["dlcp"]["policy"] == "fifo" and cfg["workload"]["iterations"] == 3
    assert cfg["background"][0]["rate_mbps"] == 7.5 and cfg["links"]["loss"] == 0.02
    with pytest.raises(ConfigError, match="background.3: no such list entry"):
        config.apply_override(raw, "background.3.rate_mbps=1")
    with pytest.raises(ConfigError, match="expected key=value"):
        config.apply_override(raw, "dlcp.policy")


def test_missing_and_broken_files(tmp_path):
    with pytest.raises(ConfigError, match="no such config file"):
        config.load(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("name = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        config.load(bad)


def test_reference_doc_lists_every_key():
    doc = (ROOT / "docs" / "experiments.md").read_text()
    assert config.schema_markdown() in doc, (
        "docs/experiments.md is stale: regenerate its table from config.schema_markdown()"
    )


def test_reference_doc_lists_every_registered_value():
    doc = (ROOT / "docs" / "experiments.md").read_text()
    assert config.values_markdown() in doc, (
        "docs/experiments.md is stale: python -m dlcp.experiment.config docs/experiments.md"
    )
    for key in ("dlcp.fill", "comm.scheduler", "comm.collective"):
        assert f"| `{key}` | `" in config.values_markdown()


KEYS = [row.split("`")[1] for row in config.schema_markdown().splitlines()[2:]]
TOML_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(KEYS + ["nosuch", "dlcp.nosuch", "topology.kind"]), TOML_VALUES), max_size=4))
def test_any_value_anywhere_resolves_or_fails_in_one_line_naming_a_key(assignments):
    raw = {"name": "t"}
    for key, value in assignments:
        if key.startswith("background[]."):
            raw["background"] = [{"kind": "tcp", key.split(".")[-1]: value}]
            continue
        *sections, last = key.split(".")
        node = raw
        for p in sections:
            node = node.setdefault(p, {}) if isinstance(node.get(p, {}), dict) else {}
        node[last] = value
    try:
        config.validate(raw)
    except ConfigError as e:
        text = str(e)
        assert "\n" not in text and ": " in text, text
        assert not any(w in text for w in ("Input should", "pydantic", "validation error")), text


def test_vary_gives_one_validated_variant_per_combination():
    raw = {"name": "v", "workload": {"mode": "allreduce", "workers": 4}}
    got = config.variants(raw, ["comm.scheduler=wfbp,dear", "dlcp.policy=fifo,dlcp"])
    assert [n for n, _ in got] == ["wfbp-fifo", "wfbp-dlcp", "dear-fifo", "dear-dlcp"]
    assert [(c["comm"]["scheduler"], c["dlcp"]["policy"]) for _, c in got] == [
        ("wfbp", "fifo"),
        ("wfbp", "dlcp"),
        ("dear", "fifo"),
        ("dear", "dlcp"),
    ]
    assert raw == {"name": "v", "workload": {"mode": "allreduce", "workers": 4}}  # untouched
    assert [n for n, _ in config.variants(raw, [])] == ["run"]
    assert [
        c["comm"]["dear"]["threshold_bytes"] for _, c in config.variants(raw, ["comm.dear.threshold_bytes=0,1000"])
    ] == [0, 1000]


@pytest.mark.parametrize(
    "vary,msg",
    [
        (["comm.scheduler"], "--vary comm.scheduler: expected key=value1,value2"),
        (["comm.scheduler=wfbp", "comm.scheduler=dear"], "--vary: key comm.scheduler given twice"),
        (["comm.scheduler=wfbp,fifo"], "variant fifo: comm.scheduler: 'fifo' is not one of"),
        # two values each (one would compare nothing): the first combination is the bad one
        (
            ["comm.scheduler=dear,wfbp", "comm.collective=dssync,ring"],
            "variant dear-dssync: comm.scheduler: 'dear' schedules",
        ),
        (
            ["workload.mode=ps,allreduce", "comm.scheduler=mgwfbp,wfbp"],
            "variant ps-mgwfbp: comm.scheduler: 'mgwfbp' runs all-reduces",
        ),
    ],
)
def test_bad_vary_is_one_line(vary, msg):
    with pytest.raises(config.ConfigError, match=msg):
        config.variants({"name": "v", "workload": {"mode": "allreduce"}}, vary)


def test_torus_and_mesh_experiments():
    cfg = config.validate(
        {
            "name": "t",
            "topology": {"kind": "torus", "dims": [4, 4]},
            "workload": {"mode": "allreduce", "workers": 16},
            "comm": {"collective": "multitree", "multitree": {"kary": 5}},
        }
    )
    from dlcp.network import topology as topospec

    spec = topospec.from_config(cfg)
    assert (
        spec.kind == "torus"
        and len(spec.switches) == 16
        and [h.rank for h in spec.by_role("worker")] == list(range(16))
    )
    with pytest.raises(config.ConfigError, match=r"topology.dims: 20x20 needs 2..254 switches"):
        config.validate({"name": "t", "topology": {"kind": "mesh", "dims": [20, 20]}})
    with pytest.raises(config.ConfigError, match=r"topology.hosts: not a setting of kind 'torus'"):
        config.validate({"name": "t", "topology": {"kind": "torus", "hosts": 4}})
    with pytest.raises(config.ConfigError, match="workload.workers: 17 workers need 17 hosts, topology.torus has 16"):
        config.validate({"name": "t", "topology": {"kind": "torus"}, "workload": {"mode": "allreduce", "workers": 17}})
    with pytest.raises(config.ConfigError, match=r"comm.dssync.group: 3 does not divide workload.workers = 4"):
        config.validate(
            {"name": "t", "workload": {"mode": "allreduce"}, "comm": {"collective": "dssync", "dssync": {"group": 3}}}
        )
