"""Several runs side by side: every metric per run and its ratio against the first run (the
baseline); compare.json, compare.md, compare.html and plots/compare_*.png in one directory.
Directories of repeated runs (rep1, rep2, ...) are compared over pairs with confidence intervals
instead (dlcp/reporting/repeats.py)."""

from __future__ import annotations

import pathlib
from dataclasses import dataclass

from dlcp.reporting import plots
from dlcp.reporting.keepup_check import runs_keepup_line
from dlcp.reporting.load import NotARunDirectory, ReportInputError, RunData, default_out_dir, load_run
from dlcp.reporting.ranks import message_differences, rank_section
from dlcp.reporting.ranks import verdict_lines as rank_verdict_lines
from dlcp.reporting.render import Doc, fmt
from dlcp.reporting.repeats import compare_repeats, is_repeat_group, keepup_table
from dlcp.reporting.runreport import write_outputs
from dlcp.reporting.series import compare_series, is_series
from dlcp.reporting.side_by_side import image_of, side_by_side_sections
from dlcp.reporting.stats import MIN_SAMPLES_RULE, PERCENTILE_METHOD_TEXT, min_samples, quantile_of, ratio
from dlcp.reporting.steady import undilated
from dlcp.reporting.summarise import iteration_series, steady_sender_rows, summarise, training_curves
from dlcp.reporting.traffic import drops, traffic_section
from dlcp.tables import format_table


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    better: str  # "lower" or "higher": which direction is an improvement
    path: tuple  # keys into the summary


METRICS = (
    Metric("mct_p50_us", "MCT p50 (us)", "lower", ("mct_us", "overall", "p50")),
    Metric("mct_p90_us", "MCT p90 (us)", "lower", ("mct_us", "overall", "p90")),
    Metric("mct_p99_us", "MCT p99 (us)", "lower", ("mct_us", "overall", "p99")),
    Metric("mct_p999_us", "MCT p99.9 (us)", "lower", ("mct_us", "overall", "p999")),
    Metric("mct_max_us", "MCT max (us)", "lower", ("mct_us", "overall", "max")),
    Metric("mct_slowdown_p99", "MCT / ideal, p99", "lower", ("lower_bound", "message", "slowdown", "p99")),
    Metric("iteration_mean_ms", "iteration mean (ms)", "lower", ("iteration", "iteration_ms", "mean")),
    Metric("iteration_p50_ms", "iteration p50 (ms)", "lower", ("iteration", "iteration_ms", "p50")),
    Metric("iteration_p99_ms", "iteration p99 (ms)", "lower", ("iteration", "iteration_ms", "p99")),
    Metric("comm_p50_ms", "communication p50 (ms)", "lower", ("iteration", "comm_ms", "p50")),
    Metric("comm_p99_ms", "communication p99 (ms)", "lower", ("iteration", "comm_ms", "p99")),
    Metric("comm_share", "communication share", "lower", ("iteration", "comm_share")),
    Metric("comm_p50_vs_ideal", "communication p50 / ideal", "lower", ("lower_bound", "iteration", "p50_multiple")),
    Metric("comm_p99_vs_ideal", "communication p99 / ideal", "lower", ("lower_bound", "iteration", "p99_multiple")),
    Metric("final_accuracy", "final test accuracy", "higher", ("training", "final_accuracy")),
    Metric("best_accuracy", "best test accuracy", "higher", ("training", "best_accuracy")),
    Metric("time_to_accuracy_s", "time to target accuracy (s)", "lower", ("training", "time_to_accuracy_s")),
    Metric("training_wall_s", "training wall time (s)", "lower", ("training", "wall_time_s")),
    Metric("lost_fraction", "lost packet fraction", "lower", ("loss", "lost_fraction")),
    Metric("retx_fraction", "retransmitted fraction", "lower", ("loss", "retx_fraction")),
    Metric("forced", "forced completions", "lower", ("loss", "forced")),
    Metric("protected_lost", "protected packets lost", "lower", ("loss", "protected_lost")),
    Metric("early_drop_pkts", "switch early drops (pkts)", "lower", ("switch", "totals", "early_drop_pkts")),
    Metric("tail_drop_pkts", "switch tail drops (pkts)", "lower", ("switch", "totals", "tail_drop_pkts")),
    Metric("ce_marked_pkts", "switch CE marks (pkts)", "lower", ("switch", "ce_marked", "pkts")),
    Metric(
        "gradient_drop_pkts",
        "switch drops of gradient packets",
        "lower",
        ("switch", "traffic", "by_traffic", "gradient", "drop_pkts"),
    ),
    Metric(
        "control_drop_pkts",
        "switch drops of transport control packets",
        "lower",
        ("switch", "traffic", "by_traffic", "control", "drop_pkts"),
    ),
    Metric(
        "background_drop_pkts",
        "switch drops of background packets",
        "lower",
        ("switch", "traffic", "by_traffic", "background", "drop_pkts"),
    ),
)
# What the terminal shows: the headline, compactly, with what the transport and the switch did.
TERMINAL_METRICS = (
    "mct_p50_us",
    "mct_p99_us",
    "mct_p999_us",
    "iteration_p50_ms",
    "iteration_p99_ms",
    "comm_p99_vs_ideal",
    "time_to_accuracy_s",
    "final_accuracy",
    "lost_fraction",
    "retx_fraction",
    "forced",
    "protected_lost",
    "gradient_drop_pkts",
    "control_drop_pkts",
    "background_drop_pkts",
)


def _get(summary: dict, path: tuple):
    for k in path:
        if not isinstance(summary, dict) or k not in summary:
            return None
        summary = summary[k]
    return summary


def run_names(paths: list[pathlib.Path]) -> list[str]:
    """Directory names; runs that share a name get their parent's name in front."""
    names = [p.resolve().name for p in paths]
    return [f"{p.resolve().parent.name}/{n}" if names.count(n) > 1 else n for p, n in zip(paths, names)]


def _refused(summary: dict, path: tuple) -> int | None:
    """The sample count when the metric at `path` is a percentile refused for too few samples."""
    parent = _get(summary, path[:-1])
    if isinstance(parent, dict) and path[-1] in parent.get("too_few", ()):
        return parent.get("count")
    return None


def per_message(key: str) -> bool:
    """Whether a metric is a per-message one (compared only where messages are alike)."""
    return key.startswith("mct_")


def compare_data(runs: list[RunData], summaries: list[dict]) -> dict:
    """The content of compare.json. Where the runs' messages differ (another collective or
    scheduler: dlcp/reporting/ranks.py) the per-message metrics get no ratio, and
    `pooled_over_ranks` (always there) is the comparison to read."""
    base = summaries[0]
    differ = message_differences([r.config for r in runs])
    entries = []
    for run, s in zip(runs, summaries):
        values = {m.key: _get(s, m.path) for m in METRICS}
        too_few = {m.key: n for m in METRICS if (n := _refused(s, m.path)) is not None}
        entries.append(
            {
                "name": run.name,
                "policy": run.policy,
                "dir": str(run.path),
                **values,
                "ratios": {
                    m.key: None if differ and per_message(m.key) else ratio(values[m.key], _get(base, m.path))
                    for m in METRICS
                },
                "too_few": too_few,
                "kept_up": s["keep_up"]["ok"],
                "keep_up_findings": s["keep_up"]["findings"],
                "problems": s["problems"],
            }
        )
    return {
        "baseline": runs[0].name,
        "messages_differ": differ,
        "pooled_over_ranks": rank_section(runs),
        "percentile_method": PERCENTILE_METHOD_TEXT,
        "min_samples_rule": MIN_SAMPLES_RULE,
        "metrics": [{"key": m.key, "label": m.label, "better": m.better} for m in METRICS],
        "runs": entries,
    }


def terminal_table(data: dict, keys: tuple[str, ...] = TERMINAL_METRICS) -> str:
    """Metrics as rows, one column per run plus a ratio column (x baseline) after each non-baseline run."""
    runs = data["runs"]
    labels = {m["key"]: m["label"] for m in data["metrics"]}
    rows = []
    for k in keys:
        row = {"metric": labels[k]}
        for i, r in enumerate(runs):
            row[r["name"]] = _cell(r, k)
            if i:
                rv = r["ratios"][k]
                unlike = data.get("messages_differ") and per_message(k)
                row[f"{r['name']} ÷ {runs[0]['name']}"] = (
                    "– (messages differ)" if unlike else "–" if rv is None else f"{rv:.3g}×"
                )
        rows.append(row)
    return format_table(rows)


def pooled_rows(data: dict) -> tuple[list[str], list[list[str]]]:
    """The pooled-over-ranks table: a row per metric, each run's value, ratio, interval, verdict."""
    sec = data["pooled_over_ranks"]
    runs = sec["runs"]
    header = ["metric"] + [r["name"] for r in runs]
    for r in runs[1:]:
        header += [f"{r['name']} ÷ {runs[0]['name']}", f"95% CI ({r['name']})", f"verdict ({r['name']})"]
    rows = []
    for m in sec["metrics"]:
        row = [m["label"]]
        for r in runs:
            v = r["values"][m["key"]]
            row.append(
                f"n={v['n']:,}<{v['too_few']:,}"
                if v["too_few"]
                else "–"
                if v["value"] is None
                else f"{v['value']:.4g} (n={v['n']:,})"
            )
        for r in runs[1:]:
            x = r["ratios"][m["key"]]
            row += [
                "–" if x["point"] is None else f"{x['point']:.3g}×",
                "–" if not x["ci95"] else f"{x['ci95'][0]:.3g}–{x['ci95'][1]:.3g}",
                x["verdict"],
            ]
        rows.append(row)
    return header, rows


def headline_lines(data: dict) -> list[str]:
    """What the comparison says first: pooled-over-ranks verdicts, and why MCT is not compared."""
    lines = rank_verdict_lines(data["pooled_over_ranks"], data["baseline"])
    if data.get("messages_differ"):
        lines.append(
            f"MCT is not compared: the runs' messages differ ({', '.join(data['messages_differ'])}), "
            "so a message of one is not a message of the other; compare iteration and communication time"
        )
    return lines


def _cell(run_entry: dict, key: str) -> str:
    """A run's value of a metric, or "n<1000" when it is a percentile refused for too few samples."""
    n = run_entry.get("too_few", {}).get(key)
    if n is not None:
        q = next(quantile_of(p) for p in ("p999", "p99", "p90", "p50") if p in key)
        return f"n={n:,}<{min_samples(q):,}"
    return _short(run_entry[key])


def terminal_drops_table(names: list[str], runs: list[RunData]) -> str:
    """Switch drops per priority queue (rows, 7 first) and run (columns), as gradient / other
    packets: what each policy dropped where."""
    traffic = [traffic_section(r.counters, r.config) for r in runs]
    queues = sorted({int(q) for t in traffic for q in t["by_prio"]}, reverse=True)
    rows = []
    for q in queues:
        row = {"switch drops, queue": f"{q}{' (served first)' if q == queues[0] else ''}"}
        for n, t in zip(names, traffic):
            d = t["by_prio"].get(str(q), {})
            grad = drops(d.get("gradient"))
            other = sum(drops(r) for k, r in d.items() if k != "gradient")
            row[f"{n}: gradient / other"] = f"{grad:,} / {other:,}"
        rows.append(row)
    return format_table(rows) if rows else "(no switch counters)"


def _short(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, float) and 0 < abs(v) < 1:
        return f"{v:.4g}"
    return fmt(v, digits=4)


def keepup_line(r: dict) -> str:
    """One line for a run (compare.json row) that did not keep up."""
    return runs_keepup_line(f"run {r['name']}", [(r["name"], r["keep_up_findings"])], 1)


def build_doc(data: dict, runs: list[RunData]) -> Doc:
    names = [r["name"] for r in data["runs"]]
    doc = Doc(f"DLCP comparison: {' vs '.join(names)} (baseline {data['baseline']})")
    doc.p(
        "Each metric per run, and each run's value divided by the baseline's (the first run). "
        "For times, losses and drops a ratio below 1 is better; for accuracy above 1 is better."
    )
    for r in data["runs"]:
        if r["protected_lost"]:
            doc.warn(f"run {r['name']}: {r['protected_lost']} protected packet(s) lost (must be 0).")
        if not r["kept_up"]:
            doc.warn(keepup_line(r) + " (the table under 'Did the emulation keep up?')")
        if r["problems"]:
            doc.warn(
                f"run {r['name']}: {len(r['problems'])} data problem(s): "
                + "; ".join(r["problems"][:3])
                + (" ..." if len(r["problems"]) > 3 else "")
            )
    doc.h("Iteration and communication time, pooled over ranks")
    doc.bullets(headline_lines(data))
    doc.p(f"Pooled: {data['pooled_over_ranks']['method']}.")
    p_header, p_rows = pooled_rows(data)
    doc.table(p_header, p_rows)
    doc.h("Every metric")
    header = (
        ["metric"]
        + [n if n == r["policy"] else f"{n} ({r['policy'] or '?'})" for n, r in zip(names, data["runs"])]
        + [f"{n} ÷ {names[0]}" for n in names[1:]]
    )
    rows = []
    for m in data["metrics"]:
        vals = [_cell(r, m["key"]) for r in data["runs"]]
        rats = [r["ratios"][m["key"]] for r in data["runs"][1:]]
        unlike = bool(data.get("messages_differ")) and per_message(m["key"])
        rows.append(
            [m["label"]] + vals + ["– (messages differ)" if unlike else "–" if x is None else f"{x:.3g}×" for x in rats]
        )
    doc.table(header, rows)

    doc.h("Message completion time")
    cdf = plots.mct_cdf(
        {n: steady_sender_rows(run).col("mct_us") for n, run in zip(names, runs)},
        "CDF of MCT per run (sender rows, after warm-up)",
    )
    doc.image(image_of(cdf, "compare_mct_cdf", "overlaid MCT CDFs"))
    bars = plots.compare_bars(
        names,
        {
            q: [None if r[k] is None else r[k] / 1e3 for r in data["runs"]]
            for q, k in (("p50", "mct_p50_us"), ("p99", "mct_p99_us"), ("p99.9", "mct_p999_us"))
        },
        "MCT (ms)",
        "MCT percentiles per run",
    )
    doc.image(image_of(bars, "compare_mct_percentiles", "MCT percentiles per run"))
    doc.h("Iteration time")
    doc.image(
        image_of(
            plots.iteration_times(
                {n: iteration_series(run) for n, run in zip(names, runs)}, "Iteration time per run (slowest worker)"
            ),
            "compare_iteration_time",
            "iteration time per run",
        )
    )
    doc.h("Training")
    doc.image(
        image_of(
            plots.training({n: training_curves(run) for n, run in zip(names, runs)}),
            "compare_training",
            "overlaid loss and accuracy curves",
        )
    )
    side_by_side_sections(doc, names, runs)
    doc.h("Runs")
    doc.table(
        ["run", "policy", "directory", "report"],
        [
            [n, r["policy"] or "?", r["dir"], str(pathlib.Path(r["dir"]) / "report.html")]
            for n, r in zip(names, data["runs"])
        ],
    )
    keepup_table(doc, ["run"], [([r["name"]], r["keep_up_findings"]) for r in data["runs"]])
    doc.p(
        f"Percentiles: {PERCENTILE_METHOD_TEXT}; {MIN_SAMPLES_RULE}. A refused percentile shows its sample "
        "count and the count it needs (n=144<1,000)."
    )
    return doc


def compare_runs(
    run_dirs: list[str | pathlib.Path],
    out_dir: str | pathlib.Path | None = None,
    echo: bool = False,
    baseline: str | None = None,
) -> pathlib.Path:
    """Compare runs (the first is the baseline); write compare.json, compare.md, compare.html and
    plots/compare_*.png into out_dir (default: see `default_out_dir`) and return compare.html's path.
    With echo, print the compact table to stdout. Run directories are only read.

    Results directories of `dlcp run --repeat` (series) are compared variant against variant over
    the pairs of all of them (dlcp/reporting/series.py); `baseline` names the baseline variant."""
    paths = [pathlib.Path(p) for p in run_dirs]
    if not paths:
        raise ReportInputError("compare: no run directories given")
    if any(is_series(p) for p in paths):
        return compare_series(paths, pathlib.Path(out_dir) if out_dir is not None else None, baseline, echo)
    if baseline is not None:
        raise ReportInputError(
            "--baseline picks a variant of results directories of repeated runs; among run "
            "directories the first is the baseline"
        )
    if len(paths) < 2:
        raise ReportInputError(
            "give at least two run directories (the first is the baseline), or results directories of repeated runs"
        )
    groups = [is_repeat_group(p) for p in paths]
    if any(groups):
        if not all(groups):
            bad = next(p for p, g in zip(paths, groups) if not g)
            raise NotARunDirectory(
                f"{bad}: not a directory of repeated runs (rep1, rep2, ...) like the others; "
                "compare repeats with repeats, single runs with single runs"
            )
        out = pathlib.Path(out_dir) if out_dir is not None else default_out_dir(paths)
        return compare_repeats(paths, run_names(paths), out, echo=echo)
    runs = [undilated(load_run(p, name)) for p, name in zip(paths, run_names(paths))]
    summaries = [summarise(r) for r in runs]
    data = compare_data(runs, summaries)
    out = pathlib.Path(out_dir) if out_dir is not None else default_out_dir(paths)
    written = write_outputs(out, build_doc(data, runs), data, json_name="compare.json", stem="compare")
    if echo:
        print(f"baseline: {data['baseline']}; ratio = run / baseline")
        p_header, p_rows = pooled_rows(data)
        print(format_table([dict(zip(p_header, r)) for r in p_rows]))
        for line in headline_lines(data):
            print(line)
        print(terminal_table(data))
        print(terminal_drops_table([r["name"] for r in data["runs"]], runs))
        for r in data["runs"]:
            if r["protected_lost"]:
                print(f"WARNING: run {r['name']}: {r['protected_lost']} protected packet(s) lost")
            if not r["kept_up"]:
                print(f"WARNING: {keepup_line(r)} (see compare.md)")
            if r["problems"]:
                print(f"note: run {r['name']}: {len(r['problems'])} data problem(s), see compare.md")
    return written["html"]
