"""Agent configurations (dlcp/experiment/agent_config.py): what the runner writes is what the agents
read, checked with the same models, and the settings objects of the transport, collectives and
tagging come from the validated experiment."""

from __future__ import annotations

import json

import pytest

from agents.background import load_config as load_background
from agents.common import load_agent_config
from dlcp.experiment import config
from dlcp.experiment.agent_config import BackgroundFlow, Sink, agent_config_path, agent_configs, write_agent_config
from dlcp.network import topology
from dlcp.settings import ConfigError
from dlcp.transport.api import TransportConfig

EXPERIMENT = {
    "name": "agents",
    "seed": 7,
    "timeout_s": 20,
    "topology": {"kind": "star", "hosts": 5},
    "workload": {"mode": "ps", "workers": 3, "model": "synthetic", "dataset": "synthetic", "lr": 0.1},
    "dlcp": {
        "loss_budget": 0.05,
        "layer_budgets": {"2": 0.001},
        "r_max": 0,
        "ring_budget": "per_step",
        "resync_every": 7,
        "policy": "layer",
        "transport": "tcp",
        "data_port": 7000,
        "control_port": 7001,
    },
    "background": [{"kind": "udp_cbr", "dst": "ps", "rate_mbps": 5}],
    "output": {"per_packet": True},
}


def written(tmp_path):
    cfg = config.validate(EXPERIMENT)
    configs = agent_configs(cfg, topology.from_config(cfg), tmp_path)
    for host, role, acfg in configs:
        write_agent_config(tmp_path, host, role, acfg)
    return configs


def load_as_agent(path, role):
    """The agent's own loader: workers and the PS share agents.common, background agents their own."""
    return load_background(str(path)) if role.startswith(("background", "sink")) else load_agent_config(path, role)


def test_what_the_runner_writes_the_agents_read_back(tmp_path):
    configs = written(tmp_path)
    assert sorted(role for _, role, _ in configs) == ["background", "ps", "sink5001", "worker", "worker", "worker"]
    for host, role, acfg in configs:
        assert load_as_agent(agent_config_path(tmp_path, host, role), role) == acfg
    sink = next(c for _, r, c in configs if r == "sink5001")
    flow = next(c for _, r, c in configs if r == "background")
    assert isinstance(sink.background, Sink) and isinstance(flow.background, BackgroundFlow)
    assert flow.background.port == sink.background.port == 5001 and flow.background.dst_ip == "10.0.0.4"


def test_settings_objects_come_from_the_experiment(tmp_path):
    configs = {host: acfg for host, role, acfg in written(tmp_path) if role in ("worker", "ps")}
    worker, ps = configs["h2"], configs["h4"]
    t = worker.transport_config()
    assert (t.rank, t.ip, t.data_port, t.control_port, t.host) == (1, "10.0.0.2", 7000, 7001, "h2")
    assert (t.loss_budget, t.layer_budgets, t.r_max, t.transport, t.per_packet) == (0.05, {2: 0.001}, 0, "tcp", True)
    assert t.inject_seed == 7 * 1000 + 1 and t.connect_timeout_s == 20
    assert t.budget_for(0, 1) == 0.05 and t.budget_for(1, 3) == 0.001
    c = ps.comm_config()
    assert (c.rank, c.world, c.ring_budget, c.resync_every, c.tagging.policy) == (255, 3, "per_step", 7, "layer")
    assert [p.rank for p in worker.peers()] == [0, 2, 255] and [p.rank for p in ps.peers()] == [0, 1, 2]
    assert worker.workload.seed == 7 and worker.workload.lr == 0.1 and "qmax" not in type(worker.dlcp).model_fields


def test_one_key_one_bound_everywhere():
    """r_max is declared once (TransportSettings): the experiment, an agent config and a direct
    TransportConfig reject the same value with the same words."""
    with pytest.raises(ConfigError, match=r"^dlcp\.r_max: 255 is above the maximum 254$"):
        config.validate(dict(EXPERIMENT, dlcp={"r_max": 255}))
    with pytest.raises(ConfigError, match=r"^dlcp\.r_max: 255 is above the maximum 254$"):
        TransportConfig(r_max=255)


@pytest.mark.parametrize(
    "host,role,change,message",
    [
        ("h1", "worker", lambda c: c["dlcp"].update(r_max=300), "dlcp.r_max: 300 is above the maximum 254"),
        (
            "h1",
            "worker",
            lambda c: c["dlcp"]["layer_budgets"].update({"x": 0.1}),
            "dlcp.layer_budgets: key 'x': expected integer, got str 'x'",
        ),
        ("h1", "worker", lambda c: c.pop("workload"), "workload: required"),
        ("h1", "worker", lambda c: c["workload"].update(lr=True), "workload.lr: expected number, got bool True"),
        ("h1", "worker", lambda c: c.update(world=2), "workers: 3 entries for world 2"),
        ("h4", "worker", lambda c: None, "role: 'ps', but this is the worker agent"),
        ("h4", "ps", lambda c: c.update(rank=3), "rank: the PS has rank -1, got 3"),
        (
            "h5",
            "background",
            lambda c: c["background"].update(kind="icmp"),
            "background.kind: 'icmp' is not one of udp_cbr, udp_onoff, tcp, sink",
        ),
        ("h5", "background", lambda c: c["background"].pop("dst_ip"), "background.dst_ip: required"),
    ],
)
def test_a_bad_agent_config_is_one_line_naming_the_key(tmp_path, host, role, change, message):
    configs = written(tmp_path)
    file_role = "ps" if host == "h4" else role
    path = agent_config_path(tmp_path, host, file_role)
    raw = json.loads(path.read_text())
    change(raw)
    path.write_text(json.dumps(raw))
    if role == "background":
        with pytest.raises(SystemExit) as e:
            load_background(str(path))
        text = str(e.value.code)
    else:
        with pytest.raises(ConfigError) as e:
            load_agent_config(path, role)
        text = str(e.value)
    assert message in text and "\n" not in text, text
    assert configs  # the good ones were written


def test_unreadable_agent_config(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_agent_config(tmp_path / "nope.json", "worker")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ConfigError, match="is not valid JSON"):
        load_agent_config(tmp_path / "bad.json", "worker")
