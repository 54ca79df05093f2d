"""Runs beside runs, in pictures: switch drops by traffic and priority queue, the iteration-time
CDF and the queue timelines. Used by the comparison of single runs and by that of repeated runs
(for one pair)."""

from __future__ import annotations

from dlcp.reporting import plots
from dlcp.reporting.load import RunData
from dlcp.reporting.plots import TRAFFIC_LABELS
from dlcp.reporting.render import Doc, Image
from dlcp.reporting.runreport import pct
from dlcp.reporting.summarise import iteration_series
from dlcp.reporting.traffic import drops, run_timeline, traffic_section


def side_by_side_sections(doc: Doc, names: list[str], runs: list[RunData]) -> None:
    """Switch drops by traffic and priority, the iteration-time CDF and the queue timelines, run
    beside run."""
    traffic = [traffic_section(r.counters, r.config) for r in runs]
    doc.h("Switch drops side by side")
    sources = sorted({t["source_text"] for t in traffic})
    doc.p(
        "Gradient packets (DLCP header), the transport's control and background traffic, told apart by "
        + "; ".join(sources)
        + "."
    )
    rows = []
    for n, t in zip(names, traffic):
        for kind, r in t["by_traffic"].items():
            rows.append(
                [
                    n,
                    TRAFFIC_LABELS[kind],
                    r["admitted_pkts"],
                    r["early_drop_pkts"],
                    r["tail_drop_pkts"],
                    pct(r["drop_fraction"]),
                ]
            )
    doc.table(["run", "traffic", "admitted (pkts)", "early-dropped (pkts)", "tail-dropped (pkts)", "dropped"], rows)
    doc.image(image_of(plots.compare_drops(names, traffic), "compare_drops", "switch drops by traffic and priority"))
    prio_rows = []
    for q in sorted({q for t in traffic for q in t["by_prio"]}, key=int, reverse=True):
        row = [q]
        for t in traffic:
            d = t["by_prio"].get(q, {})
            row.append(", ".join(f"{TRAFFIC_LABELS[k]} {drops(r):,}" for k, r in d.items() if drops(r)) or "0")
        prio_rows.append(row)
    doc.table(["priority queue"] + [f"{n}: drops" for n in names], prio_rows)
    doc.h("Iteration time distribution")
    doc.image(
        image_of(
            plots.iteration_cdf({n: iteration_series(r) for n, r in zip(names, runs)}),
            "compare_iteration_cdf",
            "CDF of iteration time per run",
        )
    )
    timelines = {n: run_timeline(r) for n, r in zip(names, runs)}
    if any(tl is not None for tl in timelines.values()):
        doc.h("Queue depth and drops against iterations")
        doc.p(
            "Per run, the port with the most drops: the highest occupancy of each priority queue and the drops in "
            "each 0.1 s interval (the built-in switch's samples); thin lines and the numbers on top mark "
            "iteration ends."
        )
        doc.image(
            image_of(plots.queue_timelines(timelines), "compare_queue_timeline", "queue depth and drops over time")
        )


def image_of(fig, name: str, alt: str) -> Image | None:
    """A figure as plots/NAME.png, or None when there is nothing to draw."""
    return Image(f"plots/{name}.png", alt, plots.png_bytes(fig)) if fig is not None else None
