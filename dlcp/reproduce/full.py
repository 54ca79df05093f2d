"""`dlcp reproduce --full`: a claim's packet-level series, run by the series runner
(dlcp/runs/series_runner.py) on the backend its experiment files name (ns-3 for every claim
here), as paired repeats; the figure is read from the series' own comparison (compare.json).

Each `[[full.series]]` is one `dlcp run` of an experiment file in the claim's folder with named
variants (baseline first) and `repeat` pairs: its compare.json gives each variant's ratio to the
baseline with a 95 % interval (bootstrap over pairs, dlcp/reporting/bootstrap.py) for the claim's
metric. The speed-up is the inverse ratio. `--reduced` applies the claim's `full.reduced`
overrides: the same claim at a scale that runs in minutes, to show the path works and what it costs.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from dlcp.reproduce.claims import Claim, Full, Series
from dlcp.runs.cluster import ClusterOptions
from dlcp.runs.series import run_series
from dlcp.runs.series_runner import SeriesRequest
from dlcp.settings import ConfigError


@dataclass
class FullRow:
    label: str
    series: str
    speedup: float | None
    ci: tuple[float, float] | None
    verdict_text: str  # compare.json's verdict on the ratio
    n_pairs: int
    also: dict[str, str] = field(default_factory=dict)  # metric -> "ratio (CI), verdict"
    results: str = ""
    wall_s: float = 0.0


def series_request(
    folder: Path,
    full: Full,
    s: Series,
    out_root: Path,
    reduced: bool,
    repeat: int | None,
    cluster: ClusterOptions | None = None,
) -> SeriesRequest:
    """The `dlcp run` a series is, its runs on `cluster` (a local one by default)."""
    return SeriesRequest(
        config=str(folder / s.experiment),
        overrides=[*s.set, *(full.reduced if reduced else [])],
        repeat=repeat or (full.reduced_repeat if reduced else full.repeat),
        out_root=str(out_root),
        named=[(name, list(o)) for name, o in s.variants.items()],
        cluster=cluster or ClusterOptions(),
    )


def _ratio(data: dict, variant: str, metric: str) -> dict | None:
    """compare.json's ratio of `variant` to the baseline on `metric`: repeats, or single runs
    (their pooled-over-ranks section)."""
    if data.get("kind") == "repeats":
        v = next((v for v in data["variants"] if v["name"] == variant), None)
        return None if v is None else v["ratios"].get(metric)
    for r in data.get("pooled_over_ranks", {}).get("runs", [])[1:]:
        if r["name"] == variant:
            return r["ratios"].get(metric)
    return None


def _text(r: dict | None) -> str:
    if r is None or r.get("point") is None:
        return "–" if r is None else r["verdict"]
    ci = f" ({r['ci95'][0]:.3g}-{r['ci95'][1]:.3g})" if r.get("ci95") else ""
    return f"{r['point']:.3g}x{ci}, {r['verdict']}"


def rows_of(data: dict, claim: Claim, s: Series, results: Path, wall_s: float) -> list[FullRow]:
    assert claim.full is not None
    out = []
    for variant in list(s.variants)[1:]:
        r = _ratio(data, variant, claim.full.metric)
        point = r.get("point") if r else None
        ci = r.get("ci95") if r else None
        out.append(
            FullRow(
                label=s.versus.get(variant, variant),
                series=s.name,
                speedup=1 / point if point else None,
                ci=(1 / ci[1], 1 / ci[0]) if ci else None,
                verdict_text=_text(r),
                n_pairs=int((r or {}).get("n_pairs") or (r or {}).get("n_ranks") or 0),
                also={m: _text(_ratio(data, variant, m)) for m in claim.full.also},
                results=str(results),
                wall_s=wall_s,
            )
        )
    return out


def check_series(claims: list[Claim], only: list[str] | None) -> None:
    """Every name of `--series` names a series of one of `claims`, before anything runs."""
    known = sorted({s.name for c in claims if c.full for s in c.full.series})
    unknown = [n for n in only or [] if n not in known]
    if unknown:
        raise ConfigError(f"--series {', '.join(unknown)}: no such series in these claims (series: {', '.join(known)})")


def run_full(
    claim: Claim,
    folder: Path,
    out_root: Path,
    reduced: bool = False,
    repeat: int | None = None,
    only: list[str] | None = None,
    cluster: ClusterOptions | None = None,
) -> list[FullRow]:
    """Every series of the claim (or those named in `only`), one after the other; their rows."""
    assert claim.full is not None
    rows = []
    for s in claim.full.series:
        if only and s.name not in only:
            continue
        started = time.monotonic()
        results = run_series(series_request(folder, claim.full, s, out_root, reduced, repeat, cluster))
        wall = time.monotonic() - started
        data = json.loads((results / "compare.json").read_text())
        rows += rows_of(data, claim, s, results, wall)
    return rows
