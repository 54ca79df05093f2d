"""`dlcp reproduce`: every claim of experiments/papers loads, its --fast figures come out in the
direction the paper claims, the verdict's rules, the report, and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dlcp.reproduce.claims import Figure, claims_root, figure_for, load_claim, load_claims
from dlcp.reproduce.fast import fast_rows
from dlcp.reproduce.full import rows_of, series_request
from dlcp.reproduce.verdict import judge
from dlcp.settings import ConfigError

ROOT = Path(__file__).resolve().parents[2] / "experiments" / "papers"
CLAIMS = sorted(p.name for p in ROOT.iterdir() if (p / "claim.toml").is_file())


def test_every_claim_the_issue_names_is_there():
    assert set(CLAIMS) >= {
        "dear-10gbe",
        "dear-100gbib",
        "usbyte-8",
        "usbyte-128",
        "oasr-wfbp",
        "mgwfbp-wfbp",
        "multitree-ring",
        "multitree-sota",
        "dssync-bottleneck",
        "mlt-ablation",
    }
    assert {c.id for c in load_claims(ROOT) if c.full} >= {"dear-10gbe", "mlt-ablation"}


@pytest.mark.parametrize("name", CLAIMS)
def test_fast_figure_points_the_papers_way(name):
    """The direction of every claim the models can price is the paper's: its system is faster."""
    claim = load_claim(ROOT / name)
    rows = fast_rows(claim)
    priced = [r for r in rows if r.speedup is not None]
    assert priced, f"{name}: no comparison priced"
    for r in priced:
        v = judge(figure_for(claim, r.label), r.speedup)
        assert v.direction == "reproduced", f"{name}, {r.label}: {r.speedup}"
        if r.spread is not None:
            assert r.spread[0] <= r.speedup <= r.spread[1] and r.spread_kind != "none: the model is deterministic"


def test_claims_where_the_model_matches_the_paper_within_2x():
    # the figures the --fast note (docs/notes/2026-11-27-reproduce-fast.md) reports within 2x of the paper's gain
    for name, label in [
        ("dear-100gbib", "DeAR vs the best of WFBP, ByteScheduler, MG-WFBP"),
        ("usbyte-8", "US-Byte vs ByteScheduler (bytecore's PS defaults, as their runs)"),
        ("dssync-bottleneck", "DS-Sync (groups of 8) vs ring all-reduce with WFBP"),
        ("mlt-ablation", "step 1: spray vs per-flow ECMP (ring all-reduce, WFBP)"),
    ]:
        claim = load_claim(ROOT / name)
        row = next(r for r in fast_rows(claim) if r.label == label)
        assert judge(figure_for(claim, label), row.speedup).magnitude == "within 2x", name


def test_dear_at_64_workers_notes_mgwfbp_collapsing_to_one_group():
    rows = fast_rows(load_claim(ROOT / "dear-10gbe"))
    assert any("mgwfbp merged all 161 tensors into one group" in n for n in rows[0].notes)


def test_verdict_rules():
    up_to = Figure(kind="up to", speedup=1.83, quote="q", source="s")
    assert judge(up_to, 1.6).direction == "reproduced" and judge(up_to, 1.6).magnitude == "within 2x"
    assert judge(up_to, 1.3).magnitude.startswith("outside 2x (our gain 30 % is 2.8x smaller)")
    assert judge(up_to, 3.0).magnitude.startswith("outside 2x (our gain 200 % is 2.4x larger)")
    assert judge(up_to, 0.9).direction == "not reproduced" and "not faster" in judge(up_to, 0.9).why
    # a 95 % interval holding 1 is no direction, whatever the point says
    assert judge(up_to, 1.2, (0.95, 1.5)).direction == "not significant"
    assert judge(up_to, 1.2, (1.05, 1.4)).direction == "reproduced"
    # a measured figure (paired repeats) without its interval (too few pairs) judges no direction
    assert judge(up_to, 1.005, None, measured=True).direction == "no interval"
    assert "too few pairs" in judge(up_to, 1.005, None, measured=True).why
    assert judge(up_to, 1.2, (1.05, 1.4), measured=True).direction == "reproduced"
    rng = Figure(kind="range", low=1.05, speedup=1.16, quote="q", source="s")
    assert judge(rng, 1.03).magnitude == "within 2x" and judge(rng, 1.02).magnitude.startswith("outside")
    direction = Figure(kind="direction", quote="q", source="s")
    assert judge(direction, 1.5).magnitude == "no paper figure"
    assert judge(up_to, None).direction == "no figure"
    with pytest.raises(ConfigError, match="speedup: a figure of kind 'up to' needs its speed-up"):
        Figure(kind="up to", quote="q", source="s")


def test_a_bad_manifest_is_one_line_naming_file_and_key(tmp_path):
    bad = tmp_path / "papers" / "x"
    bad.mkdir(parents=True)
    text = (ROOT / "usbyte-128" / "claim.toml").read_text().replace('id = "usbyte-128"', 'id = "x"')
    (bad / "claim.toml").write_text(text.replace("workers = 128", "workers = 1"))
    with pytest.raises(ConfigError, match=r"x/claim.toml: fast.*workers: 1 is below the minimum 2"):
        load_claim(bad)
    (bad / "claim.toml").write_text(text.replace('id = "x"', 'id = "y"'))
    with pytest.raises(ConfigError, match="id: 'y' is not the folder's name 'x'"):
        load_claim(bad)
    with pytest.raises(ConfigError, match="claim 'nope': not in"):
        load_claims(ROOT, ["nope"])


def test_full_series_are_dlcp_runs_with_named_variants_at_full_and_reduced_scale(tmp_path):
    from dlcp.runs.series_runner import plan

    claim = load_claim(ROOT / "mlt-ablation")
    s = claim.full.series[0]
    full = plan(series_request(ROOT / "mlt-ablation", claim.full, s, tmp_path, False, None))
    small = plan(series_request(ROOT / "mlt-ablation", claim.full, s, tmp_path, True, 1))
    assert full.variants == ["baseline", "spray", "prio", "mlt"] and len(full.runs) == 4 * claim.full.repeat
    assert full.runs[0].cfg["workload"]["workers"] == 64 and small.runs[0].cfg["workload"]["workers"] == 8
    base, mlt = full.runs[0].cfg["dlcp"], full.runs[3].cfg["dlcp"]
    assert (base["policy"], base["load_balancing"], base["reliable"]) == ("fifo", "per_flow", True)
    assert (mlt["policy"], mlt["load_balancing"], mlt["reliable"]) == ("dlcp", "spray_random", False)
    assert full.runs[0].cfg["seed"] == full.runs[3].cfg["seed"]  # one pair: one seed


FULL_CLAIMS = [c.id for c in load_claims(ROOT) if c.full]


@pytest.mark.parametrize("name", FULL_CLAIMS)
@pytest.mark.parametrize("reduced", [False, True], ids=["full", "reduced"])
def test_every_run_gives_its_pair_a_ratio_of_the_metric(name, reduced, tmp_path):
    """A pair's ratio needs the metric in each of its runs: a percentile pooled over ranks needs
    min_samples(q) measured iterations (workers x iterations after warm-up) in one run, or no
    pair has a ratio and no number of repeats gives an interval."""
    from dlcp.reporting.ranks import RANK_METRICS
    from dlcp.reporting.stats import min_samples
    from dlcp.runs.series_runner import plan

    claim = load_claim(ROOT / name)
    metric = next(m for m in RANK_METRICS if m.key == claim.full.metric)
    need = min_samples(metric.q) if metric.q is not None else 1
    for s in claim.full.series:
        for run in plan(series_request(ROOT / name, claim.full, s, tmp_path, reduced, 1)).runs:
            w = run.cfg["workload"]
            assert w["workers"] * (w["iterations"] - w["warmup_iterations"]) >= need, (s.name, run.variant)


def test_full_rows_read_the_series_comparison():
    claim = load_claim(ROOT / "dear-10gbe")
    s = claim.full.series[0]
    data = {
        "kind": "repeats",
        "variants": [
            {"name": "mgwfbp", "values": {}},
            {
                "name": "dear",
                "ratios": {
                    "rank_iteration_p50": {"point": 0.8, "ci95": [0.7, 0.9], "n_pairs": 5, "verdict": "faster"},
                    "rank_iteration_p90": {"point": None, "verdict": "too few samples (n=12 < 100)"},
                    "rank_comm_p50": {"point": 0.5, "ci95": None, "n_pairs": 3, "verdict": "no interval"},
                },
            },
        ],
    }
    (row,) = rows_of(data, claim, s, Path("r"), 1.0)
    assert row.label == "DeAR vs MG-WFBP" and row.speedup == pytest.approx(1.25)
    assert row.ci == pytest.approx((1 / 0.9, 1 / 0.7)) and row.n_pairs == 5
    assert row.also["rank_iteration_p90"] == "too few samples (n=12 < 100)"


def test_an_unknown_series_is_one_line_before_anything_runs(tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "dlcp_cli", "reproduce", "dear-10gbe", "--full", "--series", "resnet5"]
        + ["--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 2 and not (tmp_path / "out").exists()
    assert p.stderr.strip().splitlines() == [
        "dlcp reproduce: --series resnet5: no such series in these claims "
        "(series: bert-base, bert-large, densenet201, inception_v3, resnet50)"
    ]


def test_cli_fast_writes_the_report_and_prints_the_table(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "dlcp_cli", "reproduce", "usbyte-8", "dear-100gbib", "--fast", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    assert "US-Byte vs WFBP" in out and "reproduced" in out and "DeAR vs the best" in out
    md = (tmp_path / "reproduce.md").read_text()
    assert "**Paper's figure**: up to 1.56x" in md and "[C] ZJU-CNLAB/US-Byte" in md
    assert (tmp_path / "reproduce.html").stat().st_size > 0
    data = json.loads((tmp_path / "reproduce.json").read_text())
    assert {r["claim"] for r in data["results"]} == {"usbyte-8", "dear-100gbib"}
    bad = subprocess.run(
        [sys.executable, "-m", "dlcp_cli", "reproduce", "nope"], capture_output=True, text=True, timeout=300
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "claim 'nope'" in bad.stderr


def test_claims_root_defaults_to_the_checkout():
    assert claims_root().resolve() == ROOT.resolve() or (Path.cwd() / "experiments" / "papers").is_dir()


def test_named_variants_bundle_several_keys_without_their_product(tmp_path):
    from dlcp.runs.series_runner import SeriesRequest, plan

    cfg = str(ROOT.parent / "ps-incast.toml")
    named = [("a", ["dlcp.policy=fifo", "dlcp.load_balancing=per_flow"]), ("b", ["dlcp.policy=dlcp"])]
    s = plan(SeriesRequest(cfg, named=named, repeat=2, out_root=str(tmp_path)))
    assert s.variants == ["a", "b"] and len(s.runs) == 4
    assert (s.runs[0].cfg["dlcp"]["policy"], s.runs[0].cfg["dlcp"]["load_balancing"]) == ("fifo", "per_flow")
    with pytest.raises(ConfigError, match="named variants or --vary"):
        plan(SeriesRequest(cfg, named=named, vary=["seed=1,2"]))
    with pytest.raises(ConfigError, match="need two or more"):
        plan(SeriesRequest(cfg, named=named[:1]))
    with pytest.raises(ConfigError, match="variant b: dlcp.policy"):
        plan(SeriesRequest(cfg, named=[named[0], ("b", ["dlcp.policy=nope"])]))
