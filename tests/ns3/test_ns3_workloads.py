"""Real workloads on ns-3: `workload.compute_scale` multiplies the simulated compute, and a finished
run's timeline (trace.json) and Chakra export come from its records. Skipped without the sim extra
(the Chakra part also without the chakra extra)."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest
from agent_runs import read_csv
from cli_runs import run_experiment
from ns3_scripts import leaf_spine4

from simulation.ns3.hosts import core_missing

pytestmark = pytest.mark.skipif(core_missing() is not None, reason=str(core_missing()))

SIZES = [3000, 20000, 500, 9000]
WORKERS, ITERATIONS = 4, 3
CONFIG = (
    leaf_spine4("workloads", 100)
    + f"""
model = "synthetic"
compute = "profile"
profile = "{{profile}}"
payload = "sizes"
iterations = {ITERATIONS}
warmup_iterations = 0
eval_every = 0
"""
)


def _run(tmp_path: Path, name: str, *sets: str) -> Path:
    profile = tmp_path / "tiny.json"
    profile.write_text(
        json.dumps({"model": "tiny", "sizes": SIZES, "forward_s": [0.0005] * 4, "backward_s": [0.001] * 4})
    )
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text(CONFIG.format(profile=profile))
    return run_experiment(cfg, tmp_path / name, *sets)


def _compute_us(run: Path) -> list[int]:
    rows = [r for f in sorted((run / "records").glob("*-iterations.csv")) for r in read_csv(f)]
    return sorted({int(r["compute_us"]) for r in rows})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ns3-workloads")
    return tmp, _run(tmp, "k1"), _run(tmp, "k4", "workload.compute_scale=4")


def test_compute_scale_and_the_trace_of_an_ns3_run(runs):
    _, one, four = runs
    assert _compute_us(one) == [6000] and _compute_us(four) == [24000]  # (4 x 0.5 + 4 x 1) ms x k
    report = (four / "report.md").read_text()
    assert "compute from profile" in report and "x 4 (workload.compute_scale" in report
    events = json.loads((four / "trace.json").read_text())["traceEvents"]
    slices = Counter((e["pid"], e["cat"]) for e in events if e["ph"] == "X")
    for rank in range(WORKERS):
        assert slices[(rank, "forward")] == slices[(rank, "backward")] == ITERATIONS * len(SIZES)
    assert {e["dur"] for e in events if e["ph"] == "X" and e["cat"] == "backward"} == {4000.0}
    senders = [
        r for f in sorted((four / "records").glob("*-messages.csv")) for r in read_csv(f) if r["side"] == "sender"
    ]
    assert sum(1 for e in events if e["ph"] == "b") == len(senders) > 0


def test_chakra_export_of_an_ns3_run(runs):
    if importlib.util.find_spec("chakra") is None:
        pytest.skip("the chakra extra is not installed")
    from dlcp.experiment.chakra_export import export_run
    from dlcp.workloads.chakra import profile_from_et

    tmp, _, four = runs
    paths = export_run(four, tmp / "et")
    assert len(paths) == WORKERS
    back = profile_from_et(paths[1])
    assert back.sizes == tuple(SIZES) and back.backward_s == pytest.approx([0.004] * 4)


def test_another_models_profile_is_named_in_an_ns3_report(tmp_path):
    # a torch mlp timed by the digits CNN's profile: laid over its tensors by parameter fraction
    cfg = tmp_path / "fitted.toml"
    cfg.write_text(
        leaf_spine4("fitted", 100)
        + """
model = "mlp"
dataset = "digits"
compute = "profile"
profile = "cnn-digits-b32"
iterations = 2
warmup_iterations = 0
eval_every = 0
"""
    )
    run = run_experiment(cfg, tmp_path / "fitted")
    workers = [json.loads(p.read_text()) for p in sorted((run / "records").glob("*-agent.json"))]
    assert {w.get("profile_fit") for w in workers} == {"parameter fraction"}
    report = (run / "report.md").read_text()
    assert "compute from profile cnn-digits-b32 (another model's" in report
