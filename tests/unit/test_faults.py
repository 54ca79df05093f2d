"""Fault injection without root: damaged and deleted files of a run directory, bad inputs to
`dlcp run` and the benchmarks, and how a process's end is reported. Each case is one a user hit
(issue 30); the cases that need root (Mininet, a read-only mount, killing a real run) are in
tests/root/test_faults_emulated.py.

Every bad input must give one line naming the problem and exit 2 before anything starts; every
damaged or missing file of a run must be named in its report with what it leaves unknown, and
what another file records must still be used."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys

import pytest
from synthetic_runs import write_synthetic_run

from dlcp.reporting.load import load_run
from dlcp.reporting.render import to_markdown
from dlcp.reporting.runreport import build_doc
from dlcp.reporting.summarise import summarise

ROOT = pathlib.Path(__file__).resolve().parents[2]
D = 10  # the time dilation of the dilated run below
RATE = 500.0  # its system's link rate, Mbit/s (the emulation ran 50)
SMALL = {"iterations": 6, "layers": 4, "workers": 3}


def dilated_run(path: pathlib.Path) -> pathlib.Path:
    """A run as `dlcp run` leaves it with `scale.dilation = 10`: measured times 10x the system's,
    meta.json `dilation`, config.toml `[scale]`, topology.json at the emulated (dilated) rates."""
    run = write_synthetic_run(path, time_scale=D, host_mbps=RATE, **SMALL)
    meta = json.loads((run / "meta.json").read_text())
    (run / "meta.json").write_text(json.dumps({**meta, "dilation": float(D)}))
    with (run / "config.toml").open("a") as f:
        f.write(f"\n[scale]\ndilation = {D}\n")
    topo = json.loads((run / "topology.json").read_text())
    for link in topo["links"]:
        link["rate_mbps"] /= D
    (run / "topology.json").write_text(json.dumps(topo))
    return run


@pytest.fixture(scope="module")
def intact(tmp_path_factory) -> tuple[pathlib.Path, dict]:
    run = dilated_run(tmp_path_factory.mktemp("intact") / "dlcp")
    return run, summarise(load_run(run))


@pytest.fixture
def copy(intact, tmp_path) -> pathlib.Path:
    return pathlib.Path(shutil.copytree(intact[0], tmp_path / "dlcp"))


def problems_of(run: pathlib.Path) -> tuple[dict, list[str]]:
    s = summarise(load_run(run))
    return s, s["problems"]


# --- config.toml and meta.json: the dilation and the other run facts (item 3) -----------------------


CONFIG_DAMAGES = {
    "empty": lambda p: p.write_text(""),
    "missing": lambda p: p.unlink(),
    "unreadable": lambda p: p.write_text("[links\nhost_mbps = 5"),
    "whitespace only": lambda p: p.write_text("\n  \n"),
}


def test_the_intact_dilated_run_is_reported_in_the_systems_time(intact):
    _, s = intact
    assert s["scale"]["dilation"] == D and s["lower_bound"]["bottleneck_mbps"] == RATE and not s["problems"]


@pytest.mark.parametrize("damage", list(CONFIG_DAMAGES))
def test_a_damaged_config_keeps_the_dilation_meta_json_records(intact, copy, damage):
    _, good = intact
    CONFIG_DAMAGES[damage](copy / "config.toml")
    s, problems = problems_of(copy)
    assert s["mct_us"]["overall"]["p50"] == good["mct_us"]["overall"]["p50"]  # not 10x
    assert s["scale"]["dilation"] == D and s["scale"]["dilation_from"] == "meta.json"
    # the ideal from topology.json's emulated rate, times the dilation: the system's 500, not 50
    assert s["lower_bound"]["bottleneck_mbps"] == RATE
    state = "empty" if damage == "whitespace only" else damage
    line = next(p for p in problems if p.startswith("config.toml:"))
    assert line.startswith(f"config.toml: {state}") and "time dilation 10 from meta.json" in line, line
    assert "warm-up iterations unknown" in line  # what it leaves unknown


def test_without_meta_json_the_dilation_comes_from_the_config(intact, copy):
    (copy / "meta.json").unlink()
    s, problems = problems_of(copy)
    assert s["mct_us"]["overall"]["p50"] == intact[1]["mct_us"]["overall"]["p50"]
    line = next(p for p in problems if p.startswith("meta.json: missing"))
    assert "time dilation 10 from config.toml" in line and "how the run ended unknown" in line


def test_without_both_the_dilation_is_unknown_and_the_report_says_so(copy):
    (copy / "meta.json").unlink()
    (copy / "config.toml").write_text("")
    s, problems = problems_of(copy)
    assert s["scale"]["dilation"] == 1 and s["scale"]["dilation_from"] is None
    assert any("time dilation unknown: times are shown as measured" in p for p in problems), problems
    md = to_markdown(build_doc(load_run(copy), s, figures=False))
    assert "Time dilation unknown" in md and "No time dilation" not in md


def test_meta_and_config_that_disagree_are_flagged(copy):
    (copy / "config.toml").write_text((copy / "config.toml").read_text().replace(f"dilation = {D}", "dilation = 2"))
    s, problems = problems_of(copy)
    assert s["scale"]["dilation"] == D
    assert any(p.startswith("meta.json records time dilation 10, config.toml [scale] dilation 2") for p in problems)


def test_compare_of_a_run_and_its_copy_with_an_empty_config_is_one(intact, copy, tmp_path):
    from dlcp.reporting import compare_runs

    (copy / "config.toml").write_text("")
    out = tmp_path / "cmp"
    compare_runs([intact[0], copy], out)
    data = json.loads((out / "compare.json").read_text())
    other = data["runs"][1]
    assert other["ratios"]["mct_p50_us"] == pytest.approx(1.0)
    assert any(p.startswith("config.toml: empty") for p in other["problems"])


def test_dlcp_report_warns_of_an_empty_config(copy):
    (copy / "config.toml").write_text("")
    p = subprocess.run(
        [sys.executable, "-m", "dlcp_cli", "report", str(copy), "--out", str(copy.parent / "rep")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr
    assert "Time dilation 10" in p.stdout
    assert "config.toml: empty" in p.stderr and "time dilation 10 from meta.json" in p.stderr


# --- records: a deleted file is named, like a truncated one (item 4) ---------------------------------


@pytest.mark.parametrize("kind", ["messages.csv", "iterations.csv", "agent.json"])
def test_a_deleted_records_file_is_named_with_its_host(copy, kind):
    (copy / "records" / f"h1-{kind}").unlink()
    _, problems = problems_of(copy)
    assert any(p.startswith(f"records/h1-{kind}: missing (worker h1:") for p in problems), problems


def test_the_ps_without_message_records_is_named(copy):
    (copy / "records" / "h4-messages.csv").unlink()  # h4: the PS of the 3-worker run
    _, problems = problems_of(copy)
    assert any(p.startswith("records/h4-messages.csv: missing (ps h4:") for p in problems), problems
    assert not any("h4-iterations.csv" in p for p in problems)  # a PS writes none


def test_a_deleted_records_file_is_named_without_topology_json(copy):
    (copy / "topology.json").unlink()
    (copy / "records" / "h2-messages.csv").unlink()
    _, problems = problems_of(copy)
    assert any(p.startswith("records/h2-messages.csv: missing (worker h2:") for p in problems), problems


def test_an_intact_run_has_no_missing_records(intact):
    assert not [p for p in intact[1]["problems"] if "missing" in p]


def test_dlcp_report_names_a_deleted_records_file(copy):
    (copy / "records" / "h1-messages.csv").unlink()
    p = subprocess.run(
        [sys.executable, "-m", "dlcp_cli", "report", str(copy), "--out", str(copy.parent / "rep")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr
    assert "records/h1-messages.csv: missing (worker h1: its messages" in p.stderr


# --- a run killed outright: its report is titled partial (item 14) ----------------------------------


def test_a_run_without_an_end_in_meta_json_is_titled_partial(copy):
    meta = json.loads((copy / "meta.json").read_text())
    del meta["status"]  # what a SIGKILLed `dlcp run` leaves: meta.json as written at the start
    (copy / "meta.json").write_text(json.dumps(meta))
    run = load_run(copy)
    s = summarise(run)
    assert s["run"]["partial"] and s["run"]["status"] == "unfinished"
    md = to_markdown(build_doc(run, s, figures=False))
    assert "PARTIAL (unfinished)" in md.splitlines()[0] and "killed before it could record its end" in md
