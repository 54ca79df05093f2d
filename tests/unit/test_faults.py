"""Fault injection without root: damaged and deleted files of a run directory, bad inputs to
`dlcp run` and the benchmarks, and how a process's end is reported. Each case is one a user hit
(issue 30); the cases that need root (Mininet, a read-only mount, killing a real run) are in
tests/root/test_faults_emulated.py, ns-3's in tests/ns3/test_faults_ns3.py. Run directories are
never reused, and one series at a time claims a machine whose runs collide (real processes, real
locks).

Every bad input must give one line naming the problem and exit 2 before anything starts; every
damaged or missing file of a run must be named in its report with what it leaves unknown, and
what another file records must still be used."""

from __future__ import annotations

import json
import pathlib
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from synthetic_runs import write_synthetic_run

from dlcp.exit_status import exit_text
from dlcp.experiment import config as configmod
from dlcp.experiment.run_inputs import check_layer_budgets, check_new_run_dir, check_results_root
from dlcp.network import topology as topospec
from dlcp.reporting.load import load_run
from dlcp.reporting.render import to_markdown
from dlcp.reporting.runreport import build_doc
from dlcp.reporting.summarise import summarise
from dlcp.runs import machine_lock, naming, run_dir
from dlcp_cli.main import main as dlcp_main

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


def test_a_simulated_run_of_a_dilated_experiment_file_is_not_flagged(copy):
    # ns-3 runs in simulated time and records dilation 1; the file's [scale] is the emulation's
    meta = json.loads((copy / "meta.json").read_text())
    (copy / "meta.json").write_text(json.dumps({**meta, "dilation": 1, "clock": "simulated"}))
    s, problems = problems_of(copy)
    assert not any("records time dilation" in p for p in problems), problems
    assert s["scale"]["dilation"] == 1


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


# --- bad inputs to `dlcp run`: one line, exit 2, nothing started (items 5, 6, 10) --------------------


SHORT = """
name = "short"
backend = "{backend}"
[topology]
kind = "star"
hosts = 4
[workload]
mode = "ps"
workers = 2
model = "synthetic"
iterations = 4
"""


def dlcp_run(argv: list[str], capsys, monkeypatch) -> tuple[int, str]:
    """`dlcp run ARGV` in this process, as a user who is not root: a check that should have
    refused the input but did not stops at "needs root", never at a network."""
    from dlcp.runs import privilege

    monkeypatch.setattr(privilege, "privileged", lambda: False)
    try:
        rc = dlcp_main(["run", *argv])
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
        print(e.code, file=sys.stderr)
    err = capsys.readouterr().err
    return rc, err


@pytest.fixture
def short(tmp_path) -> pathlib.Path:
    p = tmp_path / "short.toml"
    p.write_text(SHORT.format(backend="builtin"))
    return p


def assert_one_line(rc: int, err: str, *parts: str) -> None:
    assert rc == 2, err
    assert err.strip().count("\n") == 0 and "Traceback" not in err, err
    for part in parts:
        assert part in err, err


def test_out_naming_a_regular_file(short, tmp_path, capsys, monkeypatch):
    f = tmp_path / "afile"
    f.write_text("x")
    rc, err = dlcp_run([str(short), "--out", str(f)], capsys, monkeypatch)
    assert_one_line(rc, err, f"--out '{f}'", "is a file, not a directory")
    assert f.read_text() == "x"


def test_out_below_a_regular_file(short, tmp_path, capsys, monkeypatch):
    f = tmp_path / "afile"
    f.write_text("x")
    rc, err = dlcp_run([str(short), "--out", str(f / "results")], capsys, monkeypatch)
    assert_one_line(rc, err, "--out", f"{f} is a file")


def test_out_in_proc(tmp_path, capsys, monkeypatch):
    """Whether a directory can be created is asked of the user who will write it: on ns-3 (no
    root needed) this one; on Mininet, only once the run is privileged."""
    cfg = tmp_path / "short.toml"
    cfg.write_text(SHORT.format(backend="ns3"))
    rc, err = dlcp_run([str(cfg), "--out", "/proc/dlcp-x"], capsys, monkeypatch)
    assert_one_line(rc, err, "--out '/proc/dlcp-x'", "cannot create a directory in /proc")


def test_output_dir_naming_a_file(short, capsys, monkeypatch):
    rc, err = dlcp_run([str(short), "--set", 'output.dir="/etc/passwd"'], capsys, monkeypatch)
    assert_one_line(rc, err, "output.dir '/etc/passwd'", "is a file")


def test_run_dir_below_a_file(short, tmp_path, capsys, monkeypatch):
    f = tmp_path / "afile"
    f.write_text("x")
    rc, err = dlcp_run([str(short), "--run-dir", str(f / "run")], capsys, monkeypatch)
    assert_one_line(rc, err, "--run-dir", "is a file")


def test_out_naming_a_file_on_ns3(tmp_path, capsys, monkeypatch):
    cfg = tmp_path / "short.toml"
    cfg.write_text(SHORT.format(backend="ns3"))
    f = tmp_path / "afile"
    f.write_text("x")
    rc, err = dlcp_run([str(cfg), "--out", str(f)], capsys, monkeypatch)
    assert_one_line(rc, err, "--out", "is a file")


def test_a_config_path_that_is_a_directory(tmp_path, capsys, monkeypatch):
    rc, err = dlcp_run([str(tmp_path)], capsys, monkeypatch)
    assert_one_line(rc, err, f"{tmp_path}: a directory, not a config file")


def test_a_config_file_that_is_not_utf8(tmp_path, capsys, monkeypatch):
    cfg = tmp_path / "latin1.toml"
    cfg.write_bytes(SHORT.format(backend="builtin").replace("short", "sh\xf6rt").encode("latin-1"))
    rc, err = dlcp_run([str(cfg)], capsys, monkeypatch)
    assert_one_line(rc, err, str(cfg), "not UTF-8 text (byte 0xf6")


def test_results_root_checks_leave_nothing_behind(tmp_path):
    root = tmp_path / "new" / "results"
    check_results_root(root, "--out")
    assert not (tmp_path / "new").exists() or not any((tmp_path / "new").iterdir())
    assert list(tmp_path.iterdir()) == []  # the probe directory is gone, nothing was created


PCAP_CASES = [
    ("s1-ethX", "output.pcap_ports: 's1-ethX': s1 has ports s1-eth1..s1-eth4"),
    ("s1-eth99", "output.pcap_ports: 's1-eth99': s1 has ports s1-eth1..s1-eth4"),
    ("s9-eth1", "output.pcap_ports: 's9-eth1': no switch s9 (the topology has s1)"),
    ("s1eth5", "output.pcap_ports: 's1eth5': not a switch port (sN-ethK, e.g. 's1-eth1')"),
]


@pytest.mark.parametrize("port,msg", PCAP_CASES)
def test_pcap_ports_are_checked_against_the_topology(port, msg):
    raw = configmod.tomllib.loads(SHORT.format(backend="builtin"))
    cfg = configmod.validate({**raw, "output": {"pcap_ports": ["s1-eth2", port]}})
    with pytest.raises(configmod.ConfigError) as e:
        topospec.from_config(cfg)
    assert str(e.value) == msg


@pytest.mark.parametrize("port,msg", PCAP_CASES[:1] + PCAP_CASES[2:])
def test_dlcp_run_refuses_a_bad_pcap_port_in_one_line(short, port, msg, capsys, monkeypatch):
    rc, err = dlcp_run([str(short), "--set", f'output.pcap_ports=["{port}"]'], capsys, monkeypatch)
    assert_one_line(rc, err, msg)


def test_a_good_pcap_port_and_ns3_captures():
    raw = configmod.tomllib.loads(SHORT.format(backend="builtin"))
    topospec.from_config(configmod.validate({**raw, "output": {"pcap_ports": ["s1-eth4"]}}))
    with pytest.raises(configmod.ConfigError, match="output.pcap_ports: captures exist only on the emulated"):
        configmod.validate({**raw, "backend": "ns3", "output": {"pcap_ports": ["s1-eth4"]}})


@pytest.mark.parametrize("warmup", [4, 9])
def test_a_warmup_that_leaves_no_iterations_is_refused(short, warmup, capsys, monkeypatch):
    rc, err = dlcp_run([str(short), "--set", f"workload.warmup_iterations={warmup}"], capsys, monkeypatch)
    assert_one_line(rc, err, f"dlcp run: workload.warmup_iterations: {warmup} leaves none of the 4 iterations")


def test_a_warmup_below_the_iterations_passes_and_the_default_is_not_held_to_it():
    raw = configmod.tomllib.loads(SHORT.format(backend="builtin"))  # 4 iterations, default warm-up 5
    assert configmod.variants(raw, [])[0][1]["workload"]["warmup_iterations"] == 5
    raw["workload"]["warmup_iterations"] = 3
    assert configmod.variants(raw, [])[0][1]["workload"]["warmup_iterations"] == 3


def test_the_report_says_when_every_record_is_warm_up(tmp_path):
    run = write_synthetic_run(tmp_path / "r", **SMALL)
    cfg = (run / "config.toml").read_text().replace("iterations = 6\n", "iterations = 6\nwarmup_iterations = 6\n")
    (run / "config.toml").write_text(cfg)
    loaded = load_run(run)
    md = to_markdown(build_doc(loaded, summarise(loaded), figures=False))
    assert "No sender-side message records" not in md
    assert "sender-side message records are from the warm-up (workload.warmup_iterations = 6" in md


@pytest.mark.parametrize(
    "workload,budgets,msg",
    [
        ({"model": "synthetic"}, {"5": 0.0}, "layer 5 not in model synthetic, whose layers are 0..4"),
        ({"model": "synthetic", "layers": [10, 20]}, {"0": 0.0, "2": 0.0, "7": 0.1}, "layer 2, 7 not in"),
        ({"model": "cnn"}, {"5": 0.0}, "layer 5 not in model cnn, whose layers are 0..4"),
    ],
)
def test_layer_budgets_for_layers_the_model_lacks(workload, budgets, msg):
    cfg = configmod.validate({"name": "t", "workload": workload, "dlcp": {"layer_budgets": budgets}})
    with pytest.raises(configmod.ConfigError, match=f"^dlcp.layer_budgets: {msg}"):
        check_layer_budgets(cfg)


def test_layer_budgets_within_the_model_pass():
    check_layer_budgets(
        configmod.validate({"name": "t", "workload": {"model": "cnn"}, "dlcp": {"layer_budgets": {"4": 0.0}}})
    )
    check_layer_budgets(configmod.validate({"name": "t"}))


def test_dlcp_run_refuses_layer_budgets_the_model_lacks(short, capsys, monkeypatch):
    rc, err = dlcp_run([str(short), "--set", "dlcp.layer_budgets={9 = 0.0}"], capsys, monkeypatch)
    assert_one_line(rc, err, "dlcp.layer_budgets: layer 9 not in model synthetic")


@pytest.mark.parametrize(
    "args,msg",
    [
        (["--vary", "comm.scheduler=wfbp"], "--vary comm.scheduler=wfbp: one value compares nothing"),
        (["--policies", "fifo"], "(--policies fifo is --vary dlcp.policy=fifo)"),
    ],
)
def test_vary_with_one_value_is_refused(short, args, msg, capsys, monkeypatch):
    rc, err = dlcp_run([str(short), *args], capsys, monkeypatch)
    assert_one_line(rc, err, msg, "--set")


# --- exit statuses in words, in messages and in the docs (items 13, 14) ---------------------------


@pytest.mark.parametrize(
    "rc,text",
    [
        (-9, "was killed by SIGKILL"),
        (-15, "was killed by SIGTERM"),
        (3, "exited with status 3"),
        (143, "exited with status 143 (128 + SIGTERM: stopped by that signal)"),
        (None, "is still running"),
    ],
)
def test_exit_statuses_in_words(rc, text):
    assert exit_text(rc) == text


def test_the_docs_give_the_exit_statuses_dlcp_run_returns():
    """docs/runs.md: Ctrl-C / SIGINT exits 130 and SIGTERM 143 (dlcp_cli/run_cmd.py); the 143 for
    both belongs to the agents (agents/common.py)."""
    text = " ".join((ROOT / "docs" / "runs.md").read_text().split())
    assert "143 when stopped by SIGTERM / SIGINT" not in text
    assert (
        f"2 on a config error, {128 + signal.SIGINT} on Ctrl-C (SIGINT) and {128 + signal.SIGTERM} on SIGTERM, on every backend"
        in text
    )


# --- the benchmarks: bad options before anything starts, a failed run is not fatal (items 11, 12) ----


def incast_main(argv: list[str], monkeypatch) -> str:
    """`dlcp bench incast ARGV` in this process as a user who is not root: an option that should
    have been refused but was not stops at "needs root", never at a network."""
    from dlcp.runs import privilege
    from emulation.benches.incast import main

    monkeypatch.setattr(privilege, "privileged", lambda: False)
    with pytest.raises(SystemExit) as e:
        main(argv)
    return str(e.value.code)


@pytest.mark.parametrize(
    "argv,msg",
    [
        (["--host-mark-ms", "-1"], "--host-mark-ms -1: must be >= 0"),
        (["--timeout", "0"], "--timeout 0: must be > 0"),
        (["--senders", "4,x"], "--senders '4,x' is not a comma-separated list"),
    ],
)
def test_incast_options_are_checked_before_anything_starts(argv, msg, monkeypatch):
    out = incast_main(argv, monkeypatch)
    assert msg in out and "\n" not in out


def incast_figures(goodput: float, **counts) -> dict:
    """One run's figures as emulation.benches.incast.run_once returns them."""
    keys = ("forced", "protected_lost", "lost", "retx", "tail_drops", "early_drops", "ce_marked", "host_marked")
    return {
        "goodput_fraction": goodput,
        "mct_p99_over_ideal": 1.2,
        "link_busy": 0.9,
        "window": {},
        **{k: counts.get(k, 0) for k in keys},
    }


def test_a_failed_incast_run_keeps_the_rows_already_measured(capsys):
    from emulation.benches.incast import measure, table_rows

    calls = []

    def run(senders, cc):  # the second configuration's second run loses a host; the third loses all
        calls.append((senders, cc))
        if (senders == 8 and len([c for c in calls if c[0] == 8]) == 2) or senders == 16:
            raise RuntimeError(f"host 3 was killed by SIGKILL: {senders} senders\nmore lines")
        return incast_figures(0.9 if senders == 4 else 0.8, early_drops=senders, lost=2)

    rows = measure([4, 8, 16], ["dctcp"], 2, run)
    assert len(calls) == 6  # every run was tried
    assert [(r["senders"], r["runs"], r["failed"]) for r in rows] == [(4, 2, 0), (8, 1, 1), (16, 0, 2)]
    assert rows[0]["goodput_fraction"] == 0.9 and rows[1]["early_drops"] == 8
    assert rows[2]["errors"] == ["host 3 was killed by SIGKILL: 16 senders"] * 2 and "goodput_fraction" not in rows[2]
    table = table_rows(rows)
    assert [t["early_drops"] for t in table] == [4, 8, None] and [t["failed"] for t in table] == [0, 1, 2]
    assert table[2]["goodput_fraction"] is None
    err = capsys.readouterr().err
    assert err.count("FAILED: host 3 was killed by SIGKILL") == 3 and "more lines" not in err


def transfer_figures(**kw) -> dict:
    """One transfer's figures as emulation.benches.transport.transfer returns them."""
    base = {"goodput_mbps": 150.0, "mct_us": 1e6, "forced": False, "lost_pkts": 0, "protected_lost": 0}
    return {**base, "retx_pkts": 0, "rounds": 1, "cpu_s": 1.0, "recv_cpu_s": 1.0, **kw}


def test_transport_rows_report_each_run_whole_and_protected_losses():
    from emulation.benches.transport import _row, table_rows

    runs = [
        transfer_figures(lost_pkts=10, retx_pkts=5, rounds=2),
        transfer_figures(lost_pkts=0, retx_pkts=20, rounds=3),
        transfer_figures(lost_pkts=4, retx_pkts=8, rounds=2, forced=True, protected_lost=3, goodput_mbps=0.0),
    ]
    row = _row("link dlcp", runs, 200.0)
    assert (row["lost_pkts"], row["lost_pkts_min"], row["lost_pkts_max"]) == (4, 0, 10)
    assert (row["retx_pkts"], row["retx_pkts_min"], row["retx_pkts_max"]) == (8, 5, 20)
    assert row["protected_lost"] == 3 and row["forced"] == 1
    assert [r["lost_pkts"] for r in row["per_run"]] == [10, 0, 4]  # each run's own, in order
    assert [r["retx_pkts"] for r in row["per_run"]] == [5, 20, 8]
    (cells,) = table_rows([row])
    assert cells["lost_pkts"] == "4 (0-10)" and cells["retx_pkts"] == "8 (5-20)" and cells["protected_lost"] == 3
    assert "per_run" not in cells


def test_a_bench_host_killed_by_a_signal_is_named_by_it(tmp_path):
    from emulation.benches.incast import _wait_hosts

    procs = []
    for k in range(2):
        out, err = open(tmp_path / f"{k}.out", "w+"), open(tmp_path / f"{k}.err", "w+")  # noqa: SIM115
        procs.append((subprocess.Popen(["sleep", "30"], stdout=out, stderr=err), out, err))
    procs[1][0].send_signal(signal.SIGKILL)
    procs[1][2].write("Traceback (most recent call last):\n  ...\nValueError: the host's own error\n")
    procs[1][2].flush()
    t0 = time.monotonic()
    try:
        with pytest.raises(RuntimeError) as e:
            _wait_hosts(procs, timeout=20)
        # the first line is what the bench's table and progress keep: the host's own last line
        assert str(e.value).splitlines()[0] == "host 1 was killed by SIGKILL: ValueError: the host's own error"
    finally:
        for pr, out, err in procs:
            pr.kill()
            pr.wait()
            out.close()
            err.close()
    assert time.monotonic() - t0 < 5


# --- run directories are never reused; one run at a time where runs collide (items 2, 7, 9) -------


def test_a_run_dir_that_holds_a_run_is_refused_and_left_alone(short, tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    (run / "records").mkdir(parents=True)
    (run / "meta.json").write_text("{}")
    rc, err = dlcp_run([str(short), "--run-dir", str(run)], capsys, monkeypatch)
    assert_one_line(rc, err, f"dlcp run: --run-dir '{run}': holds a run already; run directories are never reused")
    assert sorted(p.name for p in run.iterdir()) == ["meta.json", "records"] and not any((run / "records").iterdir())


def test_a_run_dir_that_is_not_empty_is_refused_an_empty_one_taken(short, tmp_path, capsys, monkeypatch):
    used = tmp_path / "used"
    used.mkdir()
    (used / "notes.txt").write_text("mine")
    rc, err = dlcp_run([str(short), "--run-dir", str(used)], capsys, monkeypatch)
    assert_one_line(rc, err, f"--run-dir '{used}': is not empty; run directories are never reused")
    (tmp_path / "empty").mkdir()
    check_new_run_dir(tmp_path / "empty")
    check_new_run_dir(tmp_path / "new")


def test_series_started_in_the_same_second_get_directories_of_their_own(tmp_path):
    """The results directory's time has one-second resolution: series started in the same second
    (here: eight at once, from threads) each get a directory of their own, created exclusively, in
    the order they took them."""
    stamp = "20260101T000000Z"
    with ThreadPoolExecutor(8) as pool:
        made = list(pool.map(lambda _: naming.results_dir(tmp_path / "out", "x", stamp), range(8)))
    names = sorted(p.name for p in made)
    assert len(set(names)) == 8 and all(p.is_dir() for p in made)
    assert names == [f"{stamp}-x"] + [f"{stamp}.{n}-x" for n in range(2, 9)]
    assert naming.results_dir(tmp_path / "out", "x", "20260101T000001Z").name > names[-1]  # still in time order


def test_a_series_that_started_no_run_leaves_nothing(tmp_path):
    """What a series stopped (or failed) before its first run created is removed, the directories
    above it included; a series with a run in it, or a --run-dir the user made, stays."""
    results, created = run_dir.new_results(None, str(tmp_path / "a" / "results"), "x")
    (results / "logs").mkdir()
    (results / "logs" / "forkserver.log").write_text("loading")
    assert run_dir.remove_unused(results, created) and not (tmp_path / "a").exists()
    results, created = run_dir.new_results(None, str(tmp_path / "b"), "x")
    (results / "dlcp").mkdir()
    (results / "dlcp" / "meta.json").write_text("{}")
    assert not run_dir.remove_unused(results, created) and (results / "dlcp" / "meta.json").exists()
    (tmp_path / "mine").mkdir()
    results, created = run_dir.new_results(str(tmp_path / "mine"), "unused", "x")
    assert not run_dir.remove_unused(results, created) and (tmp_path / "mine").is_dir()


HOLD_LOCK = """
import sys, time
from pathlib import Path
from dlcp.runs import machine_lock
lock = machine_lock.acquire("builtin", Path(sys.argv[1]))
lock.note_results(Path("/r/20260101T000000Z-x"))
print("held", flush=True)
time.sleep(120)
"""


def test_a_second_series_is_refused_naming_the_live_one_and_a_dead_ones_lock_is_taken_over(tmp_path, capsys):
    """Real processes, real flock(2): a live holder is named in the refusal; once it is SIGKILLed
    (it could not release) the next series takes the machine over, with a note naming it."""
    path = tmp_path / "run.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(path)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(machine_lock.MachineBusy) as e:
            machine_lock.acquire("builtin", path)
        assert str(e.value).startswith(
            f"another run has this machine (pid {holder.pid}, builtin, /r/20260101T000000Z-x, running for "
        ), str(e.value)
        assert str(e.value).endswith(
            "builtin runs cannot share one (dlcp/backends.py, parallel_runs); wait for it to end or stop it"
        )
    finally:
        holder.kill()
        holder.wait()
    lock = machine_lock.acquire("builtin", path)
    err = capsys.readouterr().err
    assert (
        err.startswith(
            f"dlcp run: note: the run before (pid {holder.pid}, builtin, /r/20260101T000000Z-x, running for "
        )
        and "ended without releasing the machine (killed?); taking it over" in err
    ), err
    lock.release()
    machine_lock.acquire("builtin", path).release()  # released cleanly: nothing to say
    assert capsys.readouterr().err == ""


def test_backends_whose_runs_share_nothing_claim_nothing(tmp_path):
    from dlcp import backends

    for name in backends.names():
        caps = backends.capabilities(name)
        with machine_lock.claim(backends.get(name), tmp_path / "run.lock") as lock:
            assert (lock is None) == caps.parallel_runs
