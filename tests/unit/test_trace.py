"""A run's timeline (dlcp/reporting/trace.py) drawn from a run directory's records: one slice per
layer per rank per iteration (forward and backward), one per message, the switch's queue counters;
read back as JSON and, where a trace processor binary is at hand, by Perfetto's trace processor."""

from __future__ import annotations

import csv
import json
import os
from collections import Counter
from pathlib import Path

import pytest
from synthetic_runs import write_synthetic_run

from dlcp.experiment import config as configmod
from dlcp.reporting.runreport import report_run
from dlcp.reporting.trace import write_trace

LAYERS, WORKERS, ITERATIONS = 8, 4, 6


def _profile_run(tmp_path: Path, compute: str = "profile") -> Path:
    run = write_synthetic_run(tmp_path / "run", workers=WORKERS, iterations=ITERATIONS, layers=LAYERS)
    prof = tmp_path / "p8.json"
    prof.write_text(
        json.dumps(
            {
                "model": "p8",
                "sizes": [1000 * (i + 1) for i in range(LAYERS)],
                "forward_s": [0.001] * LAYERS,
                "backward_s": [0.002] * LAYERS,
            }
        )
    )
    workload = {"mode": "ps", "workers": WORKERS, "model": "synthetic", "iterations": ITERATIONS}
    if compute == "profile":
        workload.update(compute="profile", profile=str(prof), compute_scale=1.5)
    raw = {"name": "synthetic", "backend": "builtin", "workload": workload}
    (run / "config.toml").write_text(configmod.dumps(configmod.validate(raw)))
    return run


def _senders(run: Path) -> list[dict]:
    rows = []
    for f in sorted((run / "records").glob("*-messages.csv")):
        with f.open(newline="") as fh:
            rows += [r for r in csv.DictReader(fh) if r["side"] == "sender" and r["complete_us"]]
    return rows


def test_trace_has_a_slice_per_layer_per_rank_and_one_per_message(tmp_path):
    run = _profile_run(tmp_path)
    events = json.loads(write_trace(run).read_text())["traceEvents"]
    slices = Counter((e["pid"], e["cat"]) for e in events if e["ph"] == "X")
    workers = {int(r["rank"]) for r in _senders(run) if int(r["rank"]) >= 0}
    for rank in workers:
        assert slices[(rank, "forward")] == slices[(rank, "backward")] == ITERATIONS * LAYERS
    fwd = [e for e in events if e["ph"] == "X" and e["cat"] == "forward"]
    assert all(e["dur"] == pytest.approx(1500.0) for e in fwd)  # 1 ms x compute_scale 1.5, in us
    begins = [e for e in events if e["ph"] == "b"]
    ends = {e["id"] for e in events if e["ph"] == "e"}
    assert len(begins) == len(_senders(run)) and {e["id"] for e in begins} == ends
    assert any("rounds" in e["name"] for e in begins)  # the tail's retransmission rounds are named
    counters = [e for e in events if e["ph"] == "C"]
    assert counters and {"q0", "q7"} <= set(counters[0]["args"]) | set(counters[2]["args"])
    assert any("drops" in e["name"] for e in counters)


def test_real_compute_gives_one_slice_per_iteration_and_the_report_links_the_trace(tmp_path):
    run = _profile_run(tmp_path, compute="real")
    summary = report_run(run, figures=False)
    assert summary["trace"]["file"] == "trace.json" and "ui.perfetto.dev" in summary["trace"]["open"]
    assert "Timeline: trace.json" in (run / "report.md").read_text()
    events = json.loads((run / "trace.json").read_text())["traceEvents"]
    compute = [e for e in events if e["ph"] == "X"]
    assert {e["cat"] for e in compute} == {"compute"} and len(compute) == ITERATIONS * WORKERS


def _trace_processor():
    """Perfetto's trace processor with a binary that is on this machine (the perfetto package
    downloads one on first use, which an offline machine cannot): DLCP_TRACE_PROCESSOR names it."""
    tp = pytest.importorskip("perfetto.trace_processor")
    binary = os.environ.get("DLCP_TRACE_PROCESSOR")
    if not binary or not Path(binary).is_file():
        pytest.skip(
            "no trace_processor_shell binary here (set DLCP_TRACE_PROCESSOR; the package cannot download one offline)"
        )
    return tp, binary


def test_trace_loads_in_perfettos_trace_processor(tmp_path):
    tp, binary = _trace_processor()
    run = _profile_run(tmp_path)
    trace = write_trace(run)
    with tp.TraceProcessor(trace=str(trace), config=tp.TraceProcessorConfig(bin_path=binary)) as processor:
        rows = processor.query("select category, count(*) as n from slice group by category").as_pandas_dataframe()
    n = dict(zip(rows["category"], rows["n"]))
    ranks = len({int(r["rank"]) for r in _senders(run) if int(r["rank"]) >= 0})
    assert n["forward"] == n["backward"] == ranks * ITERATIONS * LAYERS
    assert n["message"] == len(_senders(run))
