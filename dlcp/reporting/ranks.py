"""Iteration and all-reduce time pooled over ranks, and when runs' messages can be compared.

Collectives and schedulers change what a message is: a MultiTree transfer is a different thing
from a ring step, a merged MG-WFBP group from a WFBP tensor, so the per-message view (MCT) of two
such runs compares unlike things. What they have in common is the iteration and the time each
rank spends communicating in it. So a comparison whose runs differ in their communication
(`messages_alike`) leads with those, pooled over ranks: every worker's iterations after the
warm-up (16 ranks x 3 iterations = 48 samples), where the slowest-worker series of the summary
has one value per iteration (3, too few for a percentile).

The interval of a single pair of runs comes from a bootstrap over ranks (bootstrap.block_ratio:
each rank's iterations one block): how sure the pooled figure is within these runs, not across
seeds, which `--repeat` pairs measure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dlcp.reporting.bootstrap import MIN_PAIRS, block_ratio, verdict
from dlcp.reporting.load import RunData
from dlcp.reporting.stats import enough_for, min_samples
from dlcp.reporting.steady import after_warmup, undilated

# What a message is made of: two runs whose values of these differ do not send alike messages.
MESSAGE_KEYS = (
    ("comm", "scheduler"),
    ("comm", "collective"),
    ("workload", "mode"),
    ("workload", "workers"),
    ("workload", "layers"),
    ("workload", "profile"),
)


def _get(cfg: dict | None, path: tuple[str, ...]):
    for k in path:
        if not isinstance(cfg, dict):
            return None
        cfg = cfg.get(k)
    return cfg


def _options_of(cfg: dict | None) -> dict:
    """The [comm.<name>] sections of the run's scheduler and collective."""
    comm = (cfg or {}).get("comm") or {}
    return {name: comm.get(name) for name in (comm.get("scheduler"), comm.get("collective")) if name}


def message_differences(configs: list[dict | None]) -> list[str]:
    """The keys whose values differ between the runs and change what a message is ([] when the
    runs' messages are alike, e.g. variants of dlcp.policy)."""
    out = [".".join(p) for p in MESSAGE_KEYS if len({repr(_get(c, p)) for c in configs}) > 1]
    if not out and len({repr(_options_of(c)) for c in configs}) > 1:
        out.append("the scheduler's or collective's options")
    return out


def rank_blocks(run: RunData, column: str = "iteration_us") -> list[np.ndarray]:
    """Per worker, its iterations after the warm-up (ms, the system's time): one block per rank."""
    t = after_warmup(undilated(run).iterations, run.facts.warmup_iterations)
    if not len(t) or column not in t.columns:
        return []
    host, vals = t.col("host"), t.col(column)
    ok = np.isfinite(vals)
    return [vals[ok & (host == h)] / 1e3 for h in sorted(set(host[ok]))]


@dataclass(frozen=True)
class RankMetric:
    key: str
    label: str
    column: str  # the iterations record column
    q: float | None  # percentile, or None for the mean

    def stat(self) -> Callable[[np.ndarray], float | None]:
        q = self.q

        def f(x: np.ndarray) -> float | None:
            if not x.size or (q is not None and not enough_for(x.size, q)):
                return None
            return float(x.mean()) if q is None else float(np.percentile(x, q))

        return f


RANK_METRICS = (
    RankMetric("rank_iteration_p50", "iteration p50, pooled over ranks (ms)", "iteration_us", 50),
    RankMetric("rank_iteration_mean", "iteration mean, pooled over ranks (ms)", "iteration_us", None),
    RankMetric("rank_iteration_p90", "iteration p90, pooled over ranks (ms)", "iteration_us", 90),
    RankMetric("rank_comm_p50", "communication (all-reduce) p50, pooled over ranks (ms)", "comm_us", 50),
)


def rank_value(metric: RankMetric, blocks: list[np.ndarray]) -> dict:
    """A run's pooled value: value (None where refused), samples, ranks."""
    x = np.concatenate(blocks) if blocks else np.array([])
    value = metric.stat()(x)
    refused = metric.q is not None and x.size > 0 and value is None
    return {
        "value": value,
        "n": int(x.size),
        "ranks": len(blocks),
        "too_few": min_samples(metric.q) if refused and metric.q is not None else None,
    }


def rank_ratio(metric: RankMetric, base: list[np.ndarray], run: list[np.ndarray]) -> dict:
    """Ratio run / baseline of a pooled metric, its within-run 95 % interval over ranks, verdict."""
    if not base or not run:
        return {"point": None, "ci95": None, "n_ranks": 0, "verdict": "no iteration records"}
    a, b = rank_value(metric, base), rank_value(metric, run)
    if a["value"] is None or b["value"] is None:
        need = a["too_few"] or b["too_few"]
        why = f"too few samples (n={min(a['n'], b['n']):,} < {need:,})" if need else "no value"
        return {"point": None, "ci95": None, "n_ranks": min(len(base), len(run)), "verdict": why}
    ci = block_ratio(base, run, metric.stat())
    return {
        "point": ci.point,
        "ci95": list(ci.ci95) if ci.ci95 else None,
        "n_ranks": ci.n_pairs,
        "verdict": verdict(ci, "time") if ci.ci95 else f"no interval (fewer than {MIN_PAIRS} ranks)",
    }


def rank_section(runs: list[RunData]) -> dict:
    """compare.json `pooled_over_ranks`: per run its values, per non-baseline run its ratios."""
    blocks = {m.column: [rank_blocks(r, m.column) for r in runs] for m in RANK_METRICS}
    out = []
    for i, run in enumerate(runs):
        entry = {
            "name": run.name,
            "values": {m.key: rank_value(m, blocks[m.column][i]) for m in RANK_METRICS},
        }
        if i:
            entry["ratios"] = {m.key: rank_ratio(m, blocks[m.column][0], blocks[m.column][i]) for m in RANK_METRICS}
        out.append(entry)
    return {
        "metrics": [{"key": m.key, "label": m.label} for m in RANK_METRICS],
        "method": (
            "every worker's iterations after the warm-up pooled; 95 % interval by a bootstrap over ranks "
            "(each rank's iterations one block, the two runs resampled independently): within these runs, "
            "not across seeds (use --repeat for that)"
        ),
        "runs": out,
    }


def verdict_lines(section: dict, baseline: str) -> list[str]:
    """One sentence per run on its iteration p50 and communication p50 pooled over ranks."""
    labels = {m["key"]: m["label"] for m in section["metrics"]}
    lines = []
    for r in section["runs"][1:]:
        for k in ("rank_iteration_p50", "rank_comm_p50"):
            x = r["ratios"][k]
            what = f"{r['name']} vs {baseline}, {labels[k]}"
            if x["point"] is None:
                lines.append(f"{what}: {x['verdict']}")
            elif x["ci95"] is None:
                lines.append(f"{what}: {x['point']:.3g}x, {x['verdict']}")
            else:
                lo, hi = x["ci95"]
                lines.append(
                    f"{what}: {x['verdict']}, {x['point']:.3g}x (95% CI {lo:.3g}-{hi:.3g}, {x['n_ranks']} ranks)"
                )
    return lines
