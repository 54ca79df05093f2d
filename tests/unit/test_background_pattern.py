"""On/off background bursts (agents/background.py `onoff_periods`): periodic sources repeat one
burst; exponential ones draw each burst and silence from the flow's seed, with the configured
means, the same sequence for the same seed (both runs of a pair) and another for another seed."""

from __future__ import annotations

import itertools
import statistics

import pytest

from agents.background import onoff_periods
from dlcp.experiment import config
from dlcp.experiment.agent_config import BackgroundFlow, agent_configs
from dlcp.network import topology
from dlcp.settings import ConfigError


def flow(pattern: str, seed: int = 5, on_ms: float = 3, off_ms: float = 7) -> BackgroundFlow:
    return BackgroundFlow(
        kind="udp_onoff", on_ms=on_ms, off_ms=off_ms, pattern=pattern, dst_ip="10.0.0.5", port=5001, index=0, seed=seed
    )


def take(bg: BackgroundFlow, n: int) -> list[tuple[float, float]]:
    return list(itertools.islice(onoff_periods(bg), n))


def test_periodic_bursts_repeat_exactly():
    assert take(flow("periodic"), 4) == [(0.003, 0.007)] * 4


def test_exponential_bursts_have_the_configured_means_and_spread():
    on, off = zip(*take(flow("exponential"), 20000))
    assert statistics.fmean(on) == pytest.approx(0.003, rel=0.03)
    assert statistics.fmean(off) == pytest.approx(0.007, rel=0.03)
    # exponential: standard deviation equals the mean (a periodic source has none)
    assert statistics.pstdev(on) == pytest.approx(0.003, rel=0.05)


def test_exponential_sequence_follows_the_seed():
    assert take(flow("exponential", seed=5), 50) == take(flow("exponential", seed=5), 50)
    assert take(flow("exponential", seed=5), 50) != take(flow("exponential", seed=6), 50)


def test_each_flow_is_seeded_from_the_runs_seed_and_its_index(tmp_path):
    exp = {
        "name": "bg",
        "seed": 3,
        "topology": {"kind": "star", "hosts": 5},
        "workload": {"mode": "ps", "workers": 2, "model": "synthetic", "dataset": "synthetic"},
        "background": [
            {"kind": "udp_onoff", "dst": "ps", "pattern": "exponential"},
            {"kind": "udp_onoff", "dst": "ps", "pattern": "exponential"},
        ],
    }
    cfg = config.validate(exp)
    flows = [
        c.background for _, role, c in agent_configs(cfg, topology.from_config(cfg), tmp_path) if role == "background"
    ]
    assert [(f.pattern, f.seed) for f in flows] == [("exponential", 3000), ("exponential", 3001)]


def test_an_unknown_pattern_is_named():
    exp = {
        "name": "bg",
        "topology": {"kind": "star", "hosts": 4},
        "workload": {"mode": "ps", "workers": 2, "model": "synthetic", "dataset": "synthetic"},
        "background": [{"kind": "udp_onoff", "pattern": "poisson"}],
    }
    with pytest.raises(ConfigError, match=r"background\[0\]\.pattern"):
        config.validate(exp)
