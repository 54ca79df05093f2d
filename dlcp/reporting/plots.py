"""Report figures (matplotlib, Agg backend: no display needed). Each function returns a Figure, or
None when there is nothing to draw; `png_bytes` renders one and closes it."""

from __future__ import annotations

import io
from collections.abc import Mapping

import matplotlib

matplotlib.use("Agg")  # before pyplot: reports run headless (CI, over ssh, as any user)
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

from dlcp.reporting.stats import drawable_ecdf
from dlcp.reporting.summarise import IterationSeries, TrainingCurves
from dlcp.reporting.traffic import QueueTimeline

DPI = 110
COLORS = plt.rcParams["axes.prop_cycle"].by_key()["color"]


def png_bytes(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _style(ax, title: str, xlabel: str, ylabel: str) -> None:
    ax.set_title(title, fontsize=11)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", alpha=0.12)


def mct_cdf(groups: dict[str, np.ndarray], title: str, marks: dict[str, float] | None = None):
    """Empirical CDFs of MCT in ms (log x), one line per group; the first group drawn bold.
    `marks`: labelled vertical lines (ms), e.g. the ideal time of the median message."""
    groups = {k: v for k, v in groups.items() if np.isfinite(np.asarray(v, float)).any()}
    if not groups:
        return None
    fig, (ax, tail) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [3, 2]})
    for i, (label, us) in enumerate(groups.items()):
        x, y = drawable_ecdf(np.asarray(us, float) / 1e3)
        n = int(np.isfinite(np.asarray(us, float)).sum())
        x = np.maximum(x, 1e-3)  # log axis: clamp zero durations
        kw = {"lw": 2.2 if i == 0 else 1.3, "color": COLORS[i % len(COLORS)], "label": f"{label} (n={n})"}
        ax.step(x, y, where="post", **kw)
        # the tail panel: 1 - CDF on log-log axes shows p99..p99.9 where the plain CDF is flat
        tail.step(x, np.maximum(1 - y + 1 / n, 1 / n), where="post", **kw)
    for j, (label, ms) in enumerate((marks or {}).items()):
        for a in (ax, tail):
            a.axvline(ms, color="k", ls=":" if j else "--", lw=1)
        ax.annotate(label, (ms, 0.02 + 0.08 * j), xytext=(4, 0), textcoords="offset points", fontsize=8)
    ax.set_xscale("log")
    _style(ax, title, "message completion time (ms, log)", "fraction of messages ≤ x")
    ax.set_ylim(0, 1.01)
    for q in (0.5, 0.99):
        ax.axhline(q, color="grey", lw=0.6, ls="-.")
    tail.set_xscale("log")
    tail.set_yscale("log")
    _style(tail, "tail: fraction of messages slower (log-log)", "message completion time (ms, log)", "fraction ≥ x")
    tail.axhline(0.01, color="grey", lw=0.6, ls="-.")
    tail.axhline(0.001, color="grey", lw=0.6, ls="-.")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def layer_bars(by_layer: dict[str, dict]):
    """The tail MCT per layer group as bars (p99, or p90 where the groups have too few samples for
    a p99), p50 as dots."""
    for tail in ("p99", "p90"):
        keys = [k for k, d in by_layer.items() if d.get(tail) is not None and d.get("p50") is not None]
        if keys:
            break
    else:
        return None
    p99 = np.array([by_layer[k][tail] for k in keys]) / 1e3
    p50 = np.array([by_layer[k]["p50"] for k in keys]) / 1e3
    fig, ax = plt.subplots(figsize=(min(12, max(6, 0.35 * len(keys) + 2)), 3.8))
    x = np.arange(len(keys))
    ax.bar(x, p99, color=COLORS[0], alpha=0.85, label=tail)
    ax.plot(x, p50, "o", ms=4 if len(keys) > 30 else 6, color=COLORS[1], label="p50")
    step = max(1, int(np.ceil(len(keys) / 40)))  # at most ~40 labels stay legible
    long_labels = any(len(k) > 3 for k in keys)
    ax.set_xticks(x[::step], keys[::step], rotation=90 if long_labels or len(keys) > 20 else 0, fontsize=8)
    _style(ax, "MCT by layer (0 = input side)", "layer (or layer range) of the message", "MCT (ms)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def iteration_times(series: dict[str, IterationSeries], title: str = "Iteration time"):
    """Iteration time per iteration (slowest worker, bold) with its communication part (dashed);
    for a single run also every worker (thin)."""
    series = {k: s for k, s in series.items() if s.iters.size}
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(9, 3.8))
    for i, (label, s) in enumerate(series.items()):
        c = COLORS[i % len(COLORS)]
        if len(series) == 1:
            for j, (_host, (it, us)) in enumerate(s.per_host.items()):
                ax.plot(it, us / 1e3, color="grey", lw=0.7, alpha=0.6, label="each worker" if j == 0 else None)
        name = f"{label}: " if len(series) > 1 else ""
        ax.plot(
            s.iters,
            s.iteration_us / 1e3,
            "-o" if s.iters.size <= 60 else "-",
            ms=3,
            lw=1.8,
            color=c,
            label=f"{name}iteration (slowest worker)",
        )
        if np.isfinite(s.comm_us).any():
            ax.plot(s.iters, s.comm_us / 1e3, "--", lw=1.2, color=c, label=f"{name}communication")
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    _style(ax, title, "iteration", "time (ms)")
    ax.legend(fontsize=8, ncol=2 if len(series) > 1 else 1)
    fig.tight_layout()
    return fig


def training(curves: dict[str, TrainingCurves]):
    """Training loss and test accuracy against iteration and against wall time (2 x 2)."""
    curves = {k: c for k, c in curves.items() if np.isfinite(c.train_loss).any() or np.isfinite(c.test_accuracy).any()}
    if not curves:
        return None
    fig, axes = plt.subplots(2, 2, figsize=(11, 6.5), sharey="row")
    for i, (label, c) in enumerate(curves.items()):
        kw = {"color": COLORS[i % len(COLORS)], "label": label}
        for col, (x_loss, x_eval) in enumerate(((c.iters, c.eval_iters), (c.wall_s, c.eval_wall_s))):
            axes[0, col].plot(x_loss, c.train_loss, lw=1.3, **kw)
            if np.isfinite(c.test_loss).any():
                axes[0, col].plot(x_eval, c.test_loss, "s--", ms=4, lw=1, alpha=0.8, color=kw["color"])
            axes[1, col].plot(x_eval, c.test_accuracy, "o-", ms=4, lw=1.6, **kw)
    for col, xl in enumerate(("iteration", "wall time since the first iteration (s)")):
        _style(axes[0, col], "loss (line: train, squares: test)", xl, "loss")
        _style(axes[1, col], "test accuracy", xl, "accuracy")
    axes[1, 0].set_ylim(0, 1.0)
    axes[0, 0].xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[1, 0].xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[1, 0].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def training_by_variant(curves: dict[str, list[TrainingCurves]], target: float | None):
    """Test accuracy against time (the system's), one panel per variant, one line per run; the
    time-to-accuracy target as a dashed line."""
    curves = {k: [c for c in cs if np.isfinite(c.test_accuracy).any()] for k, cs in curves.items()}
    curves = {k: cs for k, cs in curves.items() if cs}
    if not curves:
        return None
    cols = min(4, len(curves))
    rows = -(-len(curves) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.8 * rows), sharex=True, sharey=True, squeeze=False)
    for ax in axes.flat[len(curves) :]:
        ax.set_visible(False)
    for i, (ax, (name, cs)) in enumerate(zip(axes.flat, curves.items())):
        for c in cs:
            ax.plot(c.eval_wall_s, c.test_accuracy, "-", lw=1.1, alpha=0.75, color=COLORS[i % len(COLORS)])
        if target is not None:
            ax.axhline(target, ls="--", lw=0.9, color="black", alpha=0.6)
        _style(ax, f"{name} ({len(cs)} runs)", "time since the first iteration (s)", "test accuracy")
    axes[0, 0].set_ylim(0, 1.0)
    fig.tight_layout()
    return fig


def drops_by_precedence(by_drop_prec: dict[str, dict]):
    """Early and tail drops per drop precedence (0 = protected), with the drop fraction on top."""
    if not by_drop_prec:
        return None
    # all four precedences always, so plots of different policies line up
    empty = {"admitted_pkts": 0, "early_drop_pkts": 0, "tail_drop_pkts": 0, "drop_fraction": None}
    by_drop_prec = {**{str(c): empty for c in range(4)}, **by_drop_prec}
    keys = sorted(by_drop_prec, key=lambda k: (not k.isdigit(), int(k) if k.isdigit() else 0, k))
    early = np.array([by_drop_prec[k]["early_drop_pkts"] for k in keys])
    tail = np.array([by_drop_prec[k]["tail_drop_pkts"] for k in keys])
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    x = np.arange(len(keys))
    ax.bar(x - 0.2, early, 0.4, label="early drop", color=COLORS[1])
    ax.bar(x + 0.2, tail, 0.4, label="tail drop", color=COLORS[3])
    top = max(int(early.max()), int(tail.max()), 1)
    for xi, k, e, t in zip(x, keys, early, tail):
        frac = by_drop_prec[k]["drop_fraction"]
        ax.annotate(
            f"{100 * frac:.2f}%\ndropped" if frac is not None else "none\noffered",
            (xi, max(e, t) + top * 0.02),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_ylim(0, top * 1.5)  # room for the labels and, above them, the legend
    ax.set_xticks(x, [f"{k}{' (protected)' if k == '0' else ''}" for k in keys])
    _style(ax, "Switch drops by drop precedence (all ports)", "drop precedence (color)", "packets")
    ax.legend(fontsize=8, loc="upper center", ncol=2)
    fig.tight_layout()
    return fig


def compare_bars(names: list[str], values: dict[str, list[float | None]], unit: str, title: str):
    """Grouped bars: one group per metric, one bar per run."""
    metrics = [m for m, vs in values.items() if any(v is not None for v in vs)]
    if not metrics:
        return None
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(metrics) + 2), 3.8))
    width = 0.8 / len(names)
    x = np.arange(len(metrics))
    for i, n in enumerate(names):
        ys = [values[m][i] or 0 for m in metrics]  # None: a bar of height 0
        bars = ax.bar(x + (i - (len(names) - 1) / 2) * width, ys, width, label=n, color=COLORS[i % len(COLORS)])
        ax.bar_label(bars, fmt="%.4g", fontsize=7, padding=1)
    ax.set_xticks(x, metrics)
    shown = [v for m in metrics for v in values[m] if v]
    log = bool(shown) and max(shown) > 20 * min(shown)  # p50 and p99.9 differ by orders of magnitude
    if log:
        ax.set_yscale("log")
    _style(ax, title, "", unit + (", log scale" if log else ""))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


QUEUE_COLORS = {
    7: COLORS[3],
    6: COLORS[1],
    5: COLORS[2],
    4: COLORS[4],
    3: COLORS[0],
    2: COLORS[5],
    1: COLORS[6],
    0: "#777777",
}
TRAFFIC_COLORS = {"gradient": COLORS[0], "control": COLORS[2], "background": "#888888", "mixed": COLORS[4]}
TRAFFIC_LABELS = {
    "gradient": "gradient",
    "control": "transport control",
    "background": "background",
    "mixed": "all traffic (not separable)",
}


def _drops(row: dict | None) -> tuple[int, int]:
    return (0, 0) if not row else (int(row["early_drop_pkts"]), int(row["tail_drop_pkts"]))


def drops_by_traffic(by_traffic_prec: dict[str, dict[str, dict]]):
    """Switch drops split by traffic: gradient packets per drop precedence (0 = protected), then the
    transport's control and the background traffic, early and tail drops with the drop fraction."""
    if not by_traffic_prec:
        return None
    empty = {"admitted_pkts": 0, "early_drop_pkts": 0, "tail_drop_pkts": 0, "drop_fraction": None}
    cats = []  # (label, row, traffic)
    grad = by_traffic_prec.get("gradient", {})
    for c in ("0", "1", "2", "3"):  # all four precedences always, so plots of different policies line up
        cats.append((f"gradient\ndp {c}{' (protected)' if c == '0' else ''}", grad.get(c, empty), "gradient"))
    for kind in ("control", "background", "mixed"):
        rows = by_traffic_prec.get(kind)
        if rows or kind != "mixed":
            total = {
                k: sum(r[k] for r in (rows or {}).values())
                for k in ("admitted_pkts", "early_drop_pkts", "tail_drop_pkts")
            }
            offered = sum(total.values())
            total["drop_fraction"] = (total["early_drop_pkts"] + total["tail_drop_pkts"]) / offered if offered else None
            cats.append((TRAFFIC_LABELS[kind].replace(" (", "\n("), total, kind))
    early = np.array([r["early_drop_pkts"] for _, r, _ in cats])
    tail = np.array([r["tail_drop_pkts"] for _, r, _ in cats])
    fig, ax = plt.subplots(figsize=(8.5, 4.0))
    x = np.arange(len(cats))
    ax.bar(x - 0.2, early, 0.4, label="early drop", color=COLORS[1])
    ax.bar(x + 0.2, tail, 0.4, label="tail drop", color=COLORS[3])
    top = max(int(early.max()), int(tail.max()), 1)
    for xi, (_, r, _), e, t in zip(x, cats, early, tail):
        frac = r["drop_fraction"]
        ax.annotate(
            f"{100 * frac:.2f}%\ndropped" if frac is not None else "none\noffered",
            (xi, max(e, t) + top * 0.02),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.axvline(3.5, color="k", lw=0.8, ls=":")
    ax.set_ylim(0, top * 1.5)
    ax.set_xticks(x, [c[0] for c in cats], fontsize=8)
    _style(ax, "Switch drops by traffic (all ports): gradient packets by drop precedence, then the rest", "", "packets")
    ax.legend(fontsize=8, loc="upper center", ncol=2)
    fig.tight_layout()
    return fig


def iteration_cdf(series: dict[str, IterationSeries], title: str = "CDF of iteration time (slowest worker)"):
    """Empirical CDF of the iteration time per run, p50 and p99 marked on each curve."""
    series = {k: s for k, s in series.items() if np.isfinite(s.iteration_us).any()}
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(8, 3.8))
    for i, (label, s) in enumerate(series.items()):
        ms = s.iteration_us[np.isfinite(s.iteration_us)] / 1e3
        x, y = drawable_ecdf(ms)
        c = COLORS[i % len(COLORS)]
        p50, p99 = np.percentile(ms, 50), np.percentile(ms, 99)
        ax.step(x, y, where="post", lw=1.8, color=c, label=f"{label} (n={ms.size}; p50 {p50:.4g}, p99 {p99:.4g} ms)")
        ax.plot([p50, p99], [0.5, 0.99], "o", color=c, ms=5)
    for q in (0.5, 0.99):
        ax.axhline(q, color="grey", lw=0.6, ls="-.")
    ax.set_ylim(0, 1.01)
    _style(ax, title, "iteration time (ms)", "fraction of iterations ≤ x")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def compare_drops(names: list[str], traffic: list[dict]):
    """Switch drops side by side: left, per traffic kind (early solid, tail hatched); right, per
    priority queue, gradient packets solid and the other traffic hatched."""
    if not any(t.get("by_traffic") for t in traffic):
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [2, 3]})
    kinds = [k for k in TRAFFIC_LABELS if any(k in t.get("by_traffic", {}) for t in traffic)]
    width = 0.8 / len(names)
    x = np.arange(len(kinds))
    for i, (n, t) in enumerate(zip(names, traffic)):
        early, tail = zip(*(_drops(t.get("by_traffic", {}).get(k)) for k in kinds)) if kinds else ((), ())
        pos = x + (i - (len(names) - 1) / 2) * width
        c = COLORS[i % len(COLORS)]
        left.bar(pos, early, width, color=c, label=f"{n}: early")
        bars = left.bar(pos, tail, width, bottom=early, color=c, alpha=0.55, hatch="//", label=f"{n}: tail")
        left.bar_label(bars, labels=[f"{e + tl:,}" for e, tl in zip(early, tail)], fontsize=7, padding=1)
    left.set_xticks(x, [TRAFFIC_LABELS[k].replace(" (", "\n(") for k in kinds], fontsize=8)
    _style(left, "Switch drops by traffic", "", "packets dropped")
    left.set_ylim(0, left.get_ylim()[1] * 1.35)  # room for the legend above the bars
    left.legend(fontsize=7, ncol=len(names), loc="upper center")
    used = {int(q) for t in traffic for q in t.get("by_prio", {})}
    # every queue from 7 down once a priority policy used more than one, so no queue looks missing
    queues = sorted(used, reverse=True) if len(used) <= 1 else list(range(max(used), -1, -1))
    xq = np.arange(len(queues))
    for i, (n, t) in enumerate(zip(names, traffic)):
        pos = xq + (i - (len(names) - 1) / 2) * width
        grad = np.array([sum(_drops(t["by_prio"].get(str(q), {}).get("gradient"))) for q in queues])
        other = np.array(
            [sum(sum(_drops(r)) for k, r in t["by_prio"].get(str(q), {}).items() if k != "gradient") for q in queues]
        )
        c = COLORS[i % len(COLORS)]
        right.bar(pos, grad, width, color=c, label=f"{n}: gradient")
        bars = right.bar(
            pos, other, width, bottom=grad, color=c, alpha=0.4, hatch="..", label=f"{n}: background / control / mixed"
        )
        right.bar_label(
            bars, labels=[f"{g + o:,}" if g + o else "" for g, o in zip(grad, other)], fontsize=7, padding=1
        )
    right.set_xticks(xq, [f"queue {q}" + (" (first)" if j == 0 else "") for j, q in enumerate(queues)], fontsize=8)
    _style(right, "Switch drops by priority queue (strict priority: higher served first)", "", "packets dropped")
    right.set_ylim(0, right.get_ylim()[1] * 1.35)
    right.legend(fontsize=7, ncol=len(names), loc="upper center")
    fig.tight_layout()
    return fig


MAX_TIMELINE_BINS = 300


def _rebin(t: np.ndarray, peak: np.ndarray, grad: np.ndarray, other: np.ndarray, bins: int = MAX_TIMELINE_BINS):
    """At most `bins` intervals: peaks take the max, drops the sum of the intervals merged."""
    k = int(np.ceil(t.size / bins))
    if k <= 1:
        return t, peak, grad, other
    n = int(np.ceil(t.size / k)) * k
    pad = n - t.size
    cut = lambda a, fill: np.concatenate([a, np.full((pad,) + a.shape[1:], fill)]).reshape(n // k, k, *a.shape[1:])
    return (cut(t, t[-1]).max(axis=1), cut(peak, 0).max(axis=1), cut(grad, 0).sum(axis=1), cut(other, 0).sum(axis=1))


def queue_timelines(timelines: Mapping[str, QueueTimeline | None]):
    """Per run: the bottleneck port's queue depth (highest per interval, per priority queue) and
    its drops per interval (gradient vs the rest), against time; iteration ends as thin lines with
    their numbers on top."""
    drawn = {k: tl for k, tl in timelines.items() if tl is not None and tl.t.size}
    if not drawn:
        return None
    n = len(drawn)
    fig, axes = plt.subplots(
        2 * n, 1, figsize=(11, 4.2 * n), squeeze=False, layout="constrained", gridspec_kw={"height_ratios": [3, 2] * n}
    )
    t_max = max(float(tl.t.max()) for tl in drawn.values())
    for i, (label, tl) in enumerate(drawn.items()):
        depth, drops = axes[2 * i, 0], axes[2 * i + 1, 0]
        drops.sharex(depth)
        t, peak, grad, other = _rebin(tl.t, tl.peak, tl.gradient_drops, tl.other_drops)
        dt = np.diff(np.concatenate([[tl.t[0] - (tl.t[1] - tl.t[0] if tl.t.size > 1 else 0.1)], t]))
        for q in range(7, -1, -1):  # one colour per queue in every run: background queue 0 always grey
            if peak[:, q].any():
                depth.step(t, peak[:, q], where="pre", lw=1.1, label=f"queue {q}", color=QUEUE_COLORS[q])
        drops.bar(t - dt, grad, dt, align="edge", color=COLORS[0], label="gradient packets")
        drops.bar(t - dt, other, dt, align="edge", bottom=grad, color="#888888", label="background + control")
        for ax in (depth, drops):
            for e in tl.iteration_ends:
                ax.axvline(e, color="k", lw=0.4, alpha=0.25)
        depth.set_xlim(min(0.0, float(tl.t.min())), t_max)
        depth.tick_params(labelbottom=False)
        if tl.iteration_ends.size:
            top = depth.secondary_xaxis("top")
            step = max(1, int(np.ceil(tl.iteration_ends.size / 12)))
            top.set_xticks(tl.iteration_ends[::step], [str(int(k)) for k in tl.iterations[::step]], fontsize=7)
            top.set_xlabel("iteration ended", fontsize=8)
        bin_s = float(np.median(dt)) if dt.size else 0.1
        _style(
            depth,
            f"{label}: queue depth at {tl.switch} port {tl.port} (highest per {bin_s:.2g} s)",
            "",
            "packets queued",
        )
        depth.set_ylim(bottom=0)
        # legends right of the axes: the queues reach their limit, so no corner inside is clear
        depth.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0))
        _style(drops, "", "time since the first iteration started (s)", f"drops per {bin_s:.2g} s")
        drops.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0))
    return fig
