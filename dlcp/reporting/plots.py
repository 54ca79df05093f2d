"""Report figures (matplotlib, Agg backend: no display needed). Each function returns a Figure, or
None when there is nothing to draw; `png_bytes` renders one and closes it."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")  # before pyplot: reports run headless (CI, over ssh, as any user)
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from dlcp.reporting.stats import ecdf  # noqa: E402
from dlcp.reporting.summarise import IterationSeries, TrainingCurves  # noqa: E402

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
        x, y = ecdf(np.asarray(us, float) / 1e3)
        x = np.maximum(x, 1e-3)  # log axis: clamp zero durations
        kw = {"lw": 2.2 if i == 0 else 1.3, "color": COLORS[i % len(COLORS)], "label": f"{label} (n={x.size})"}
        ax.step(x, y, where="post", **kw)
        # the tail panel: 1 - CDF on log-log axes shows p99..p99.9 where the plain CDF is flat
        tail.step(x, np.maximum(1 - y + 1 / x.size, 1 / x.size), where="post", **kw)
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
    _style(tail, "tail: fraction of messages slower (log-log)", "message completion time (ms, log)",
           "fraction ≥ x")
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
            for j, (host, (it, us)) in enumerate(s.per_host.items()):
                ax.plot(it, us / 1e3, color="grey", lw=0.7, alpha=0.6, label="each worker" if j == 0 else None)
        name = f"{label}: " if len(series) > 1 else ""
        ax.plot(s.iters, s.iteration_us / 1e3, "-o" if s.iters.size <= 60 else "-", ms=3, lw=1.8, color=c,
                label=f"{name}iteration (slowest worker)")
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
    curves = {k: c for k, c in curves.items()
              if np.isfinite(c.train_loss).any() or np.isfinite(c.test_accuracy).any()}
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
        ax.annotate(f"{100 * frac:.2f}%\ndropped" if frac is not None else "none\noffered", (xi, max(e, t) + top * 0.02),
                    ha="center", va="bottom", fontsize=8)
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
        ys = [values[m][i] if values[m][i] is not None else 0 for m in metrics]
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
