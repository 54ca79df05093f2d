"""Several training jobs on one fabric ([[jobs]]): the config model (each job starts from the
experiment's sections), its refusals, the placement of the jobs on the topology, each agent's job
id and start, the policies between jobs (priority bands of the switch queues, time-shifts) and the
band mapping of the tagging."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from dlcp.experiment import config
from dlcp.experiment.agent_config import agent_configs
from dlcp.experiment.job_policies.priority import class_bands
from dlcp.experiment.job_policies.timeshift import CommPattern, best_shifts
from dlcp.network import topology
from dlcp.settings import ConfigError
from dlcp.wire.tagging import TaggingConfig, band_priority, tag_packets

TWO_JOBS = {
    "name": "two",
    "backend": "ns3",
    "topology": {"kind": "leaf_spine", "spines": 1, "leaves": 2, "hosts_per_leaf": 4},
    "workload": {"mode": "allreduce", "model": "synthetic", "iterations": 4, "compute_ms": 2},
    "dlcp": {"policy": "layer", "loss_budget": 0.02},
    "cluster": {"job_policy": "priority"},
    "jobs": [
        {"name": "a", "priority": 1, "workload": {"workers": 4}},
        {"name": "b", "start_s": 0.5, "workload": {"workers": 3, "iterations": 6}, "dlcp": {"policy": "fifo"}},
    ],
}


def _two(**cluster) -> dict:
    raw = copy.deepcopy(TWO_JOBS)
    raw["cluster"] = {**raw["cluster"], **cluster}
    return raw


def test_each_job_starts_from_the_experiments_sections():
    cfg = config.validate(TWO_JOBS)
    a, b = cfg["jobs"]
    assert (a["workload"]["workers"], a["workload"]["iterations"], a["workload"]["compute_ms"]) == (4, 4, 2)
    assert (b["workload"]["workers"], b["workload"]["iterations"], b["workload"]["compute_ms"]) == (3, 6, 2)
    assert (a["dlcp"]["policy"], b["dlcp"]["policy"]) == ("layer", "fifo")
    assert a["dlcp"]["loss_budget"] == b["dlcp"]["loss_budget"] == 0.02
    assert b["start_s"] == 0.5
    # the experiment's own sections resolve to the first job's (what reads one workload reads a job that runs)
    assert cfg["workload"]["workers"] == 4
    # the validated config validates to itself: what config.toml holds reruns the same
    assert config.validate(cfg) == cfg


def test_a_single_job_file_resolves_as_before():
    raw = {k: v for k, v in TWO_JOBS.items() if k not in ("jobs", "cluster")}
    raw["workload"] = {**raw["workload"], "workers": 4}
    cfg = config.validate(raw)
    assert cfg["jobs"] == [] and cfg["cluster"]["job_policy"] == "fifo"
    assert cfg["dlcp"]["queues"] == [1, 6]
    assert config.policy_of(cfg) == "layer"
    assert config.policy_of(config.validate(TWO_JOBS)) == "priority"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r["jobs"][1]["workload"].update(workers=5), r"^jobs: the jobs' 9 workers .* need 9 hosts"),
        (lambda r: r["jobs"][1].update(name="a"), r"^jobs\[1\]\.name: 'a' names two jobs"),
        (lambda r: r["jobs"][0]["workload"].update(workers=0), r"^jobs\[0\]\.workload\.workers"),
        (
            lambda r: r["jobs"][0].update(dlcp={"queues": [2, 3]}),
            r"^jobs\[0\]\.dlcp\.queues: \[2, 3\]: .*gives this job",
        ),
        (lambda r: r.update(backend="bmv2"), r"^jobs: several jobs on one fabric run on backend = 'builtin' or 'ns3'"),
        (lambda r: r.pop("jobs"), r"^cluster\.job_policy: 'priority' is a policy between jobs: it needs \[\[jobs\]\]"),
        (
            lambda r: r["cluster"].update(job_policy="timeshift", timeshift={"shifts_s": [0.1]}),
            r"^cluster\.timeshift\.shifts_s: 1 shifts for 2 jobs",
        ),
        (
            lambda r: (
                r["cluster"].update(job_policy="timeshift", timeshift={"shifts_s": [0, 0.1]}),
                r["jobs"][1].update(shift_s=0.2),
            ),
            r"^jobs\[1\]\.shift_s: 0\.2: cluster\.job_policy = 'timeshift' gives this job 0\.1 s",
        ),
    ],
)
def test_bad_jobs_are_refused_with_one_line_naming_the_key(change, message):
    raw = copy.deepcopy(TWO_JOBS)
    change(raw)
    with pytest.raises(ConfigError, match=message):
        config.validate(raw)


def test_priority_classes_are_bands_of_the_data_queues_highest_on_top():
    assert class_bands([1, 0]) == [[4, 6], [1, 3]]
    assert class_bands([5, 5]) == [[1, 6], [1, 6]]  # one class: the whole band
    assert class_bands([0, 2, 1]) == [[1, 2], [5, 6], [3, 4]]
    seven = class_bands(list(range(7)))  # more classes than queues: neighbours share one
    assert seven[0] == [1, 1] and seven[-1] == [6, 6] and all(lo == hi for lo, hi in seven)
    cfg = config.validate(TWO_JOBS)
    assert [j["dlcp"]["queues"] for j in cfg["jobs"]] == [[4, 6], [1, 3]]


def test_a_band_keeps_the_layers_order_inside_it():
    prio = np.arange(1, 7, dtype=np.uint8)
    assert band_priority(prio, (1, 6)) is prio  # the full band is the identity
    assert band_priority(prio, (4, 6)).tolist() == [4, 4, 5, 5, 6, 6]
    assert band_priority(prio, (1, 3)).tolist() == [1, 1, 2, 2, 3, 3]
    assert band_priority(prio, (2, 2)).tolist() == [2] * 6
    mags, layers = np.ones(12, np.float32), np.repeat(np.arange(6), 2)
    high = tag_packets(mags, layers, 6, TaggingConfig(policy="layer", queues=[4, 6]))
    low = tag_packets(mags, layers, 6, TaggingConfig(policy="layer", queues=[1, 3]))
    assert set(high.prio.tolist()) == {4, 5, 6} and set(low.prio.tolist()) == {1, 2, 3}
    with pytest.raises(ConfigError, match="queues: \\[5, 2\\]: the lowest queue comes first"):
        TaggingConfig(queues=[5, 2])


def test_jobs_take_disjoint_hosts_spread_over_the_leaves():
    cfg = config.validate(TWO_JOBS)
    spec = topology.from_config(cfg)
    a, b = spec.by_role("worker", 1), spec.by_role("worker", 2)
    assert [h.rank for h in a] == [0, 1, 2, 3] and [h.rank for h in b] == [0, 1, 2]
    assert not {h.name for h in a} & {h.name for h in b}
    leaf = {name: sw for sw, _p, name, _pp, _r in spec.links() if name.startswith("h")}
    assert len({leaf[h.name] for h in a}) == 2 and len({leaf[h.name] for h in b}) == 2
    assert spec.host_named("job2.worker1") is b[1] and spec.host_named("worker1") is a[1]
    view = spec.job_view(2)
    assert [h.name for h in view.by_role("worker")] == [h.name for h in b]
    assert topology.switch_policy(cfg) == "layer"
    hosts = spec.to_json()["hosts"]
    assert {h["job"] for h in hosts if h["role"] == "worker"} == {1, 2}
    single = topology.from_config(config.validate({**TWO_JOBS, "jobs": [], "cluster": {}}))
    assert "job" not in single.to_json()["hosts"][0] and "jobs" not in single.to_json()


def test_switches_classify_once_any_job_needs_queues():
    fifo = _two(job_policy="fifo")
    for j in fifo["jobs"]:
        j.setdefault("dlcp", {})["policy"] = "fifo"
    assert topology.switch_policy(config.validate(fifo)) == "fifo"
    both_fifo = _two()
    for j in both_fifo["jobs"]:
        j.setdefault("dlcp", {})["policy"] = "fifo"
    assert topology.switch_policy(config.validate(both_fifo)) == "layer"  # only the bands differ


def test_each_agent_carries_its_jobs_id_and_start(tmp_path: Path):
    raw = _two(job_policy="timeshift", timeshift={"shifts_s": [0, 0.25]})
    cfg = config.validate(raw)
    spec = topology.from_config(cfg)
    agents = [(host, role, a) for host, role, a in agent_configs(cfg, spec, tmp_path) if role == "worker"]
    by_job = {}
    for host, _role, a in agents:
        by_job.setdefault(a.job_id, []).append(a)
        assert a.topology_spec().by_role("worker")[a.rank].name == host  # each rebuilds its own job's view
    assert sorted(by_job) == [1, 2]
    assert [a.world for a in by_job[1]] == [4] * 4 and [a.world for a in by_job[2]] == [3] * 3
    assert {a.start_s for a in by_job[1]} == {0.0} and {a.start_s for a in by_job[2]} == {0.75}  # start_s + shift_s
    assert {a.workload.iterations for a in by_job[2]} == {6}
    assert {tuple(a.dlcp.queues) for _h, _r, a in agents} == {(1, 6)}


def test_single_job_agents_keep_job_id_1(tmp_path: Path):
    raw = {k: v for k, v in TWO_JOBS.items() if k not in ("jobs", "cluster")}
    raw["workload"] = {**raw["workload"], "workers": 4}
    cfg = config.validate(raw)
    agents = agent_configs(cfg, topology.from_config(cfg), tmp_path)
    assert {a.job_id for _h, _r, a in agents} == {1} and {a.start_s for _h, _r, a in agents} == {0.0}


def test_timeshift_interleaves_two_jobs_that_each_communicate_half_the_time():
    half = CommPattern(1.0, ((0.0, 0.5),))
    (s0, s1) = best_shifts([half, half], resolution=64)
    assert s0 == 0 and s1 == pytest.approx(0.5)
    # a job twice as long that communicates a quarter of its iteration fits in the other's gap
    long = CommPattern(2.0, ((0.0, 0.5),))
    _, s = best_shifts([half, long], resolution=64)
    assert s == pytest.approx(0.5)  # 1.5 fits too: ties go to the smaller shift
