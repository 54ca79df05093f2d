"""`dlcp reproduce`: every claim's figures and verdicts into reproduce.md, reproduce.html and
reproduce.json, and the table on the terminal.

Per claim: what the paper claims and its figure (quote and source), their setup beside ours (each
row with where their setting is stated), our figure (the model's with --fast, always; the
packet-level one with its 95 % interval with --full), and the verdict: direction reproduced or
not, magnitude within 2x or not, and why when not.
"""

from __future__ import annotations

import platform
import time
from pathlib import Path

from dlcp.reporting.render import Doc
from dlcp.reporting.runreport import write_outputs
from dlcp.reproduce.claims import Claim, Figure, claims_root, figure_for, load_claims
from dlcp.reproduce.fast import Row, fast_rows
from dlcp.reproduce.full import FullRow, check_series, run_full
from dlcp.reproduce.verdict import judge
from dlcp.runs.cluster import ClusterOptions
from dlcp.runs.naming import results_dir
from dlcp.tables import format_table

KNOWN = "see the claim's known differences"


def paper_text(f: Figure) -> str:
    if f.kind == "direction" or f.speedup is None:
        return "direction only"
    if f.kind == "range" and f.low is not None:
        return f"{f.low:.3g}-{f.speedup:.3g}x"
    return f"{'up to ' if f.kind == 'up to' else ''}{f.speedup:.3g}x"


def _spread_text(lo_hi, kind: str) -> str:
    return "–" if lo_hi is None else f"{lo_hi[0]:.3g}-{lo_hi[1]:.3g} ({kind})"


def fast_entry(claim: Claim, row: Row) -> dict:
    figure = figure_for(claim, row.label)
    v = judge(figure, row.speedup, None, KNOWN if claim.why else "")
    return {
        "claim": claim.id,
        "comparison": row.label,
        "mode": "fast",
        "paper": paper_text(figure),
        "ours": row.speedup,
        "at": row.where,
        "interval": list(row.spread) if row.spread else None,
        "interval_kind": row.spread_kind,
        "direction": v.direction,
        "magnitude": v.magnitude,
        "why": v.why,
        "details": row.details,
        "notes": sorted(set(row.notes)),
    }


def full_entry(claim: Claim, row: FullRow) -> dict:
    figure = figure_for(claim, row.label)
    v = judge(figure, row.speedup, row.ci, KNOWN if claim.why else "", measured=True)
    return {
        "claim": claim.id,
        "comparison": f"{row.label} [{row.series}]",
        "mode": "full",
        "paper": paper_text(figure),
        "ours": row.speedup,
        "at": row.series,
        "interval": list(row.ci) if row.ci else None,
        "interval_kind": f"95 % CI, bootstrap over {row.n_pairs} pairs" if row.ci else f"none ({row.verdict_text})",
        "direction": v.direction,
        "magnitude": v.magnitude,
        "why": v.why,
        "also": row.also,
        "results": row.results,
        "wall_s": round(row.wall_s, 1),
    }


def summary_rows(entries: list[dict]) -> list[dict]:
    out = []
    for e in entries:
        out.append(
            {
                "claim": e["claim"],
                "comparison": e["comparison"],
                "mode": e["mode"],
                "paper": e["paper"],
                "ours": "–" if e["ours"] is None else f"{e['ours']:.3g}x",
                "interval": "–" if not e["interval"] else f"{e['interval'][0]:.3g}-{e['interval'][1]:.3g}",
                "direction": e["direction"],
                "magnitude": e["magnitude"],
            }
        )
    return out


def build_doc(claims: list[Claim], entries: list[dict], meta: dict) -> Doc:
    doc = Doc("Reproducing the source papers' claims")
    doc.p(
        f"`{meta['command']}` on {meta['machine']}, {meta['wall_s']:.1f} s. Every figure is a speed-up: the "
        "baseline's time over the paper's system's (above 1: the system is faster). Direction: above 1 (a --full "
        "figure: its 95 % interval wholly above 1; 'no interval' with too few pairs for one). Magnitude: the gain (speed-up - 1) within a factor "
        "of two of the paper's. --fast figures come from the alpha-beta timeline and the collectives' cost "
        "model: deterministic, so no confidence interval; a range is given where it means something and says "
        "what it is. --full figures are packet-level (ns-3) with paired repeats and a 95 % interval."
    )
    if meta.get("reduced"):
        doc.warn(
            "--reduced: the packet-level series ran at each claim's reduced scale (its full.reduced overrides, "
            "listed per claim below), to check the path and its cost; their figures are not the paper's setting."
        )
    rows = summary_rows(entries)
    if rows:
        doc.table(list(rows[0]), [list(r.values()) for r in rows])
    for claim in claims:
        mine = [e for e in entries if e["claim"] == claim.id]
        doc.h(f"{claim.id}: {claim.title}")
        doc.p(f"**Claim** ({claim.paper}): {claim.claim}")
        doc.p(f'**Paper\'s figure**: {paper_text(claim.figure)}, "{claim.figure.quote}" ({claim.figure.source}).')
        doc.table(["aspect", "theirs", "source", "ours"], [[s.aspect, s.theirs, s.source, s.ours] for s in claim.setup])
        doc.table(
            ["comparison", "mode", "ours", "interval or range", "direction", "magnitude", "why"],
            [
                [
                    e["comparison"],
                    e["mode"],
                    "–" if e["ours"] is None else f"{e['ours']:.3g}x at {e['at']}",
                    _spread_text(e["interval"], e["interval_kind"]),
                    e["direction"],
                    e["magnitude"],
                    e["why"] or "–",
                ]
                for e in mine
            ],
        )
        for e in mine:
            if e.get("details"):
                doc.table(
                    ["at", "ms (each system)", "best baseline", "speed-up"],
                    [
                        [
                            d["at"],
                            ", ".join(f"{k} {v}" for k, v in d["ms"].items()),
                            d.get("best_baseline", "–"),
                            f"{d['speedup']:.3g}",
                        ]
                        for d in e["details"]
                    ],
                )
            if e.get("also"):
                doc.bullets([f"{e['comparison']}, {k}: {v}" for k, v in e["also"].items()])
            if e.get("results"):
                doc.p(f"Series: {e['results']} ({e['wall_s']:.0f} s of wall time).")
            if e.get("notes"):
                doc.bullets(e["notes"][:8] + ([f"... {len(e['notes']) - 8} more"] if len(e["notes"]) > 8 else []))
        if meta.get("reduced") and claim.full is not None and claim.full.reduced:
            doc.p("Reduced scale: " + ", ".join(f"`{o}`" for o in claim.full.reduced) + ".")
        if claim.why:
            doc.bullets([f"Known difference: {w}" for w in claim.why])
    return doc


def reproduce(
    names: list[str] | None = None,
    full: bool = False,
    out: Path | None = None,
    root: str | None = None,
    reduced: bool = False,
    repeat: int | None = None,
    series: list[str] | None = None,
    cluster: ClusterOptions | None = None,
    command: str = "dlcp reproduce",
    echo: bool = True,
) -> Path:
    """Run the claims (every one by default); write reproduce.md/.html/.json; return the .md's directory."""
    started = time.monotonic()
    folder = claims_root(root)
    claims = load_claims(folder, names)
    if full:
        check_series(claims, series)
    out = out or results_dir("results", "reproduce-full" if full else "reproduce")
    entries: list[dict] = []
    for claim in claims:
        t0 = time.monotonic()
        entries += [fast_entry(claim, r) for r in fast_rows(claim)]
        if full:
            if claim.full is None:
                entries.append(
                    {
                        **fast_entry(claim, Row("packet-level", None, "")),
                        "mode": "full",
                        "why": "no packet-level experiment for this claim yet",
                        "details": [],
                    }
                )
            else:
                rows = run_full(claim, folder / claim.id, out, reduced, repeat, series, cluster)
                entries += [full_entry(claim, r) for r in rows]
        if echo:
            print(f"dlcp reproduce: {claim.id} ({time.monotonic() - t0:.1f} s)", flush=True)
    meta = {
        "command": command,
        "machine": f"{platform.node()} ({platform.machine()}, {_cpus()} CPUs, Python {platform.python_version()})",
        "wall_s": time.monotonic() - started,
        "full": full,
        "reduced": reduced,
    }
    data = {"meta": meta, "claims": [c.model_dump() for c in claims], "results": entries}
    write_outputs(out, build_doc(claims, entries, meta), data, json_name="reproduce.json", stem="reproduce")
    if echo:
        print(format_table(summary_rows(entries)))
        print(
            f"dlcp reproduce: {len(claims)} claims in {meta['wall_s']:.1f} s; {out / 'reproduce.md'}, {out / 'reproduce.html'}"
        )
    return out


def _cpus() -> int:
    import os

    return os.cpu_count() or 1
