"""Reports: percentiles against numpy, the summary of a synthetic run checked against the raw CSV
files, the written files (PNG decodes, HTML self-contained), comparisons with known ratios, and
runs with missing or damaged records."""

import base64
import csv
import html.parser
import json
import pathlib
import shutil
import subprocess
import sys

import matplotlib.image
import numpy as np
import pytest
from synthetic_runs import BACKGROUND, CONTROL_PKTS_PER_MESSAGE, write_synthetic_run

from dlcp.reporting import compare_runs, report_run
from dlcp.reporting.bounds import FRAME_OVERHEAD_BYTES, bottleneck_mbps
from dlcp.reporting.load import NotARunDirectory, load_run
from dlcp.reporting.stats import distribution, honest_percentile, min_samples, percentile, refused_text
from dlcp.reporting.summarise import summarise

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SMALL = {"iterations": 6, "layers": 4, "workers": 3}  # 144 MCT samples: p50, p90 only; iteration p50 refused
MID = {"iterations": 45, "layers": 8, "workers": 3}  # 2,160 MCT samples (p99, not p99.9), 45 iterations (p50)


def rows(run: pathlib.Path, kind: str) -> list[dict]:
    out = []
    for p in sorted((run / "records").glob(f"*-{kind}.csv")):
        with p.open(newline="") as f:
            out += list(csv.DictReader(f))
    return out


# --- percentiles -------------------------------------------------------------------------------


def test_percentiles_on_known_data():
    d = distribution(range(1, 11), min_beyond=0)  # 1..10: rank h = 9 q / 100, linear between neighbours
    assert d["count"] == 10 and d["mean"] == 5.5 and d["max"] == 10
    assert d["p50"] == pytest.approx(5.5)
    assert d["p90"] == pytest.approx(9.1)
    assert d["p99"] == pytest.approx(9.91)
    assert d["p999"] == pytest.approx(9.991)


def test_percentiles_match_numpy_default():
    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 1000, 12345):
        x = rng.lognormal(3, 1.5, n)
        d = distribution(x, min_beyond=0)
        for key, q in (("p50", 50), ("p90", 90), ("p99", 99), ("p999", 99.9)):
            assert d[key] == np.percentile(x, q)  # numpy's default method, bit for bit
        assert percentile(x, 37.5) == np.percentile(x, 37.5)


def test_a_percentile_of_too_few_samples_is_refused():
    assert [min_samples(q) for q in (50, 90, 99, 99.9)] == [20, 100, 1000, 10000]
    d = distribution(range(999))
    assert d["count"] == 999 and d["max"] == 998 and d["mean"] == 499
    assert d["p99"] is None and d["p999"] is None and d["too_few"] == ["p99", "p999"]
    assert d["p50"] == 499 and d["p90"] == pytest.approx(898.2)
    d = distribution(range(1000))
    assert d["p99"] == pytest.approx(np.percentile(range(1000), 99)) and d["too_few"] == ["p999"]
    assert distribution(range(19))["too_few"] == ["p50", "p90", "p99", "p999"]
    assert honest_percentile(range(999), 99) is None and honest_percentile(range(1000), 99) is not None
    assert refused_text(999, "p99") == "too few (n=999 < 1,000)"


def test_the_report_refuses_a_p99_of_too_few_samples(tmp_path):
    run = write_synthetic_run(tmp_path / "run", **SMALL)  # 144 messages, 6 iterations
    s = report_run(run)
    mct = s["mct_us"]["overall"]
    assert mct["count"] == 144 and mct["p99"] is None and "p99" in mct["too_few"]
    assert s["headline"]["mct_p99_us"] is None and s["iteration"]["iteration_ms"]["p50"] is None
    md = (run / "report.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| all messages |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "144" and cells[5] == "too few (n=144 < 1,000)" and cells[6] == "too few (n=144 < 10,000)"
    assert "MCT p50 / p99 / p99.9 (n = 144 messages)" in md and "too few (n=6 < 20)" in md
    assert "at least 10 samples lie beyond it" in md  # the rule is stated


def test_percentiles_ignore_missing_values_and_empty_is_none():
    assert percentile([1.0, float("nan"), 3.0], 50) == 2.0
    assert percentile([], 99) is None
    d = distribution([float("nan")])
    assert d["count"] == 0 and d["p99"] is None and d["max"] is None


# --- summary of a synthetic run, checked against the CSV files -----------------------------------


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory) -> pathlib.Path:
    return write_synthetic_run(tmp_path_factory.mktemp("runs") / "dlcp", seed=4, forced=2, **SMALL)


def test_summary_mct_from_sender_rows(synthetic_run):
    s = summarise(load_run(synthetic_run))
    assert s["problems"] == []
    msgs = rows(synthetic_run, "messages")
    senders = [r for r in msgs if r["side"] == "sender"]
    assert 0 < len(senders) < len(msgs)
    mct = np.array([float(r["mct_us"]) for r in senders])
    assert s["mct_us"]["overall"]["count"] == len(senders) == 144
    assert s["mct_us"]["overall"]["p90"] == pytest.approx(np.percentile(mct, 90))
    assert s["mct_us"]["overall"]["p99"] is None  # 144 samples: too few for a p99
    assert s["mct_us"]["overall"]["max"] == mct.max()
    for group, col in (("by_prio", "prio"), ("by_phase", "phase"), ("by_layer", "layer_first")):
        keys = {r[col] for r in senders}
        assert set(s["mct_us"][group]) == keys
        for k in keys:
            sel = np.array([float(r["mct_us"]) for r in senders if r[col] == k])
            assert s["mct_us"][group][k]["p50"] == pytest.approx(np.percentile(sel, 50))
            assert s["mct_us"][group][k]["p999"] is None
    assert list(s["mct_us"]["by_phase"]) == ["push", "pull"]
    assert list(s["mct_us"]["by_prio"]) == sorted(s["mct_us"]["by_prio"], key=int, reverse=True)


def test_summary_iterations_loss_switch_training(synthetic_run):
    s = summarise(load_run(synthetic_run))
    its = rows(synthetic_run, "iterations")
    slowest = {}
    for r in its:
        slowest[r["iter"]] = max(slowest.get(r["iter"], 0), float(r["iteration_us"]))
    times = np.array(list(slowest.values()))
    assert s["iteration"]["count"] == SMALL["iterations"]
    assert s["iteration"]["iteration_ms"]["p50"] is None  # 6 iterations: too few even for a median
    assert s["iteration"]["iteration_ms"]["mean"] == pytest.approx(times.mean() / 1e3)
    assert s["iteration"]["iteration_ms"]["max"] == pytest.approx(times.max() / 1e3)
    slowest_comm = {}
    for r in its:
        slowest_comm[r["iter"]] = max(slowest_comm.get(r["iter"], 0), float(r["comm_us"]))
    comm = sum(slowest_comm.values()) / times.sum()
    assert s["iteration"]["comm_share"] == pytest.approx(comm)

    senders = [r for r in rows(synthetic_run, "messages") if r["side"] == "sender"]
    pkts = sum(int(r["pkts"]) for r in senders)
    lost = sum(int(r["lost_pkts"]) for r in senders)
    assert s["loss"]["pkts"] == pkts and s["loss"]["lost_pkts"] == lost > 0
    assert s["loss"]["lost_fraction"] == pytest.approx(lost / pkts)
    assert s["loss"]["retx_pkts"] == sum(int(r["retx_pkts"]) for r in senders)
    assert s["loss"]["forced"] == sum(int(r["forced"]) for r in senders) == 2
    assert s["loss"]["protected_lost"] == 0

    dump = json.loads((synthetic_run / "counters" / "s1.json").read_text())
    for kind in ("admitted_pkts", "early_drop_pkts", "tail_drop_pkts"):
        assert s["switch"]["totals"][kind] == sum(q[kind] for q in dump["queues"])
        assert sum(r[kind] for r in s["switch"]["by_port"]) == s["switch"]["totals"][kind]
        assert sum(r[kind] for r in s["switch"]["by_queue"]) == s["switch"]["totals"][kind]
        assert sum(r[kind] for r in s["switch"]["by_drop_prec"].values()) == s["switch"]["totals"][kind]
    assert s["switch"]["by_drop_prec"]["0"]["early_drop_pkts"] == 0  # protected: never dropped early
    assert len(s["switch"]["by_queue"]) == len(dump["queues"])
    q0 = dump["queues"][0]
    assert {
        "switch": "s1",
        "port": q0["port"],
        "prio": q0["qid"],
        "drop_prec": q0["color"],
        "admitted_pkts": q0["admitted_pkts"],
    }.items() <= next(
        r
        for r in s["switch"]["by_queue"]
        if (r["port"], r["prio"], r["drop_prec"]) == (q0["port"], q0["qid"], q0["color"])
    ).items()
    assert s["switch"]["telemetry"]["s1"]["max_enq_qdepth"] == 40

    assert s["training"]["final_accuracy"] == pytest.approx(0.9)
    assert s["training"]["evaluations"] == 2  # iteration 4 (eval_every 5) and the last
    assert s["headline"]["mct_p99_us"] == s["mct_us"]["overall"]["p99"]


def test_lower_bound_from_bottleneck_rate(tmp_path):
    synthetic_run = write_synthetic_run(tmp_path / "dlcp", seed=4, forced=2, **MID)
    s = summarise(load_run(synthetic_run))
    lb = s["lower_bound"]
    assert lb["bottleneck_mbps"] == 50.0 and "host_mbps" in lb["rate_source"]
    senders = [r for r in rows(synthetic_run, "messages") if r["side"] == "sender"]
    # PS incast: the PS's downlink carries every push of the iteration (and its uplink every pull)
    wire = lambda r: int(r["bytes"]) + int(r["pkts"]) * FRAME_OVERHEAD_BYTES
    push0 = sum(wire(r) for r in senders if r["iter"] == "0" and r["phase"] == "push")
    assert lb["iteration"]["ideal_comm_ms_range"][0] == pytest.approx(push0 * 8 / 50 / 1e3)
    assert lb["iteration"]["p50_multiple"] == pytest.approx(
        lb["iteration"]["comm_p50_ms"] / lb["iteration"]["ideal_comm_ms"]
    )
    assert lb["iteration"]["p50_multiple"] > 1  # nothing beats the bound
    slowdown = [float(r["mct_us"]) / (wire(r) * 8 / 50) for r in senders]
    assert lb["message"]["slowdown"]["p99"] == pytest.approx(np.percentile(slowdown, 99))


@pytest.mark.parametrize(
    "config,topology,expected",
    [
        ({"links": {"host_mbps": 50, "switch_mbps": 20, "bottleneck_mbps": 10}}, None, 10.0),
        ({"links": {"host_mbps": 50, "switch_mbps": 20, "delay_us": 5}}, None, 20.0),
        ({"links": {"host_mbps": 50, "spine": {"uplink_mbps": 30}}}, None, 30.0),
        ({"links": {}}, {"links": [{"rate_mbps": 40}, {"bw": 25}, {"rate_mbps": None}]}, 25.0),
        (None, None, None),
        ({"links": {"host_mbps": "fast"}}, {"links": "nope"}, None),
    ],
)
def test_bottleneck_rate_rule(config, topology, expected):
    rate, source = bottleneck_mbps(config, topology)
    assert rate == expected and source


# --- switch drops by traffic -----------------------------------------------------------------------


def test_switch_drops_are_split_into_gradient_control_and_background(tmp_path):
    run = write_synthetic_run(tmp_path / "run", **SMALL)
    s = summarise(load_run(run))
    tr = s["switch"]["traffic"]
    assert tr["source"] == "switch"
    messages = sum(1 for r in rows(run, "messages") if r["side"] == "sender")
    bg_admitted, bg_dropped = BACKGROUND
    assert {k: tr["by_traffic"]["background"][k] for k in ("admitted_pkts", "early_drop_pkts", "tail_drop_pkts")} == {
        "admitted_pkts": bg_admitted,
        "early_drop_pkts": 0,
        "tail_drop_pkts": bg_dropped,
    }
    assert tr["by_traffic"]["control"]["admitted_pkts"] == CONTROL_PKTS_PER_MESSAGE * messages
    for k in ("admitted_pkts", "early_drop_pkts", "tail_drop_pkts"):
        assert sum(r[k] for r in tr["by_traffic"].values()) == s["switch"]["totals"][k]
    # the protected precedence of the queue counters holds background packets; of gradients none was dropped
    assert s["switch"]["by_drop_prec"]["0"]["tail_drop_pkts"] == bg_dropped
    assert tr["by_traffic_drop_prec"]["gradient"]["0"]["tail_drop_pkts"] == 0
    assert tr["by_prio"]["0"] == {"background": tr["by_traffic"]["background"]}
    assert set(tr["by_prio"]["7"]) == {"control"}


def test_without_the_switch_split_traffic_is_not_guessed(tmp_path):
    """A dump without non_dlcp rows (bmv2's) leaves the traffic unsplit under every policy: the
    reports say "not separable" rather than infer the kind from the queue."""
    for policy in ("dlcp", "fifo"):
        run = write_synthetic_run(tmp_path / policy, policy=policy, **SMALL)
        dump_path = run / "counters" / "s1.json"
        dump = json.loads(dump_path.read_text())
        del dump["non_dlcp"]  # as bmv2 writes it
        dump_path.write_text(json.dumps(dump))
        tr = summarise(load_run(run))["switch"]["traffic"]
        assert tr["source"] == "none" and list(tr["by_traffic"]) == ["mixed"]
        totals = summarise(load_run(run))["switch"]["totals"]
        assert {k: tr["by_traffic"]["mixed"][k] for k in totals if k in tr["by_traffic"]["mixed"]} == {
            k: v for k, v in totals.items() if k in tr["by_traffic"]["mixed"]
        }


def test_queue_timeline_drops_add_up_to_the_port_counters(tmp_path):
    from dlcp.reporting.traffic import run_timeline

    run = write_synthetic_run(tmp_path / "run", **SMALL)
    loaded = load_run(run)
    tl = run_timeline(loaded)
    ps_port = SMALL["workers"] + 1
    assert (tl.switch, tl.port) == ("s1", ps_port)
    dump = json.loads((run / "counters" / "s1.json").read_text())
    port_drops = sum(q["early_drop_pkts"] + q["tail_drop_pkts"] for q in dump["queues"] if q["port"] == ps_port)
    other = sum(r["early_drop_pkts"] + r["tail_drop_pkts"] for r in dump["non_dlcp"])
    # samples grow linearly to the totals: rounding down may lose at most one packet per count
    assert port_drops - 2 <= tl.gradient_drops.sum() + tl.other_drops.sum() <= port_drops
    assert other - 2 <= tl.other_drops.sum() <= other
    assert tl.peak[:, 0].max() == 16 and tl.t[0] == pytest.approx(0.1, abs=1e-3)
    assert tl.iterations.tolist() == list(range(SMALL["iterations"]))


# --- written files ------------------------------------------------------------------------------


class _ImgCollector(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.srcs, self.external = [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.srcs.append(a.get("src", ""))
        for key in ("src", "href"):
            if key in a and not a[key].startswith(("data:", "#")):
                self.external.append(a[key])


def check_html_self_contained(path: pathlib.Path, at_least: int) -> None:
    parser = _ImgCollector()
    parser.feed(path.read_text())
    parser.close()
    assert parser.external == []  # opens alone: nothing fetched from elsewhere
    assert len(parser.srcs) >= at_least
    for src in parser.srcs:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]).startswith(PNG_SIGNATURE)


def test_report_files_exist_and_open(tmp_path):
    run = write_synthetic_run(tmp_path / "run", **MID)
    summary = report_run(run)
    data = json.loads((run / "summary.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert data["headline"] == summary["headline"]
    names = {"mct_cdf", "mct_by_layer", "iteration_time", "training", "drops_by_traffic", "queue_timeline"}
    for name in names:
        img = matplotlib.image.imread(run / "plots" / f"{name}.png")
        assert img.shape[0] > 200 and img.shape[1] > 300
    md = (run / "report.md").read_text()
    for name in names:
        assert f"](plots/{name}.png)" in md
    assert "MCT p50 / p99" in md.split("##")[0]  # the headline comes first
    assert "linear" in md and "Ideal =" in md
    check_html_self_contained(run / "report.html", at_least=len(names))


def test_a_report_without_figures_has_the_same_summary_and_tables(tmp_path):
    run = write_synthetic_run(tmp_path / "run", **MID)
    without = report_run(run, tmp_path / "text", figures=False)
    assert without == report_run(run, tmp_path / "full")
    assert not (tmp_path / "text" / "plots").exists()
    text, full = ((tmp_path / d / "report.md").read_text() for d in ("text", "full"))
    assert "Figures not drawn" in text and "](plots/" not in text
    assert [line for line in full.splitlines() if line.startswith("|")] == [
        line for line in text.splitlines() if line.startswith("|")
    ]


def test_report_on_a_copied_directory_and_elsewhere(tmp_path):
    run = write_synthetic_run(tmp_path / "a" / "run", **SMALL)
    copy = tmp_path / "b" / "copied"
    shutil.copytree(run, copy)
    original = report_run(run)
    copied = report_run(copy)
    assert copied["headline"] == original["headline"] and copied["problems"] == []
    out = tmp_path / "elsewhere"
    report_run(copy, out)
    assert (out / "report.html").exists() and (out / "plots" / "mct_cdf.png").exists()


def test_protected_loss_is_flagged(tmp_path):
    run = write_synthetic_run(tmp_path / "run", protected_lost=3, forced=1, tail=0.5, **SMALL)
    s = report_run(run)
    assert s["loss"]["protected_lost"] == 3 and s["headline"]["protected_lost"] == 3
    md = (run / "report.md").read_text()
    assert "> **WARNING:** 3 PROTECTED packet(s) lost" in md
    assert 'class="warn"' in (run / "report.html").read_text()
    p = subprocess.run([sys.executable, "-m", "dlcp_cli", "report", str(run)], capture_output=True, text=True)
    assert p.returncode == 0 and "WARNING: 3 PROTECTED" in p.stderr


# --- compare ------------------------------------------------------------------------------------


def test_compare_two_runs_with_known_ratios(tmp_path):
    base = write_synthetic_run(tmp_path / "exp" / "fifo", policy="fifo", seed=7, **MID)
    slow = write_synthetic_run(
        tmp_path / "exp" / "dlcp", policy="dlcp", seed=7, time_scale=2, final_accuracy=0.72, **MID
    )
    html_path = compare_runs([base, slow])
    out = tmp_path / "exp"  # the runs' common parent
    assert html_path == out / "compare.html"
    data = json.loads((out / "compare.json").read_text())
    assert data["baseline"] == "fifo"
    names = [r["name"] for r in data["runs"]]
    assert names == ["fifo", "dlcp"]
    required = {
        "name",
        "policy",
        "mct_p50_us",
        "mct_p99_us",
        "mct_p999_us",
        "iteration_p50_ms",
        "iteration_p99_ms",
        "final_accuracy",
        "lost_fraction",
        "forced",
    }
    fifo, dlcp = data["runs"]
    assert required <= set(fifo) and (fifo["policy"], dlcp["policy"]) == ("fifo", "dlcp")
    for key in ("mct_p50_us", "mct_p99_us", "iteration_p50_ms"):
        assert dlcp[key] == pytest.approx(2 * fifo[key])
        assert dlcp["ratios"][key] == pytest.approx(2.0)
        assert fifo["ratios"][key] == 1.0
    for key in ("mct_p999_us", "iteration_p99_ms"):  # too few samples: no number, no ratio
        assert dlcp[key] is None and dlcp["ratios"][key] is None and key in dlcp["too_few"]
    assert dlcp["ratios"]["final_accuracy"] == pytest.approx(0.8)
    assert dlcp["ratios"]["lost_fraction"] == pytest.approx(1.0)  # same packets lost, same seed
    assert dlcp["ratios"]["comm_p50_vs_ideal"] == pytest.approx(2.0)  # same bytes, twice the time
    for name in (
        "compare_mct_cdf",
        "compare_training",
        "compare_iteration_time",
        "compare_mct_percentiles",
        "compare_drops",
        "compare_iteration_cdf",
        "compare_queue_timeline",
    ):
        assert (out / "plots" / f"{name}.png").read_bytes().startswith(PNG_SIGNATURE)
    check_html_self_contained(html_path, at_least=7)
    bg_admitted, bg_dropped = BACKGROUND
    assert fifo["background_drop_pkts"] == dlcp["background_drop_pkts"] == bg_dropped
    assert fifo["control_drop_pkts"] == dlcp["control_drop_pkts"] == 0  # control packets are admitted
    md = (out / "compare.md").read_text()
    assert f"| fifo | background | {bg_admitted:,} | 0 | {bg_dropped} |" in md
    assert "| MCT p99 (us) |" in (out / "compare.md").read_text()


def test_compare_cli_prints_table_and_honours_out(tmp_path):
    a = write_synthetic_run(tmp_path / "x" / "run", seed=1, **MID)
    b = write_synthetic_run(tmp_path / "y" / "run", seed=1, time_scale=3, **MID)
    out = tmp_path / "cmp"
    p = subprocess.run(
        [sys.executable, "-m", "dlcp_cli", "compare", str(a), str(b), "--out", str(out)], capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr
    assert "MCT p99 (us)" in p.stdout and "3×" in p.stdout and "y/run ÷ x/run" in p.stdout
    # drops side by side: per queue and run, gradient / other packets (background sits in queue 0)
    assert "switch drops of background packets" in p.stdout and "switch drops of transport control packets" in p.stdout
    queue0 = next(line for line in p.stdout.splitlines() if line.startswith("0 "))
    assert queue0.split()[-1] == f"{BACKGROUND[1]:,}" and "7 (served first)" in p.stdout
    assert json.loads((out / "compare.json").read_text())["baseline"] == "x/run"
    one = subprocess.run([sys.executable, "-m", "dlcp_cli", "compare", str(a)], capture_output=True, text=True)
    assert one.returncode == 2 and "at least two" in one.stderr and "Traceback" not in one.stderr


def test_compare_defaults_to_cwd_without_a_common_parent(tmp_path, monkeypatch):
    a = write_synthetic_run(tmp_path / "x" / "a", **SMALL)
    b = write_synthetic_run(tmp_path / "y" / "b", **SMALL)
    monkeypatch.chdir(tmp_path)
    assert compare_runs([a, b]) == tmp_path / "compare.html"


# --- missing and damaged records ----------------------------------------------------------------


@pytest.fixture
def damaged(tmp_path) -> pathlib.Path:
    return write_synthetic_run(tmp_path / "run", **SMALL)


def test_truncated_last_line_is_dropped_and_reported(damaged):
    f = damaged / "records" / "h1-messages.csv"
    n_before = len(rows(damaged, "messages"))
    with f.open("a") as fh:
        fh.write("h1,0,sender,-1,5,3,push,0,3,3,1,1600")  # the agent died mid-row
    s = report_run(damaged)
    assert any("h1-messages.csv: last line truncated" in p for p in s["problems"])
    assert len(load_run(damaged).messages) == n_before
    assert "last line truncated" in (damaged / "report.md").read_text()


def test_malformed_rows_and_missing_columns(damaged):
    f = damaged / "records" / "h2-messages.csv"
    lines = f.read_text().splitlines(keepends=True)
    lines[2] = lines[2].replace(",sender,", ",sender,extra,")  # wrong field count
    head = lines[0].rstrip("\r\n").split(",")
    cells = lines[3].rstrip("\r\n").split(",")
    cells[head.index("mct_us")] = "12x4"
    lines[3] = ",".join(cells) + "\r\n"
    f.write_text("".join(lines))
    it = damaged / "records" / "h3-iterations.csv"
    with it.open(newline="") as fh:
        old = list(csv.DictReader(fh))
    with it.open("w", newline="") as fh:  # an agent version without test metrics
        w = csv.DictWriter(fh, fieldnames=[k for k in old[0] if not k.startswith("test_")])
        w.writeheader()
        w.writerows({k: v for k, v in r.items() if not k.startswith("test_")} for r in old)
    s = report_run(damaged)
    assert any("h2-messages.csv: 2 malformed row(s) skipped (line 3, 4)" in p for p in s["problems"])
    assert any("h3-iterations.csv: no column test_loss, test_accuracy" in p for p in s["problems"])
    assert s["training"]["final_accuracy"] is not None  # the other workers still evaluated


DAMAGES = [
    (lambda d: (d / "records" / "h2-iterations.csv").write_text(""), "h2-iterations.csv: empty file"),
    (lambda d: (d / "records" / "h3-messages.csv").write_text("host,rank,side"), "h3-messages.csv: truncated header"),
    (lambda d: shutil.rmtree(d / "counters"), "counters/: no switch counter dumps"),
    (lambda d: (d / "meta.json").unlink(), "meta.json: missing"),
    (lambda d: (d / "meta.json").write_text("{not json"), "meta.json: unreadable"),
    (lambda d: (d / "counters" / "s1.json").write_text('{"switch": "s1", "queu'), "s1.json: unreadable"),
    (lambda d: (d / "config.toml").unlink(), "config.toml: missing"),
    (lambda d: (d / "config.toml").write_text("[links\nhost_mbps = 5"), "config.toml: unreadable"),
    (lambda d: [p.write_text("host,rank\n") for p in (d / "records").glob("*-messages.csv")], "no column side, mct_us"),
    (
        lambda d: (d / "progress" / "h1").write_text('{"iter": 2, "iters": 6, "state": "error", "error": "boom"}\n'),
        "progress/h1: agent ended in state 'error' at iteration 2/6: boom",
    ),
]


@pytest.mark.parametrize("damage,expect", DAMAGES)
def test_missing_pieces_are_reported_not_fatal(damaged, damage, expect):
    damage(damaged)
    s = summarise(load_run(damaged))
    assert any(expect in p for p in s["problems"]), s["problems"]


def test_report_of_a_badly_damaged_run_lists_every_problem(damaged):
    for i in (0, 1, 3, 5, 6, 9):
        DAMAGES[i][0](damaged)
    (damaged / "topology.json").unlink()
    s = report_run(damaged)
    md = (damaged / "report.md").read_text()
    assert "Missing or damaged data" in md
    for problem in s["problems"]:
        assert problem in md
    assert len(s["problems"]) >= 6
    assert s["run"]["policy"] is None and s["lower_bound"]["bottleneck_mbps"] is None
    assert "Unavailable: no link rate" in md
    check_html_self_contained(damaged / "report.html", at_least=1)


def test_policy_falls_back_to_config_when_meta_is_missing(damaged):
    (damaged / "meta.json").unlink()
    assert report_run(damaged)["run"]["policy"] == "dlcp"


def test_run_with_no_records_at_all(damaged):
    shutil.rmtree(damaged / "records")
    s = report_run(damaged)
    assert s["headline"]["mct_p50_us"] is None and s["headline"]["iteration_p50_ms"] is None
    assert any("records/: missing" in p for p in s["problems"])
    assert "No sender-side message records" in (damaged / "report.md").read_text()
    assert json.loads((damaged / "summary.json").read_text())["loss"]["messages"] == 0


def test_not_a_run_directory_is_a_one_line_error(tmp_path):
    write_synthetic_run(tmp_path / "exp" / "fifo", **SMALL)
    with pytest.raises(NotARunDirectory, match="holds the runs fifo"):
        load_run(tmp_path / "exp")
    p = subprocess.run(
        [sys.executable, "-m", "dlcp_cli", "report", str(tmp_path / "nope")], capture_output=True, text=True
    )
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and "no such directory" in p.stderr


def test_records_without_sizes_or_iterations_still_report(damaged):
    """Older or partial agents: message records without bytes/pkts, no iteration records at all."""
    for f in (damaged / "records").glob("*-messages.csv"):
        with f.open(newline="") as fh:
            old = list(csv.DictReader(fh))
        keep = [k for k in old[0] if k not in ("bytes", "pkts")]
        with f.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=keep, extrasaction="ignore")
            w.writeheader()
            w.writerows(old)
    for f in (damaged / "records").glob("*-iterations.csv"):
        f.unlink()
    s = report_run(damaged)
    assert s["mct_us"]["overall"]["count"] > 0
    assert "message" not in s["lower_bound"] and "iteration" not in s["lower_bound"]
    assert s["training"]["final_accuracy"] is None and s["iteration"]["count"] == 0
    assert any("iterations.csv: no files" in p for p in s["problems"])
    assert "No iteration records" in (damaged / "report.md").read_text()


def test_without_iteration_records_the_bound_uses_message_spans(tmp_path):
    damaged = write_synthetic_run(tmp_path / "run", **MID)
    for f in (damaged / "records").glob("*-iterations.csv"):
        f.unlink()
    s = summarise(load_run(damaged))
    lb = s["lower_bound"]
    assert lb["comm_source"].startswith("message records")
    senders = [r for r in rows(damaged, "messages") if r["side"] == "sender"]
    spans = [
        max(int(r["complete_us"]) for r in senders if r["iter"] == str(i))
        - min(int(r["start_us"]) for r in senders if r["iter"] == str(i))
        for i in range(MID["iterations"])
    ]
    assert lb["iteration"]["iterations"] == MID["iterations"]
    assert lb["iteration"]["comm_p50_ms"] == pytest.approx(np.percentile(spans, 50) / 1e3)
    assert lb["iteration"]["comm_p50_ms"] >= lb["iteration"]["ideal_comm_ms"] > 0


def test_time_to_accuracy_and_a_budget_schedule_in_the_report(tmp_path):
    from synthetic_runs import write_synthetic_run

    from dlcp.reporting import report_run

    budget = [
        {"host": "h1", "rank": 0, "iter": -1, "grad_norm": "", "change": "", "critical": 1, "budget": 0.008},
        {"host": "h1", "rank": 0, "iter": 9, "grad_norm": 2.0, "change": "", "critical": 1, "budget": 0.008},
        {"host": "h1", "rank": 0, "iter": 19, "grad_norm": 1.8, "change": 0.1, "critical": 0, "budget": 0.408},
    ]
    run = write_synthetic_run(tmp_path / "r", target_accuracy=0.5, budget_rows=budget, iterations=20)
    s = report_run(run, figures=False)
    tr = s["training"]
    assert tr["target_accuracy"] == 0.5 and tr["clock"] == "wall"
    first = next(i for i, a in zip(tr["curve"]["iter"], tr["curve"]["test_accuracy"]) if a >= 0.5)
    assert tr["iterations_to_accuracy"] == first + 1
    assert tr["time_to_accuracy_s"] == pytest.approx(tr["curve"]["wall_s"][tr["curve"]["iter"].index(first)])
    assert s["headline"]["time_to_accuracy_s"] == tr["time_to_accuracy_s"]
    hosts = s["budget_schedule"]["hosts"]
    assert [r["budget"] for r in hosts["h1"]] == [0.008, 0.008, 0.408]
    md = (run / "report.md").read_text()
    assert "time to 0.5 test accuracy" in md and "Budget schedule" in md
