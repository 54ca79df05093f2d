"""Comparisons over repeated, paired runs (`dlcp run X --policies a,b --repeat N` writes
<results>/<variant>/rep<i>/): per metric, each variant's value pooled over its runs, its ratio to
the first variant (the baseline) with a 95 % confidence interval from a bootstrap over pairs
(dlcp/reporting/bootstrap.py says exactly what is resampled), and a plain verdict: faster, slower
(lower, higher) or no significant difference. compare.json, compare.md, compare.html.

Pairs are matched by repeat index (rep<i> of every variant; `dlcp run` gave them the same seed).
Statistics pool the runs of a variant: a percentile is taken over every sample of the runs
together (each run's MCTs after its warm-up, in the system's time), and a pooled percentile with
too few samples is refused like a single run's (dlcp/reporting/stats.py). Fractions are sums over
the runs (lost packets / packets), counts and accuracy are means per run.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from dlcp.reporting import plots
from dlcp.reporting.bootstrap import CONFIDENCE, MIN_PAIRS, RESAMPLES, geometric_mean_ratio, paired_ratio, verdict
from dlcp.reporting.jobs import completions, job_run, jobs_of
from dlcp.reporting.keepup_check import FINDINGS_HEADER, findings_rows, runs_keepup_line
from dlcp.reporting.load import ReportInputError, RunData, is_run_dir, load_run
from dlcp.reporting.ranks import message_differences, rank_blocks
from dlcp.reporting.render import Doc, Image, fmt
from dlcp.reporting.runreport import write_outputs
from dlcp.reporting.side_by_side import side_by_side_sections
from dlcp.reporting.stats import MIN_SAMPLES_RULE, PERCENTILE_METHOD_TEXT, enough_for, min_samples
from dlcp.reporting.steady import undilated
from dlcp.reporting.summarise import (
    TrainingCurves,
    steady_iteration_series,
    steady_sender_rows,
    summarise,
    training_curves,
)
from dlcp.tables import format_table

REP_DIR = re.compile(r"rep(\d+)$")
METHOD_TEXT = (
    f"bootstrap over pairs: {RESAMPLES:,} times, draw as many pairs as there are, with replacement, the "
    "same pairs for every variant; recompute each variant's pooled statistic on the runs of the drawn "
    f"pairs and their ratio; the {100 * CONFIDENCE:g} % interval is log R +- t(n-1) x the standard "
    "deviation of the resampled log ratios x sqrt(n/(n-1)) (a bootstrap standard error with a Student "
    f"critical value; at least {MIN_PAIRS} pairs). Runs are the units resampled, never single messages "
    "or iterations."
)


def repeat_dirs(path: pathlib.Path) -> list[tuple[int, pathlib.Path]]:
    """(i, path) of the rep<i> run directories inside `path`, by i."""
    if not path.is_dir():
        return []
    reps = [(int(m.group(1)), p) for p in path.iterdir() if (m := REP_DIR.match(p.name)) and is_run_dir(p)]
    return sorted(reps)


def is_repeat_group(path: pathlib.Path) -> bool:
    return not is_run_dir(path) and bool(repeat_dirs(path))


@dataclass
class RunSample:
    """One run, reduced to what the pooled statistics need (times in ms, the system's time)."""

    rep: int
    path: pathlib.Path
    seed: object
    arrays: dict[str, np.ndarray]  # "mct", "iteration", "comm"
    scalars: dict[str, float | None]
    kept_up: bool
    findings: list[dict] = field(default_factory=list)  # keep-up findings (keepup_check.Finding)
    problems: list[str] = field(default_factory=list)
    curves: TrainingCurves | None = None  # test accuracy over time (the variant's training plot)
    target: float | None = None  # its time-to-accuracy target
    series: str = ""  # the results directory (series) the run belongs to
    backend: str | None = None
    deterministic: bool = False  # a seed fixes the run exactly (meta.json)
    config: dict | None = None  # config.toml: what its messages are made of (ranks.message_differences)

    def pair_label(self, pooled: bool) -> str:
        return f"{self.series}/rep{self.rep}" if pooled else f"rep{self.rep}"


def sample_of(rep: int, path: pathlib.Path, series: str = "") -> RunSample:
    return run_sample(rep, path, undilated(load_run(path)), series)


def run_sample(rep: int, path: pathlib.Path, run: RunData, series: str = "") -> RunSample:
    """`sample_of` a run already loaded (and undilated): a whole run, or one job of it."""
    s = summarise(run)
    steady = steady_iteration_series(run)
    loss, sw = s["loss"], s["switch"]["totals"]
    return RunSample(
        rep=rep,
        path=path,
        seed=(run.meta or {}).get("seed", (run.config or {}).get("seed")),
        arrays={
            "mct": steady_sender_rows(run).col("mct_us") / 1e3,
            "iteration": steady.iteration_us / 1e3,
            "comm": steady.comm_us / 1e3,
            "rank_iteration": _flat(rank_blocks(run, "iteration_us")),
            "rank_comm": _flat(rank_blocks(run, "comm_us")),
        },
        scalars={
            "pkts": loss["pkts"],
            "lost_pkts": loss["lost_pkts"],
            "retx_pkts": loss["retx_pkts"],
            "forced": loss["forced"],
            "protected_lost": loss["protected_lost"],
            "early_drop_pkts": sw["early_drop_pkts"],
            "tail_drop_pkts": sw["tail_drop_pkts"],
            "final_accuracy": s["training"]["final_accuracy"],
            "training_wall_s": s["training"]["wall_time_s"],
            "tta_s": s["training"]["time_to_accuracy_s"],
            "tta_iterations": s["training"]["iterations_to_accuracy"],
        },
        curves=training_curves(run),
        target=s["training"]["target_accuracy"],
        kept_up=s["keep_up"]["ok"],
        findings=s["keep_up"]["findings"],
        problems=s["problems"],
        series=series,
        backend=(run.meta or {}).get("backend", (run.config or {}).get("backend")),
        deterministic=is_deterministic(run.meta),
        config=run.config,
    )


def _flat(blocks: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(blocks) if blocks else np.array([])


def is_deterministic(meta: dict | None) -> bool:
    """meta.json `deterministic`; runs older than the key ran deterministically on a simulated clock."""
    meta = meta or {}
    return bool(meta.get("deterministic", meta.get("clock") == "simulated"))


# --- metrics over sets of runs -------------------------------------------------------------------


@dataclass(frozen=True)
class PooledMetric:
    key: str
    label: str
    kind: str  # "time" (faster / slower) or "count" (lower / higher)
    better: str  # "lower" or "higher"
    stat: Callable[[list[RunSample]], float | None]
    source: str | None = None  # the pooled array of a percentile metric
    q: float | None = None

    def count(self, runs: list[RunSample]) -> int | None:
        """Samples behind a pooled percentile (None for other metrics)."""
        return None if self.source is None else int(sum(np.isfinite(r.arrays[self.source]).sum() for r in runs))

    def refused(self, runs: list[RunSample]) -> bool:
        n = self.count(runs)  # set with q: a percentile is pooled from `source`
        return self.q is not None and n is not None and not enough_for(n, self.q)


def _pooled(source: str, q: float | None) -> Callable[[list[RunSample]], float | None]:
    def stat(runs: list[RunSample]) -> float | None:
        x = np.concatenate([r.arrays[source] for r in runs])
        x = x[np.isfinite(x)]
        if not x.size:
            return None
        return float(x.mean()) if q is None else float(np.percentile(x, q))

    return stat


def _fraction(num: str, den: str) -> Callable[[list[RunSample]], float | None]:
    def stat(runs):
        d = sum(r.scalars[den] or 0 for r in runs)
        return sum(r.scalars[num] or 0 for r in runs) / d if d else None

    return stat


def _mean(key: str) -> Callable[[list[RunSample]], float | None]:
    def stat(runs):
        vals = [r.scalars[key] for r in runs if r.scalars[key] is not None]
        return float(np.mean(vals)) if vals else None

    return stat


def _reached(key: str) -> Callable[[list[RunSample]], float | None]:
    """Mean per run of a time to accuracy, only when every run reached the target (a run that did
    not has no time; averaging the others would favour the variant that failed more often)."""

    def stat(runs):
        vals = [r.scalars[key] for r in runs]
        return float(np.mean(vals)) if vals and all(v is not None for v in vals) else None

    return stat


def _pct(key: str, label: str, source: str, q: float, unit_label: str) -> PooledMetric:
    return PooledMetric(key, f"{label} (ms)" if unit_label else label, "time", "lower", _pooled(source, q), source, q)


METRICS = (
    _pct("mct_p50", "MCT p50", "mct", 50, "ms"),
    _pct("mct_p90", "MCT p90", "mct", 90, "ms"),
    _pct("mct_p99", "MCT p99", "mct", 99, "ms"),
    _pct("mct_p999", "MCT p99.9", "mct", 99.9, "ms"),
    PooledMetric("iteration_mean", "iteration mean (ms)", "time", "lower", _pooled("iteration", None), None),
    _pct("iteration_p50", "iteration p50", "iteration", 50, "ms"),
    _pct("iteration_p90", "iteration p90", "iteration", 90, "ms"),
    _pct("iteration_p99", "iteration p99", "iteration", 99, "ms"),
    _pct("comm_p50", "communication p50", "comm", 50, "ms"),
    _pct("comm_p99", "communication p99", "comm", 99, "ms"),
    _pct("rank_iteration_p50", "iteration p50, pooled over ranks", "rank_iteration", 50, "ms"),
    _pct("rank_iteration_p90", "iteration p90, pooled over ranks", "rank_iteration", 90, "ms"),
    _pct("rank_iteration_p99", "iteration p99, pooled over ranks", "rank_iteration", 99, "ms"),
    _pct("rank_comm_p50", "communication (all-reduce) p50, pooled over ranks", "rank_comm", 50, "ms"),
    PooledMetric("training_wall_s", "training wall time per run (s)", "time", "lower", _mean("training_wall_s")),
    PooledMetric(
        "tta_s",
        "time to target accuracy (s, mean per run; every run must reach it)",
        "time",
        "lower",
        _reached("tta_s"),
    ),
    PooledMetric(
        "tta_iterations", "iterations to target accuracy (mean per run)", "count", "lower", _reached("tta_iterations")
    ),
    PooledMetric("final_accuracy", "final test accuracy (mean per run)", "count", "higher", _mean("final_accuracy")),
    PooledMetric("lost_fraction", "lost packet fraction", "count", "lower", _fraction("lost_pkts", "pkts")),
    PooledMetric("retx_fraction", "retransmitted fraction", "count", "lower", _fraction("retx_pkts", "pkts")),
    PooledMetric("forced", "forced completions per run", "count", "lower", _mean("forced")),
    PooledMetric("protected_lost", "protected packets lost per run", "count", "lower", _mean("protected_lost")),
    PooledMetric("early_drop_pkts", "switch early drops per run", "count", "lower", _mean("early_drop_pkts")),
    PooledMetric("tail_drop_pkts", "switch tail drops per run", "count", "lower", _mean("tail_drop_pkts")),
)
TERMINAL_METRICS = (
    "mct_p50",
    "mct_p99",
    "mct_p999",
    "iteration_p50",
    "iteration_p90",
    "iteration_p99",
    "rank_iteration_p99",
    "tta_s",
    "final_accuracy",
    "lost_fraction",
    "retx_fraction",
    "forced",
    "early_drop_pkts",
    "tail_drop_pkts",
)
HEADLINE_METRICS = (
    "mct_p99",
    "mct_p999",
    "iteration_p50",
    "iteration_p99",
    "rank_iteration_p99",
    "tta_s",
    "final_accuracy",
)
# where the variants' messages differ (another collective or scheduler): no per-message headline
UNLIKE_HEADLINE_METRICS = (
    "rank_iteration_p50",
    "rank_iteration_p90",
    "rank_iteration_p99",
    "rank_comm_p50",
    "iteration_p50",
    "tta_s",
    "final_accuracy",
)
UNLIKE_TERMINAL_METRICS = ("rank_iteration_p50", "rank_iteration_p90", "rank_comm_p50") + tuple(
    k for k in TERMINAL_METRICS if not k.startswith("mct_")
)


def not_compared(m: PooledMetric, runs: list[RunSample]) -> dict:
    return {
        "point": None,
        "ci95": None,
        "n_pairs": len(runs),
        "verdict": "not compared (the variants' messages differ)",
        "per_pair": None,
    }


# --- the comparison ------------------------------------------------------------------------------------


def variant_values(m: PooledMetric, runs: list[RunSample]) -> dict:
    """A variant's pooled value of a metric, its sample count, and the spread of its runs."""
    n = m.count(runs)
    if m.refused(runs):
        assert m.q is not None  # only a percentile is refused
        return {"value": None, "n": n, "too_few": min_samples(m.q), "per_run": None}
    per_run = []
    for r in runs:
        per_run.append(None if m.refused([r]) else m.stat([r]))
    return {"value": m.stat(runs), "n": n, "too_few": None, "per_run": per_run}


def ratio_entry(m: PooledMetric, base: list[RunSample], runs: list[RunSample]) -> dict:
    """compare.json `ratios[metric]`: point, ci95, n_pairs, verdict, and the per-pair ratios."""
    if m.refused(base) or m.refused(runs):
        nb, nr = m.count(base), m.count(runs)
        assert m.q is not None and nb is not None and nr is not None  # only a pooled percentile is refused
        n = min(nb, nr)
        return {
            "point": None,
            "ci95": None,
            "n_pairs": len(runs),
            "verdict": f"too few samples (n={n:,} < {min_samples(m.q):,})",
            "per_pair": None,
        }
    ci = paired_ratio(base, runs, m.stat)
    per_pair = []
    for a, b in zip(base, runs):
        va, vb = variant_values(m, [a])["value"], variant_values(m, [b])["value"]
        per_pair.append(vb / va if va and vb is not None else None)
    geo = geometric_mean_ratio(per_pair)
    return {
        **ci.as_dict(),
        "verdict": verdict(ci, m.kind),
        "per_pair": per_pair,
        "per_pair_geomean": {"point": geo.point, "ci95": list(geo.ci95) if geo.ci95 else None, "n_pairs": geo.n_pairs},
    }


def pair_runs(groups: dict[str, list[tuple[int, pathlib.Path]]], series: str = "") -> tuple[list[int], list[str]]:
    """Repeat indices present in every variant, and a note for each left out."""
    sets = {name: {i for i, _ in reps} for name, reps in groups.items()}
    common = sorted(set.intersection(*sets.values()))
    where = f"{series}/" if series else ""
    notes = [
        f"{where}{name}: rep{i} has no partner in every variant (left out)"
        for name, s in sets.items()
        for i in sorted(s - set(common))
    ]
    return common, notes


def compare_data(
    names: list[str], samples: dict[str, list[RunSample]], notes: list[str], metrics: tuple = METRICS
) -> dict:
    base = samples[names[0]]
    differ = message_differences([samples[n][0].config for n in names])
    series = list(dict.fromkeys(r.series for r in base))
    pooled = len(series) > 1
    variants = []
    for name in names:
        runs = samples[name]
        entry = {
            "name": name,
            "runs": [
                {
                    "rep": r.rep,
                    "series": r.series,
                    "pair": r.pair_label(pooled),
                    "seed": r.seed,
                    "dir": str(r.path),
                    "kept_up": r.kept_up,
                    "keep_up_findings": r.findings,
                    "protected_lost": r.scalars["protected_lost"],
                    "problems": r.problems,
                }
                for r in runs
            ],
            "values": {m.key: variant_values(m, runs) for m in metrics},
        }
        if name != names[0]:
            entry["ratios"] = {
                m.key: not_compared(m, runs) if differ and m.source == "mct" else ratio_entry(m, base, runs)
                for m in metrics
            }
        variants.append(entry)
    return {
        "kind": "repeats",
        "baseline": names[0],
        "messages_differ": differ,
        "n_pairs": len(base),
        "pairs": [r.rep for r in base],
        "series": series,
        "pair_series": [r.series for r in base],
        "pair_labels": [r.pair_label(pooled) for r in base],
        "seeds": [r.seed for r in base],
        "method": METHOD_TEXT,
        "confidence": CONFIDENCE,
        "resamples": RESAMPLES,
        "min_pairs": MIN_PAIRS,
        "percentile_method": PERCENTILE_METHOD_TEXT,
        "min_samples_rule": MIN_SAMPLES_RULE,
        "notes": notes,
        "metrics": [{"key": m.key, "label": m.label, "kind": m.kind, "better": m.better} for m in metrics],
        "variants": variants,
        # the second variant's ratios at the top, the common two-variant case
        "ratios": variants[1]["ratios"] if len(variants) > 1 else {},
    }


def _value_text(v: dict) -> str:
    if v["too_few"]:
        return f"n={v['n']:,}<{v['too_few']:,}"
    text = "–" if v["value"] is None else (f"{v['value']:.4g}" if isinstance(v["value"], float) else fmt(v["value"]))
    return text + (f" (n={v['n']:,})" if v["n"] is not None else "")


def _ratio_text(r: dict) -> tuple[str, str]:
    point = "–" if r["point"] is None else f"{r['point']:.3g}×"
    ci = "–" if r["ci95"] is None else f"{r['ci95'][0]:.3g}–{r['ci95'][1]:.3g}"
    return point, ci


def table_rows(data: dict, keys=None) -> tuple[list[str], list[list[str]]]:
    names = [v["name"] for v in data["variants"]]
    labels = {m["key"]: m["label"] for m in data["metrics"]}
    header = ["metric"] + names
    for n in names[1:]:  # with several variants each one's columns are named (a table row is a dict by header)
        tag = f" ({n})" if len(names) > 2 else ""
        header += [f"{n} ÷ {names[0]}", f"95% CI{tag}", f"verdict{tag}"]
    rows = []
    for k in keys or [m["key"] for m in data["metrics"]]:
        row = [labels[k]] + [_value_text(v["values"][k]) for v in data["variants"]]
        for v in data["variants"][1:]:
            r = v["ratios"][k]
            row += [*_ratio_text(r), r["verdict"]]
        rows.append(row)
    return header, rows


def verdict_lines(data: dict, keys: tuple[str, ...] = HEADLINE_METRICS) -> list[str]:
    """One sentence per headline metric (`keys`) and variant; "no significant difference" is
    said, not left to a ratio."""
    labels = {m["key"]: m["label"] for m in data["metrics"]}
    out = []
    if data.get("messages_differ"):
        out.append(
            f"MCT is not compared: the variants' messages differ ({', '.join(data['messages_differ'])}); "
            "iteration and communication time pooled over ranks are"
        )
    for v in data["variants"][1:]:
        for k in UNLIKE_HEADLINE_METRICS if data.get("messages_differ") and keys == HEADLINE_METRICS else keys:
            r = v["ratios"][k]
            what = f"{v['name']} vs {data['baseline']}, {labels[k]}"
            if r["point"] is None or r["ci95"] is None:
                out.append(f"{what}: {r['verdict']}")
            elif r["verdict"] == "no significant difference":
                out.append(
                    f"{what}: no significant difference (ratio {r['point']:.3g}, 95% CI "
                    f"{r['ci95'][0]:.3g}–{r['ci95'][1]:.3g}, {r['n_pairs']} pairs)"
                )
            else:
                out.append(
                    f"{what}: {r['verdict']}, {r['point']:.3g}× (95% CI {r['ci95'][0]:.3g}–"
                    f"{r['ci95'][1]:.3g}, {r['n_pairs']} pairs)"
                )
            geo = r.get("per_pair_geomean") or {}
            if geo.get("ci95"):
                out[-1] += f"; per-pair geometric mean {geo['point']:.3g}× ({geo['ci95'][0]:.3g}–{geo['ci95'][1]:.3g})"
    return out


def keepup_line(name: str, bad: list[dict], n_runs: int) -> str:
    """One line for a variant's runs (compare.json rows) that did not keep up."""
    return runs_keepup_line(name, [(r["pair"], r["keep_up_findings"]) for r in bad], n_runs)


def keepup_table(doc: Doc, labels: list[str], runs: list[tuple[list[str], list[dict]]]) -> None:
    """A comparison's section of every keep-up finding of its runs; `runs` holds (the run's cells
    under `labels`, its findings), each run's furthest past its limit first."""
    rows = [[*cells, *row] for cells, findings in runs for row in findings_rows(findings)]
    if rows:
        doc.h("Did the emulation keep up?")
        doc.p(
            "Each figure past its limit (dlcp/reporting/keepup_check.py; each run's report says it in words). "
            "A run that did not keep up measured the machine too."
        )
        doc.table([*labels, *FINDINGS_HEADER], rows)


def build_doc(data: dict, samples: dict[str, list[RunSample]]) -> Doc:
    names = [v["name"] for v in data["variants"]]
    doc = Doc(f"DLCP comparison over {data['n_pairs']} pairs: {' vs '.join(names)} (baseline {data['baseline']})")
    doc.bullets(verdict_lines(data))
    for v in data["variants"]:
        bad = [r for r in v["runs"] if not r["kept_up"]]
        if bad:
            doc.warn(keepup_line(v["name"], bad, len(v["runs"])) + " (the table under 'Did the emulation keep up?')")
        lost = [r for r in v["runs"] if r["protected_lost"]]
        if lost:
            doc.warn(
                f"{v['name']}: protected packets lost in {len(lost)} run(s) (must be 0): "
                + ", ".join(f"{r['pair']}: {r['protected_lost']}" for r in lost)
            )
    if len(data["series"]) > 1:
        runs_text = (
            f"Each variant ran {data['n_pairs']} times, in pairs with the baseline, over {len(data['series'])} "
            "series pooled here (each a `dlcp run --repeat`: rep i of a series is one pair, its runs "
            "interleaved with the same seed; pairs of different series are different pairs even where their "
            "seeds are the same). "
        )
    else:
        runs_text = (
            f"Each variant ran {data['n_pairs']} times, in pairs with the baseline (pair i: seed "
            f"{data['seeds'][0]} + i - 1, the same for every variant, runs interleaved a1 b1 a2 b2 ...). "
        )
    doc.p(
        runs_text + "Values pool every run of a variant: "
        "percentiles over all their samples after warm-up (n = samples), fractions as sums, counts and accuracy "
        f"as means per run. Confidence interval: {data['method']} Verdict: faster / slower (lower / higher) when "
        "the interval lies wholly below / above 1, otherwise no significant difference."
    )
    header, rows = table_rows(data)
    doc.table(header, rows)
    doc.h("Per pair")
    keys = ("mct_p99", "iteration_p50", "iteration_mean", "final_accuracy", "lost_fraction")
    labels = {m["key"]: m["label"] for m in data["metrics"]}
    for v in data["variants"][1:]:
        doc.p(
            f"{v['name']} ÷ {data['baseline']} in each pair (a run's own percentile only where it has enough "
            "samples on its own)."
        )
        doc.table(
            ["pair", "seed"] + [labels[k] for k in keys],
            [
                [label, str(seed)]
                + [
                    "–" if (pp := v["ratios"][k]["per_pair"]) is None or pp[i] is None else f"{pp[i]:.3g}×"
                    for k in keys
                ]
                for i, (label, seed) in enumerate(zip(data["pair_labels"], data["seeds"]))
            ],
        )
    cdf = plots.mct_cdf(
        {n: np.concatenate([r.arrays["mct"] for r in samples[n]]) * 1e3 for n in names},
        "CDF of MCT, every run of a variant pooled (after warm-up)",
    )
    doc.image(Image("plots/compare_mct_cdf.png", "pooled MCT CDFs", plots.png_bytes(cdf)) if cdf is not None else None)
    curves = plots.training_by_variant(
        {n: [r.curves for r in samples[n] if r.curves is not None] for n in names}, samples[names[0]][0].target
    )
    doc.image(
        Image(
            "plots/compare_training.png", "test accuracy over time, every run of each variant", plots.png_bytes(curves)
        )
        if curves is not None
        else None
    )
    doc.h(f"The first pair side by side ({data['pair_labels'][0]})")
    doc.p(
        "Each variant's run of the first pair: its switch drops, iteration times and queue timeline. Every run "
        "has its own report.html (directories below)."
    )
    side_by_side_sections(doc, names, [undilated(load_run(samples[n][0].path, n)) for n in names])
    doc.h("Runs")
    doc.table(
        ["variant", "pair", "seed", "kept up", "directory"],
        [
            [v["name"], r["pair"], str(r["seed"]), "yes" if r["kept_up"] else "NO", r["dir"]]
            for v in data["variants"]
            for r in v["runs"]
        ],
    )
    keepup_table(
        doc,
        ["variant", "pair"],
        [([v["name"], r["pair"]], r["keep_up_findings"]) for v in data["variants"] for r in v["runs"]],
    )
    if data["notes"]:
        doc.bullets(data["notes"])
    doc.p(f"Percentiles: {PERCENTILE_METHOD_TEXT}; {MIN_SAMPLES_RULE}; n=350<1,000 marks a refused one.")
    return doc


# --- several jobs ([[jobs]]): per job, and the cluster's ------------------------------------------------

# A job's iteration is its slowest worker's; a run of a few iterations has too few of those for a
# percentile, so the iteration pooled over the job's ranks stands beside it (ranks.py).
JOB_HEADLINE = ("iteration_p50", "rank_iteration_p50", "iteration_p99", "mct_p99", "jct_s")
JOB_TABLE = (
    "iteration_mean",
    "iteration_p50",
    "iteration_p90",
    "iteration_p99",
    "rank_iteration_p50",
    "rank_iteration_p90",
    "rank_iteration_p99",
    "comm_p50",
    "comm_p99",
    "rank_comm_p50",
    "mct_p50",
    "mct_p99",
    "jct_s",
    "lost_fraction",
    "forced",
)
CLUSTER_KEYS = ("mean_jct_s", "tail_jct_s", "makespan_s")


def _job_metrics():
    jct = PooledMetric("jct_s", "job completion time per run (s)", "time", "lower", _mean("jct_s"))
    return (*METRICS, jct)


def _cluster_metrics():
    return (
        PooledMetric("mean_jct_s", "mean JCT over the jobs per run (s)", "time", "lower", _mean("mean_jct_s")),
        PooledMetric("tail_jct_s", "tail (largest) JCT per run (s)", "time", "lower", _mean("tail_jct_s")),
        PooledMetric("makespan_s", "makespan per run (s)", "time", "lower", _mean("makespan_s")),
    )


def compare_jobs(names: list[str], samples: dict, notes: list[str]) -> dict | None:
    """compare.json's `jobs` (per job, as a comparison of its own: every metric per job with its
    95 % interval over the same pairs, and its JCT) and `cluster` (mean and tail JCT, makespan);
    None when the runs are not of several jobs. The runs of `samples` (repeats.RunSample per
    variant) are loaded again, per job."""
    first = samples[names[0]][0]
    if not jobs_of(load_run(first.path)):
        return None
    per_job: dict[str, dict[str, list]] = {}
    cluster: dict[str, list] = {n: [] for n in names}
    for name in names:
        for r in samples[name]:
            run = undilated(load_run(r.path))
            jobs = jobs_of(run)
            rows, totals = completions(run, jobs)
            for job, row in zip(jobs, rows):
                js = run_sample(r.rep, r.path, job_run(run, job), r.series)
                js.scalars["jct_s"] = row["jct_s"]
                per_job.setdefault(job.name, {n: [] for n in names})[name].append(js)
            cluster[name].append(dataclasses.replace(r, scalars={**r.scalars, **{k: totals[k] for k in CLUSTER_KEYS}}))
    metrics = _job_metrics()
    return {
        "jobs": {job: compare_data(names, by_variant, notes, metrics) for job, by_variant in per_job.items()},
        "cluster": compare_data(names, cluster, notes, _cluster_metrics()),
    }


def jobs_first(doc: Doc, data: dict) -> Doc:
    """The comparison's document with the jobs first: per job its verdicts and table (what the
    favoured job gained and what the others paid side by side), the cluster's, then `doc` (every
    job pooled)."""
    out = Doc(doc.title.replace("DLCP comparison", f"DLCP comparison of {len(data['jobs'])} jobs"), figures=doc.figures)
    out.p(
        "Several jobs on one fabric: each job compared on its own runs' records (its workers, its iterations, "
        "its messages), with the interval over the same pairs; then the cluster's completion times; then every "
        "job pooled (below: there an iteration is the slowest worker of any job)."
    )
    for job, d in data["jobs"].items():
        out.h(f"Job {job}")
        out.bullets(verdict_lines(d, JOB_HEADLINE))
        header, rows = table_rows(d, JOB_TABLE)
        out.table(header, rows)
    out.h("Cluster")
    out.bullets(verdict_lines(data["cluster"], CLUSTER_KEYS))
    header, rows = table_rows(data["cluster"], CLUSTER_KEYS)
    out.table(header, rows)
    out.h("Every job pooled")
    out.blocks += doc.blocks
    return out


def print_jobs(data: dict) -> None:
    """The terminal's part of a comparison of several jobs: per job its table and verdicts, then
    the cluster's."""

    for job, d in data["jobs"].items():
        print(f"job {job}:")
        header, rows = table_rows(d, JOB_HEADLINE)
        print(format_table([dict(zip(header, r)) for r in rows]))
        for line in verdict_lines(d, JOB_HEADLINE):
            print(f"  {line}")
    print("cluster:")
    header, rows = table_rows(data["cluster"], CLUSTER_KEYS)
    print(format_table([dict(zip(header, r)) for r in rows]))
    for line in verdict_lines(data["cluster"], CLUSTER_KEYS):
        print(f"  {line}")


def load_groups(
    paths: list[pathlib.Path], names: list[str], series: str = ""
) -> tuple[dict[str, list[RunSample]], list[str]]:
    """The paired runs of repeat groups (one per variant, in `names` order) and notes on what was left out."""
    groups = {name: repeat_dirs(p) for name, p in zip(names, paths)}
    common, notes = pair_runs(groups, series)
    samples = {name: [sample_of(i, p, series) for i, p in reps if i in common] for name, reps in groups.items()}
    return samples, notes


def compare_repeats(paths: list[pathlib.Path], names: list[str], out: pathlib.Path, echo: bool = False) -> pathlib.Path:
    """Compare repeat groups (the first is the baseline); write compare.json/.md/.html into `out`."""
    series = {p.resolve().parent.name for p in paths}
    samples, notes = load_groups(paths, names, series.pop() if len(series) == 1 else "")
    return write_comparison(names, samples, notes, out, echo)


def write_comparison(
    names: list[str], samples: dict[str, list[RunSample]], notes: list[str], out: pathlib.Path, echo: bool = False
) -> pathlib.Path:
    """compare.json/.md/.html of paired runs into `out` (and the terminal table with echo); compare.html's path."""
    if not samples[names[0]]:
        raise ReportInputError("the repeat groups have no repeat index in common")
    data = compare_data(names, samples, notes)
    doc = build_doc(data, samples)
    jobs = compare_jobs(names, samples, notes)  # several jobs ([[jobs]]): per job, and the cluster's
    if jobs is not None:
        data.update(jobs)
        doc = jobs_first(doc, data)
    written = write_outputs(out, doc, data, json_name="compare.json", stem="compare")
    if echo:
        over = f" from {len(data['series'])} series" if len(data["series"]) > 1 else ""
        print(
            f"baseline: {data['baseline']}; {data['n_pairs']} pairs{over}; ratio = variant / baseline, 95% CI by "
            "bootstrap over pairs"
        )
        header, rows = table_rows(data, UNLIKE_TERMINAL_METRICS if data["messages_differ"] else TERMINAL_METRICS)
        print(format_table([dict(zip(header, r)) for r in rows]))
        for line in verdict_lines(data):
            print(line)
        if jobs is not None:
            print_jobs(data)
        for v in data["variants"]:
            bad = [r for r in v["runs"] if not r["kept_up"]]
            if bad:
                print(f"WARNING: {keepup_line(v['name'], bad, len(v['runs']))} (see compare.md)")
    return written["html"]
