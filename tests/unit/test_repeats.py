"""Comparisons over repeated, paired runs: the paired bootstrap recovers a known ratio and gives
identical inputs an interval containing 1; verdicts; compare.json of repeat groups; and the
rest of what makes a comparison trustworthy without a network: time dilation undone in reports,
warm-up left out, keep-up flags, the run plan of --repeat."""

import json
import pathlib
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from scipy.stats import t as student_t
from synthetic_runs import write_synthetic_run

from dlcp.experiment import config as configmod
from dlcp.experiment.dilation import emulated
from dlcp.reporting import compare_runs, repeats
from dlcp.reporting.bootstrap import MIN_PAIRS, geometric_mean_ratio, paired_ratio, verdict
from dlcp.reporting.load import ReportInputError, load_run
from dlcp.reporting.summarise import summarise

MID = {"iterations": 45, "layers": 8, "workers": 3}


def pooled_p99(runs):
    return float(np.percentile(np.concatenate([r.x for r in runs]), 99))


def make_pairs(n, ratio, rng, per_run=3000, same_draws=False):
    """n pairs of runs; run scale varies between pairs (machine state), B = ratio x A in distribution."""
    a, b = [], []
    for _ in range(n):
        scale = rng.uniform(0.7, 1.3)
        xa = scale * rng.lognormal(0, 0.6, per_run)
        xb = ratio * (xa if same_draws else scale * rng.lognormal(0, 0.6, per_run))
        a.append(SimpleNamespace(x=xa))
        b.append(SimpleNamespace(x=xb))
    return a, b


# --- the bootstrap ---------------------------------------------------------------------------------


def test_bootstrap_recovers_a_known_ratio():
    rng = np.random.default_rng(1)
    a, b = make_pairs(10, 0.8, rng)
    ci = paired_ratio(a, b, pooled_p99)
    assert ci.n_pairs == 10 and ci.resamples > 1900
    lo, hi = ci.ci95
    assert lo < 0.8 < hi and hi - lo < 0.15
    assert ci.point == pytest.approx(0.8, abs=0.05)
    assert verdict(ci, "time") == "faster"
    # exactly proportional runs: the ratio is exact and so is every resample
    a, b = make_pairs(6, 1.25, rng, same_draws=True)
    ci = paired_ratio(a, b, pooled_p99)
    assert ci.point == pytest.approx(1.25) and ci.ci95 == pytest.approx((1.25, 1.25))
    assert verdict(ci, "time") == "slower" and verdict(ci, "count") == "higher"


def test_identical_inputs_give_an_interval_containing_one():
    rng = np.random.default_rng(2)
    a, _ = make_pairs(8, 1.0, rng)
    ci = paired_ratio(a, a, pooled_p99)
    assert ci.point == 1.0 and ci.ci95[0] <= 1.0 <= ci.ci95[1]
    assert verdict(ci, "time") == "no significant difference"
    # two variants with the same distribution, independent draws: no difference found (in 95 % of
    # such draws; the next test counts how often)
    a, b = make_pairs(8, 1.0, np.random.default_rng(20))
    ci = paired_ratio(a, b, pooled_p99)
    assert ci.ci95[0] < 1.0 < ci.ci95[1] and verdict(ci, "time") == "no significant difference"


def test_the_interval_misses_a_true_ratio_of_one_about_as_often_as_it_should():
    """No effect, 5 pairs, 60 simulated comparisons: a 95 % interval should exclude 1 about 3 times;
    more than 6 would mean it is too narrow (as plain percentile intervals over 5 pairs are)."""
    rng = np.random.default_rng(5)
    misses = 0
    for _ in range(60):
        a, b = make_pairs(5, 1.0, rng, per_run=1000)
        lo, hi = paired_ratio(a, b, pooled_p99, resamples=400).ci95
        misses += not lo <= 1.0 <= hi
    assert misses <= 6


def test_the_pairing_is_what_is_resampled():
    """Between-pair variation shared by both runs of a pair cancels: a 10 % effect is found
    although the runs' scales vary by +-30 %."""
    rng = np.random.default_rng(3)
    a, b = make_pairs(8, 0.9, rng)
    ci = paired_ratio(a, b, pooled_p99)
    assert ci.ci95[1] < 1.0
    ci_again = paired_ratio(a, b, pooled_p99)
    assert ci_again == ci  # seeded: the same runs give the same interval


def test_per_pair_geometric_mean_weighs_every_pair_the_same():
    ratios = [0.5, 0.5, 0.5, 0.5, 2.0, None, 0.0]  # the None and the zero are no ratio: left out
    g = geometric_mean_ratio(ratios)
    assert g.n_pairs == 5 and g.point == pytest.approx(2 ** (-3 / 5))
    lo, hi = g.ci95
    logs = np.log([0.5] * 4 + [2.0])
    half = student_t.ppf(0.975, 4) * logs.std(ddof=1) / np.sqrt(5)
    assert (lo, hi) == (pytest.approx(g.point * np.exp(-half)), pytest.approx(g.point * np.exp(half)))
    same = geometric_mean_ratio([0.8] * 6)
    assert same.point == pytest.approx(0.8) and same.ci95 == (pytest.approx(0.8), pytest.approx(0.8))
    assert geometric_mean_ratio([0.8, 0.9, 1.0, 1.1]).ci95 is None  # 4 pairs: no interval
    assert geometric_mean_ratio([None, 0.0]).point is None


def test_too_few_pairs_or_no_baseline_give_no_interval():
    rng = np.random.default_rng(4)
    a, b = make_pairs(MIN_PAIRS - 1, 0.5, rng)
    ci = paired_ratio(a, b, pooled_p99)
    assert ci.ci95 is None and ci.point == pytest.approx(0.5, abs=0.1)
    assert verdict(ci, "time") == f"no interval ({MIN_PAIRS - 1} pair(s); at least {MIN_PAIRS} needed)"
    zero = paired_ratio(a, b, lambda runs: 0.0)
    assert zero.point is None and verdict(zero, "count").startswith("no ratio")
    with pytest.raises(ValueError, match="pairs"):
        paired_ratio(a, b[:-1], pooled_p99)


# --- repeat groups on disk ---------------------------------------------------------------------------


def write_group(root: pathlib.Path, policy: str, reps: int, time_scale: int = 1, **kw) -> pathlib.Path:
    for i in range(1, reps + 1):
        write_synthetic_run(root / policy / f"rep{i}", policy=policy, seed=10 + i, time_scale=time_scale, **MID, **kw)
    return root / policy


@pytest.fixture(scope="module")
def groups(tmp_path_factory):
    root = tmp_path_factory.mktemp("repeats")
    return root, write_group(root, "fifo", 5), write_group(root, "dlcp", 5, time_scale=2), write_group(root, "same", 5)


def test_compare_of_repeat_groups_gives_ratios_with_intervals(groups, capsys):
    root, fifo, dlcp, _ = groups
    html = compare_runs([fifo, dlcp], echo=True)
    assert html == root / "compare.html"
    data = json.loads((root / "compare.json").read_text())
    assert data["kind"] == "repeats" and data["n_pairs"] == 5 and data["pairs"] == [1, 2, 3, 4, 5]
    r = data["ratios"]["mct_p99"]
    assert set(r) >= {"point", "ci95", "n_pairs", "verdict"} and r["n_pairs"] == 5
    # every time of dlcp's runs is exactly twice fifo's (same seeds): the ratio and every resample are 2
    assert r["point"] == pytest.approx(2.0) and r["ci95"] == pytest.approx([2.0, 2.0]) and r["verdict"] == "slower"
    assert r["per_pair"] == pytest.approx([2.0] * 5)
    assert data["ratios"]["lost_fraction"]["verdict"] == "no significant difference"
    # pooled over 5 runs, MCT has 10,800 samples: a p99.9, which no single run has
    p999 = data["variants"][0]["values"]["mct_p999"]
    assert p999["n"] == 5 * 2160 and p999["value"] is not None and p999["per_run"] == [None] * 5
    # 225 iterations: no p99 even pooled, and the comparison says so instead of a ratio
    it99 = data["ratios"]["iteration_p99"]
    assert it99["point"] is None and it99["verdict"] == "too few samples (n=225 < 1,000)"
    # pooled over the 3 ranks, 675 iterations: still too few for the p99 beside it
    rk99 = data["ratios"]["rank_iteration_p99"]
    assert rk99["point"] is None and rk99["verdict"] == "too few samples (n=675 < 1,000)"
    out = capsys.readouterr().out
    assert "95% CI" in out and "dlcp vs fifo, MCT p99 (ms): slower, 2× (95% CI 2–2, 5 pairs)" in out
    md = (root / "compare.md").read_text()
    assert "bootstrap over pairs" in md and "| rep5 |" in md
    # the first pair's runs side by side, as in the comparison of single runs
    assert "The first pair side by side (rep1)" in md and "Switch drops side by side" in md
    assert (root / "plots" / "compare_iteration_cdf.png").stat().st_size > 0


def test_no_significant_difference_is_said_not_left_to_a_ratio(groups):
    root, fifo, _, same = groups
    out = root / "same-vs-fifo"
    compare_runs([fifo, same], out)
    data = json.loads((out / "compare.json").read_text())
    r = data["ratios"]["mct_p99"]
    assert r["point"] == 1.0 and r["ci95"][0] <= 1.0 <= r["ci95"][1]
    assert r["verdict"] == "no significant difference"
    md = (out / "compare.md").read_text()
    assert "same vs fifo, MCT p99 (ms): no significant difference (ratio 1, 95% CI 1–1, 5 pairs)" in md


def test_repeat_groups_and_single_runs_do_not_mix(groups, tmp_path):
    _, fifo, _, _ = groups
    single = write_synthetic_run(tmp_path / "single", **MID)
    with pytest.raises(ValueError, match="not a directory of repeated runs"):
        compare_runs([fifo, single], tmp_path)


# --- several series pooled -------------------------------------------------------------------------------


def write_series(root: pathlib.Path, reps: int, recorded: bool = True) -> pathlib.Path:
    """What `dlcp run --policies fifo,dlcp --repeat N` leaves: both groups, and its compare.json."""
    write_group(root, "dlcp", reps, time_scale=2)
    write_group(root, "fifo", reps)
    if recorded:
        compare_runs([root / "fifo", root / "dlcp"], root)
    return root


def test_series_pool_into_one_comparison_over_all_their_pairs(tmp_path, capsys):
    a, b = write_series(tmp_path / "s1", 3), write_series(tmp_path / "s2", 2)
    own = (a / "compare.json").read_text()
    html = compare_runs([a, b], echo=True)
    out = tmp_path / "pooled-s1+1"
    assert html == out / "compare.html" and (a / "compare.json").read_text() == own  # a series' own is kept
    data = json.loads((out / "compare.json").read_text())
    # the baseline comes from the series' own comparison, though "dlcp" sorts first
    assert data["baseline"] == "fifo" and [v["name"] for v in data["variants"]] == ["fifo", "dlcp"]
    assert data["n_pairs"] == 5 and data["series"] == ["s1", "s2"]
    assert data["pair_labels"] == ["s1/rep1", "s1/rep2", "s1/rep3", "s2/rep1", "s2/rep2"]
    r = data["ratios"]["mct_p99"]
    assert r["n_pairs"] == 5 and r["point"] == pytest.approx(2.0) and r["verdict"] == "slower"
    assert "5 pairs from 2 series" in capsys.readouterr().out
    md = (out / "compare.md").read_text()
    assert "over 2 series pooled here" in md and "| s2/rep2 |" in md
    # fewer than 5 pairs in each series alone: no interval there, one when pooled
    assert json.loads(own)["ratios"]["mct_p99"]["ci95"] is None


def test_one_series_compares_its_variants_in_place(tmp_path):
    a = write_series(tmp_path / "s1", 5)
    assert compare_runs([a], baseline="dlcp") == a / "compare.html"
    data = json.loads((a / "compare.json").read_text())
    assert data["baseline"] == "dlcp" and data["pair_labels"][0] == "rep1"
    assert data["ratios"]["mct_p99"]["point"] == pytest.approx(0.5)


def test_pooling_says_what_it_cannot_do(tmp_path):
    bare = write_series(tmp_path / "bare", 3, recorded=False)
    with pytest.raises(ReportInputError, match="give --baseline \\(one of dlcp, fifo\\)"):
        compare_runs([bare])
    with pytest.raises(ReportInputError, match="--baseline pfabric: not a variant of every series"):
        compare_runs([bare], baseline="pfabric")
    with pytest.raises(ReportInputError, match="fifo: not a results directory of repeated runs .* like the others"):
        compare_runs([bare, bare / "fifo"])
    with pytest.raises(ReportInputError, match="--baseline picks a variant"):
        compare_runs([bare / "fifo", bare / "dlcp"], baseline="fifo")
    # the command says it in one line, and with --baseline it compares
    cli = [sys.executable, "-m", "dlcp_cli", "compare", str(bare)]
    p = subprocess.run(cli, capture_output=True, text=True, cwd=pathlib.Path(__file__).parents[2])
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "give --baseline (one of dlcp, fifo)" in p.stderr
    p = subprocess.run(
        cli + ["--baseline", "fifo"], capture_output=True, text=True, cwd=pathlib.Path(__file__).parents[2]
    )
    assert p.returncode == 0, p.stderr
    assert "dlcp vs fifo, MCT p99 (ms)" in p.stdout and (bare / "compare.json").exists()


def test_compare_prints_bad_input_in_one_line_but_keeps_a_bugs_traceback(tmp_path, monkeypatch):
    import argparse

    import dlcp.reporting.compare
    from dlcp_cli.report_cmds import cmd_compare

    bare = write_series(tmp_path / "bare", 3, recorded=False)
    args = argparse.Namespace(run_dirs=[str(bare)], out=None, baseline=None)
    assert cmd_compare(args) == 2  # no baseline recorded: the user's to fix

    def bug(*a, **k):
        raise ValueError("operands could not be broadcast together")

    monkeypatch.setattr(dlcp.reporting.compare, "compare_series", bug)
    with pytest.raises(ValueError, match="broadcast"):
        cmd_compare(args)


@pytest.mark.parametrize(
    "facts",
    [{"deterministic": True, "clock": "simulated"}, {"clock": "simulated"}],  # the second: runs older than the key
    ids=["deterministic", "simulated-clock"],
)
def test_pairs_of_one_seed_on_a_deterministic_backend_are_not_counted_twice(tmp_path, facts):
    """Whether a seed fixes a run is meta.json's fact (the backend wrote it), not its backend's name."""
    a, b = write_series(tmp_path / "a", 3), write_series(tmp_path / "b", 3)
    for meta in tmp_path.glob("*/*/rep*/meta.json"):
        m = json.loads(meta.read_text())
        meta.write_text(json.dumps({**m, "backend": "ns3", **facts, "seed": int(meta.parent.name[3:])}))
    with pytest.raises(ReportInputError, match="a/rep1 and b/rep1 both ran seed 1 on ns3"):
        compare_runs([a, b])
    for meta in tmp_path.glob("*/*/rep*/meta.json"):  # the same seeds on a wall clock: independent samples
        meta.write_text(json.dumps({**json.loads(meta.read_text()), "deterministic": False, "clock": "wall"}))
    compare_runs([a, b])


# --- dilation, warm-up and keep-up in reports ----------------------------------------------------------


def _set_config(run: pathlib.Path, extra: str) -> None:
    cfg = run / "config.toml"
    cfg.write_text(cfg.read_text() + extra)


def test_a_dilated_run_reports_the_systems_times(tmp_path):
    plain = write_synthetic_run(tmp_path / "plain", seed=5, **MID)
    slow = write_synthetic_run(tmp_path / "slow", seed=5, time_scale=4, **MID)  # the same run, 4x slower
    _set_config(slow, "\n[scale]\ndilation = 4\n")
    a, b = summarise(load_run(plain)), summarise(load_run(slow))
    assert b["scale"]["dilation"] == 4.0 and a["scale"]["dilation"] == 1.0
    for path in (
        ("mct_us", "overall", "p99"),
        ("iteration", "iteration_ms", "p50"),
        ("iteration", "comm_ms", "mean"),
        ("training", "wall_time_s"),
        ("lower_bound", "iteration", "p50_multiple"),
    ):
        va, vb = a, b
        for k in path:
            va, vb = va[k], vb[k]
        assert vb == pytest.approx(va, rel=1e-6), path


def test_warmup_iterations_are_left_out(tmp_path):
    run = write_synthetic_run(tmp_path / "run", **MID)
    before = summarise(load_run(run))
    cfg = (run / "config.toml").read_text().replace("iterations = 45\n", "iterations = 45\nwarmup_iterations = 5\n")
    (run / "config.toml").write_text(cfg)
    s = summarise(load_run(run))
    assert before["iteration"]["count"] == 45 and s["iteration"]["count"] == 40
    assert s["scale"]["warmup_iterations"] == 5 and s["scale"]["warmup_iterations_left_out"] == 5
    assert s["mct_us"]["overall"]["count"] == before["mct_us"]["overall"]["count"] * 40 // 45
    assert s["scale"]["warmup_messages_left_out"] == before["mct_us"]["overall"]["count"] * 5 // 45
    assert s["loss"]["pkts"] == before["loss"]["pkts"]  # loss keeps every iteration


def test_a_run_that_did_not_keep_up_is_flagged_with_the_figure(tmp_path):
    run = write_synthetic_run(tmp_path / "run", **MID)
    assert summarise(load_run(run))["keep_up"]["ok"]
    agent = json.loads((run / "records" / "h1-agent.json").read_text())
    its = [float(line.split(",")[5]) for line in (run / "records" / "h1-iterations.csv").read_text().splitlines()[1:]]
    wall_ms = sum(its) / 1e3
    agent["compute"] = {
        "mode": "profile",
        "deadlines": 400,
        "missed": 120,
        "tolerance_ms": 1.0,
        "late_max_ms": 35.0,
        "overrun_ms": 0.07 * wall_ms,
        "overrun_share": 0.21,
    }
    (run / "records" / "h1-agent.json").write_text(json.dumps(agent))
    meta = json.loads((run / "meta.json").read_text())
    meta["switch_cpu"] = {"s1": {"cpu_s": 9.5, "wall_s": 10.0, "busy": 0.95, "busy_peak": 0.97, "window_s": 5.0}}
    (run / "meta.json").write_text(json.dumps(meta))
    counters = json.loads((run / "counters" / "s1.json").read_text())
    counters["ports"][2]["rx_kernel_drops"] = 1234
    (run / "counters" / "s1.json").write_text(json.dumps(counters))
    k = summarise(load_run(run))["keep_up"]
    assert not k["ok"] and len(k["flags"]) == 3
    assert "h1 fell behind its profile" in k["flags"][0]
    assert "summed to 7% of its iteration time" in k["flags"][0] and "21% of the profile's" in k["flags"][0]
    assert k["compute"]["h1"]["overrun_share_of_iterations"] == pytest.approx(0.07)
    assert "s1 used 97% of a CPU" in k["flags"][1]
    assert "1,234 frame(s) dropped by the kernel" in k["flags"][2] and "port 3: 1,234" in k["flags"][2]
    from dlcp.reporting import report_run

    report_run(run)
    report = (run / "report.md").read_text()
    # one line at the top names the worst (kernel drops: any is too many); the table has them all
    assert (
        "did not keep up, so these figures partly measure the machine: the worst of 3 finding(s), s1: kernel " in report
    )
    assert "drops 1,234 frame(s) (limit 0)" in report
    assert "| s1 | switch CPU, busiest window | 97% of a CPU | 90% |" in report
    assert "| h1 | compute overrun | 7% of its iteration time | 5% |" in report
    f = k["findings"]
    assert [x["over"] for x in f] == [pytest.approx(0.07 / 0.05), pytest.approx(0.97 / 0.9), None]


def test_a_host_whose_receive_path_fell_behind_is_flagged_against_the_median_mct(tmp_path):
    run = write_synthetic_run(tmp_path / "run", **MID)
    s = summarise(load_run(run))
    mct_wall_ms = s["mct_us"]["overall"]["p50"] / 1e3  # not dilated: system and wall time are one
    frame_ms = 1514 * 8 / 50e6 * 1e3  # the synthetic run's 50 Mbit/s links, not dilated
    for host, p99 in (("h2", 0.5 * frame_ms), ("h4", 0.3 * mct_wall_ms)):  # within the limits, over one
        path = run / "records" / f"{host}-agent.json"
        agent = json.loads(path.read_text())
        agent["socket_wait"] = {"count": 5000, "p50_ms": 0.02, "p99_ms": p99, "max_ms": 2 * p99}
        agent["threads"] = {"rx": {"cpu_s": 1.5, "runqueue_s": 2.0, "runs": 1000}}
        path.write_text(json.dumps(agent))
    k = summarise(load_run(run))["keep_up"]
    assert not k["ok"] and len(k["flags"]) == 1 and "host receive waits" in k["measured"]
    assert "receive path of h4 fell behind" in k["flags"][0] and "30% of the median message completion" in k["flags"][0]
    assert "used 1.5 s of CPU and waited 2 s for one (2 ms per wake-up)" in k["flags"][0]
    assert k["socket_wait"]["h4"]["rx_thread"]["runqueue_ms_per_run"] == 2.0
    assert k["socket_wait"]["h2"]["p99_share_of_mct_p50"] == pytest.approx(0.5 * frame_ms / mct_wall_ms)
    assert k["socket_wait"]["h2"]["p99_frames"] == pytest.approx(0.5)
    assert k["socket_wait"]["h4"]["p99_share_of_mct_p50"] == pytest.approx(0.3)


def test_a_host_that_reacts_slower_than_its_link_is_flagged_in_frame_times(tmp_path):
    """Well within the share of the MCT, but 3 full frames' time on its link: flagged; the same wait
    at dilation 4, where a frame takes 4 times as long, is not."""
    run = write_synthetic_run(tmp_path / "run", **MID)
    frame_ms = 1514 * 8 / 50e6 * 1e3
    path = run / "records" / "h2-agent.json"
    agent = json.loads(path.read_text())
    agent["socket_wait"] = {"count": 5000, "p50_ms": 0.02, "p99_ms": 3 * frame_ms, "max_ms": 5 * frame_ms}
    path.write_text(json.dumps(agent))
    k = summarise(load_run(run))["keep_up"]
    assert k["socket_wait"]["h2"]["p99_share_of_mct_p50"] < 0.1
    assert not k["ok"] and len(k["flags"]) == 1 and "h2 reacted slower than its link delivers" in k["flags"][0]
    assert "3 times a full frame's 0.242 ms" in k["flags"][0]
    assert k["socket_wait"]["h2"]["p99_frames"] == pytest.approx(3)
    _set_config(run, "\n[scale]\ndilation = 4\n")
    k = summarise(load_run(run))["keep_up"]
    assert k["socket_wait"]["h2"]["p99_frames"] == pytest.approx(0.75) and not any("h2" in f for f in k["flags"])


def test_a_switch_that_read_or_sent_late_is_flagged_against_the_median_mct(tmp_path):
    run = write_synthetic_run(tmp_path / "run", **MID)
    s = summarise(load_run(run))
    mct_wall_ms = s["mct_us"]["overall"]["p50"] / 1e3
    path = run / "counters" / "s1.json"
    counters = json.loads(path.read_text())
    counters["read_lag"] = {"count": 9000, "p50_ms": 0.01, "p99_ms": 0.05 * mct_wall_ms, "max_ms": 3.0}
    counters["send_late"] = {"count": 9000, "p50_ms": 0.01, "p99_ms": 0.02 * mct_wall_ms, "max_ms": 1.0}
    counters["host_burst"] = {"count": 9000, "p50_bytes": 200, "p99_bytes": 2048, "max_bytes": 4756}
    path.write_text(json.dumps(counters))
    k = summarise(load_run(run))["keep_up"]
    assert k["ok"] and "switch timing" in k["measured"]
    assert k["switch_timing"]["s1"]["read_lag"]["p99_share_of_mct_p50"] == pytest.approx(0.05)
    assert k["switch_timing"]["s1"]["host_burst"]["max_bytes"] == 4756
    counters["read_lag"]["p99_ms"] = 0.25 * mct_wall_ms
    counters["send_late"]["p99_ms"] = 0.125 * mct_wall_ms
    path.write_text(json.dumps(counters))
    k = summarise(load_run(run))["keep_up"]
    assert not k["ok"] and len(k["flags"]) == 2
    assert "switch s1 fell behind" in k["flags"][0] and "in the kernel before it read them" in k["flags"][0]
    assert "25% of the median message completion" in k["flags"][0]
    assert "after their slot on the link began" in k["flags"][1] and "12.5% of the median" in k["flags"][1]
    from dlcp.reporting import report_run

    report_run(run)
    assert "Switch timing" in (run / "report.md").read_text()


def test_a_background_sender_that_started_late_is_flagged_with_the_iterations_it_missed(tmp_path):
    run = write_synthetic_run(tmp_path / "run", **MID)
    rows = [line.split(",") for line in (run / "records" / "h1-iterations.csv").read_text().splitlines()[1:]]
    starts = [int(r[3]) / 1e6 for r in rows]  # start_us of h1's iterations 0..44 (one clock for all workers)

    def sender(name, released, start_s, started):
        (run / "records" / f"{name}.json").write_text(
            json.dumps(
                {
                    "host": name.split("-")[0],
                    "kind": "udp_onoff",
                    "pkts": 100,
                    "released_unix": released,
                    "start_s": start_s,
                    "start_unix": started,
                }
            )
        )

    sender("h5-background0", starts[1], 0.0, starts[1] + 0.001)  # on time
    sender("h6-background1", starts[1], 0.0, (starts[10] + starts[11]) / 2)  # iterations 1..10 without it
    sender("h7-background2", starts[1], (starts[15] - starts[1]), starts[15] + 0.001)  # late by start_s only
    k = summarise(load_run(run))["keep_up"]
    assert not k["ok"] and len(k["flags"]) == 1 and "background start" in k["measured"]
    assert "h6-background1 started" in k["flags"][0]
    assert "10 of the 45 measured iterations began without it" in k["flags"][0]
    # the iteration that began as it was due is within the allowance
    assert k["background"]["h5-background0"]["measured_iterations_missed"] == 1
    assert k["background"]["h7-background2"]["measured_iterations_missed"] == 1
    sender("h6-background1", starts[1], 0.0, None)  # stopped before it sent anything
    k = summarise(load_run(run))["keep_up"]
    assert "h6-background1 never sent: 44 of the 45" in k["flags"][0]


# --- the run plan and the dilated config -----------------------------------------------------------------

BASE = """
name = "t"
seed = 7
[topology]
kind = "star"
hosts = 6
[links]
host_mbps = 1000
delay_us = 10
[workload]
model = "synthetic"
compute = "profile"
profile = "resnet50-usbyte"
[dlcp]
deadline_ms = 2000
[scale]
dilation = 20
[[background]]
rate_mbps = 400
on_ms = 30
off_ms = 70
start_s = 0.5
"""


def test_repeat_plan_interleaves_pairs_with_one_seed_each(tmp_path):
    from dlcp.runs.naming import run_dir_of

    plan_runs = configmod.plan_runs
    cfg = tmp_path / "t.toml"
    cfg.write_text(BASE)
    raw = configmod.load_raw(cfg, [])
    runs = plan_runs(configmod.variants(raw, ["dlcp.policy=fifo,dlcp"]), 3)
    assert [(v, i, c["seed"], c["dlcp"]["policy"]) for v, i, c in runs] == [
        ("fifo", 1, 7, "fifo"),
        ("dlcp", 1, 7, "dlcp"),
        ("fifo", 2, 8, "fifo"),
        ("dlcp", 2, 8, "dlcp"),
        ("fifo", 3, 9, "fifo"),
        ("dlcp", 3, 9, "dlcp"),
    ]
    assert run_dir_of(pathlib.Path("r"), "dlcp", 2) == pathlib.Path("r/dlcp/rep2")
    assert [(v, i) for v, i, _ in plan_runs(configmod.variants(raw, []), 1)] == [("run", 0)]
    assert run_dir_of(pathlib.Path("r"), "run", 0) == pathlib.Path("r/run")
    with pytest.raises(configmod.ConfigError, match="--repeat: 0"):
        plan_runs(configmod.variants(raw, []), 0)


def test_dilation_slows_rates_and_stretches_times(tmp_path):
    cfg = tmp_path / "t.toml"
    cfg.write_text(BASE)
    system = configmod.load(cfg)
    emu = emulated(system)
    assert emu["links"]["host_mbps"] == 50 and emu["links"]["delay_us"] == 200
    assert emu["dlcp"]["deadline_ms"] == 40000 and emu["dlcp"]["probe_rto_ms"] == 400
    assert emu["dlcp"]["host_mark_ms"] == system["dlcp"]["host_mark_ms"] * 20
    assert emu["background"][0]["rate_mbps"] == 20 and emu["background"][0]["on_ms"] == 600
    assert emu["background"][0]["start_s"] == 10 and emu["background"][0]["stop_s"] == 0
    assert emu["scale"]["dilation"] == 20 and emu["links"]["queue_pkts"] == system["links"]["queue_pkts"]
    assert system["links"]["host_mbps"] == 1000  # the system config is left alone
    configmod.validate(emu)  # what the emulation runs is a valid config too
    with pytest.raises(configmod.ConfigError, match="scale.dilation: 20 needs workload.compute = 'profile'"):
        configmod.validate({**system, "workload": {"model": "cnn"}})


def test_time_to_accuracy_gets_a_ratio_when_every_run_reaches_the_target(tmp_path):
    root = tmp_path / "tta"
    fifo = write_group(root, "fifo", 5, target_accuracy=0.8)
    slow = write_group(root, "slow", 5, time_scale=2, target_accuracy=0.8)
    never = write_group(root, "never", 5, target_accuracy=0.8, final_accuracy=0.5)
    compare_runs([fifo, slow, never])
    data = json.loads((root / "compare.json").read_text())
    by = {v["name"]: v for v in data["variants"]}
    tta = by["fifo"]["values"]["tta_s"]
    assert tta["value"] is not None and all(x is not None for x in tta["per_run"])
    r = by["slow"]["ratios"]["tta_s"]
    assert r["point"] == pytest.approx(2.0, rel=0.05) and r["verdict"] == "slower"
    assert by["never"]["values"]["tta_s"]["value"] is None  # no run reached 0.8: no time, no ratio
    assert by["never"]["ratios"]["final_accuracy"]["verdict"] == "lower"
    md = (root / "compare.md").read_text()
    assert "time to target accuracy" in md and (root / "plots" / "compare_training.png").stat().st_size > 0


def test_a_table_of_three_variants_names_each_ones_interval_and_verdict():
    ratio = {"point": 0.5, "ci95": [0.4, 0.6], "verdict": "faster", "pairs": 5}
    value = {"value": 1.0, "n": None, "too_few": None}
    data = {
        "metrics": [{"key": "m", "label": "metric m"}],
        "variants": [
            {"name": "a", "values": {"m": value}},
            {"name": "b", "values": {"m": value}, "ratios": {"m": ratio}},
            {"name": "c", "values": {"m": value}, "ratios": {"m": {**ratio, "verdict": "no change"}}},
        ],
    }
    header, rows = repeats.table_rows(data)
    assert len(set(header)) == len(header)  # the terminal prints a row as a dict by header
    row = dict(zip(header, rows[0]))
    assert (row["verdict (b)"], row["verdict (c)"]) == ("faster", "no change")


def test_runs_that_did_not_keep_up_get_one_line_naming_the_worst_finding():
    from dlcp.reporting.keepup_check import findings_rows, runs_keepup_line

    def finding(where, over):
        return {"where": where, "what": "socket wait p99", "figure": f"{over:g}x", "limit": "10%", "over": over}

    bad = [("rep1", [finding("h1", 2.0), finding("h2", 3.5)]), ("rep4", [finding("h3", 1.2)])]
    line = runs_keepup_line("dlcp", bad, 8)
    assert (
        line
        == "dlcp: 2 of 8 run(s) did not keep up; the worst: rep1, h2: socket wait p99 3.5x (limit 10%); 3 finding(s) in all"
    )
    assert "\n" not in line
    assert [r[0] for r in findings_rows(bad[0][1] + bad[1][1])] == ["h2", "h1", "h3"]
