"""Systems (dlcp/experiment/systems/): named bundles of settings, applied over the file's, with
--set still winning; selected by `system`, `--vary system=` or `--policies`."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlcp.experiment import config as configmod
from dlcp.experiment.systems import SYSTEMS
from dlcp.runs.series_runner import SeriesRequest, plan
from dlcp.settings import ConfigError
from dlcp.wire.tagging import POLICIES

FILE = """
name = "sys"
backend = "ns3"
[topology]
hosts = 6
[workload]
mode = "{mode}"
workers = 4
iterations = 3
[dlcp]
policy = "layer"
loss_budget = 0.02
"""


def experiment(tmp_path: Path, mode: str = "ps", extra: str = "") -> str:
    path = tmp_path / f"sys-{mode}.toml"
    path.write_text(extra + FILE.format(mode=mode))
    return str(path)


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_every_system_validates_in_each_of_its_modes(tmp_path, name):
    for mode in SYSTEMS[name].modes:
        cfg = configmod.load(experiment(tmp_path, mode), [f"system={name}"])
        assert cfg["system"] == name
        for key, value in SYSTEMS[name].settings.items():
            section, k = key.split(".")
            assert cfg[section][k] == value, key


def test_the_tagging_policies_are_systems_that_set_only_the_policy():
    for policy in POLICIES:
        assert SYSTEMS[policy].settings == {"dlcp.policy": policy}


def test_policies_of_tagging_names_vary_the_policy_as_before(tmp_path):
    runs = plan(SeriesRequest(experiment(tmp_path), policies=["fifo", "dlcp"])).runs
    assert [(r.variant, r.cfg["dlcp"]["policy"], r.cfg["system"]) for r in runs] == [
        ("fifo", "fifo", ""),
        ("dlcp", "dlcp", ""),
    ]


def test_policies_with_a_system_vary_the_system_and_set_still_wins(tmp_path):
    req = SeriesRequest(experiment(tmp_path), ["dlcp.close_early_max=0.05"], policies=["reliable", "dlcp", "ltp"])
    runs = {r.variant: r.cfg for r in plan(req).runs}
    assert list(runs) == ["reliable", "dlcp", "ltp"]
    assert runs["reliable"]["dlcp"]["reliable"] and runs["reliable"]["dlcp"]["policy"] == "fifo"
    assert runs["dlcp"]["dlcp"]["policy"] == "dlcp" and runs["dlcp"]["dlcp"]["loss_budget"] == 0.02  # the file's
    ltp = runs["ltp"]["dlcp"]
    assert (ltp["close"], ltp["fill"], ltp["close_early_max"]) == ("early", "bubble", 0.05)  # --set kept


def test_a_system_in_the_file_or_by_set_applies_its_settings(tmp_path):
    cfg = configmod.load(experiment(tmp_path, "allreduce", 'system = "optireduce"\n'))
    assert (cfg["comm"]["collective"], cfg["dlcp"]["close"], cfg["workload"]["hadamard"]) == ("tar", "timeout", True)
    cfg = configmod.load(experiment(tmp_path), ["system=dblp", "dlcp.phase_high=0.2"])
    assert cfg["dlcp"]["budget_schedule"] == "phase" and cfg["dlcp"]["phase_high"] == 0.2


def test_a_system_outside_its_modes_or_unknown_is_refused_in_one_line(tmp_path):
    with pytest.raises(
        ConfigError, match="^variant optireduce: system: 'optireduce' runs in workload.mode 'allreduce', not 'ps'$"
    ):
        plan(SeriesRequest(experiment(tmp_path), policies=["dlcp", "optireduce"]))
    with pytest.raises(ConfigError, match="^system: system 'gloo' is not one of "):
        configmod.load(experiment(tmp_path), ["system=gloo"])
    with pytest.raises(ConfigError, match="--set system names one already"):
        plan(SeriesRequest(experiment(tmp_path), ["system=dlcp"], vary=["system=fifo,dlcp"]))


BOUNDED_LOSS = "experiments/bounded-loss.toml"


@pytest.mark.parametrize(
    ("sets", "policies"),
    [
        ([], ["reliable", "fifo", "dlcp", "ltp", "dblp"]),  # PS, bursty (the file as it is)
        (
            ["workload.mode=allreduce", "background.0.dst=worker0", "background.1.dst=worker1"],
            ["reliable", "fifo", "dlcp", "optireduce", "dblp"],
        ),  # all-reduce, bursty
        (["background=[]"], ["reliable", "dlcp", "ltp", "dblp"]),  # quiet
        (["backend=ns3", "workload.workers=16", "topology.hosts=19"], ["reliable", "dlcp", "ltp", "dblp"]),
        (["workload.workers=8", "topology.hosts=11"], ["tcp", "ltp"]),  # LTP's setting
    ],
)
def test_the_bounded_loss_experiment_plans_the_variants_its_header_documents(sets, policies):
    runs = plan(SeriesRequest(BOUNDED_LOSS, sets, policies=policies)).runs
    assert [r.variant for r in runs] == policies
    for r in runs:
        assert r.cfg["system"] == r.variant
        assert r.cfg["workload"]["target_accuracy"] == 0.75  # time to accuracy is measured


def test_the_bounded_loss_experiment_plans_dblps_setting_its_header_documents():
    sets = [
        "system=dblp",
        "workload.iterations=100",
        "background.0.dscp=40",
        "background.1.dscp=40",
        "dlcp.deadline_ms=2000",
    ]
    runs = plan(SeriesRequest(BOUNDED_LOSS, sets, vary=["dlcp.phase_high=0.008,0.408"])).runs
    assert [r.variant for r in runs] == ["0.008", "0.408"]
    for r, high in zip(runs, (0.008, 0.408), strict=True):
        d = r.cfg["dlcp"]
        assert (d["budget_schedule"], d["phase_low"], d["phase_high"], d["loss_budget"]) == (
            "phase",
            0.008,
            high,
            0.408,
        )
        assert [b["dscp"] for b in r.cfg["background"]] == [40, 40]  # the gradients' priority-5 queue
