"""Series of repeated runs, and pooling several of them into one comparison.

A series is what one `dlcp run X --policies a,b --repeat N` writes: a results directory
(`results/<time>-NAME/`) holding one repeat group per variant (`a/rep1 ...`, `b/rep1 ...`).
`dlcp compare SERIES [SERIES ...]` compares the variants over the pairs of every series given:
pair i of series k is its own pair, so three demos of six pairs give eighteen.

Which variant is the baseline: `--baseline`, else the first series' compare.json (the runner
writes it with the baseline first), else an error that asks for `--baseline`.
"""

from __future__ import annotations

import json
import pathlib

from dlcp.reporting.load import NotARunDirectory, ReportInputError, default_out_dir, is_run_dir
from dlcp.reporting.repeats import RunSample, is_repeat_group, load_groups, write_comparison


def series_groups(path: pathlib.Path) -> dict[str, pathlib.Path]:
    """Variant name -> repeat group directory, for the repeat groups directly inside `path`."""
    if not path.is_dir() or is_run_dir(path) or is_repeat_group(path):
        return {}
    return {p.name: p for p in sorted(path.iterdir()) if is_repeat_group(p)}


def is_series(path: pathlib.Path) -> bool:
    return bool(series_groups(path))


def recorded_order(path: pathlib.Path) -> list[str]:
    """Variant names in the order the series' own compare.json gives (baseline first), or []."""
    try:
        data = json.loads((path / "compare.json").read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(data, dict) or not isinstance(data.get("variants"), list):
        return []
    return [v["name"] for v in data["variants"] if isinstance(v, dict) and isinstance(v.get("name"), str)]


def variant_order(paths: list[pathlib.Path], groups: list[dict[str, pathlib.Path]], baseline: str | None) -> list[str]:
    """The variants every series has (`groups`: each series' `series_groups`), the baseline first.
    Raises ReportInputError with a one-line reason."""
    common = [name for name in groups[0] if all(name in g for g in groups[1:])]
    if len(common) < 2:
        raise ReportInputError(
            f"{paths[0]}: the series have fewer than two variants in common ({', '.join(common) or 'none'})"
        )
    recorded = [n for n in recorded_order(paths[0]) if n in common]
    if baseline is None:
        if not recorded:
            raise ReportInputError(
                f"{paths[0]}: no compare.json says which variant is the baseline; "
                f"give --baseline (one of {', '.join(common)})"
            )
        baseline = recorded[0]
    if baseline not in common:
        raise ReportInputError(f"--baseline {baseline}: not a variant of every series (they have {', '.join(common)})")
    rest = [n for n in recorded if n != baseline] + sorted(n for n in common if n not in recorded and n != baseline)
    return [baseline] + rest


def series_labels(paths: list[pathlib.Path]) -> list[str]:
    """A short name per series: its directory name, numbered when two share one."""
    names = [p.resolve().name for p in paths]
    return [f"{n}#{i + 1}" if names.count(n) > 1 else n for i, n in enumerate(names)]


def groups_of_series(paths: list[pathlib.Path]) -> list[dict[str, pathlib.Path]]:
    """Each series' `series_groups`; raise NotARunDirectory naming the first path that is no series."""
    groups = [series_groups(p) for p in paths]
    for p, g in zip(paths, groups):
        if not g:
            raise NotARunDirectory(
                f"{p}: not a results directory of repeated runs (variant/rep1, ...) like "
                "the others; pool series with series"
            )
    return groups


def load_pooled(
    paths: list[pathlib.Path], groups: list[dict[str, pathlib.Path]], names: list[str]
) -> tuple[dict[str, list[RunSample]], list[str]]:
    """The pairs of every series, series after series, and the notes on what was left out."""
    samples: dict[str, list[RunSample]] = {n: [] for n in names}
    notes: list[str] = []
    for series, label in zip(groups, series_labels(paths)):
        got, left = load_groups([series[n] for n in names], names, label)
        for n in names:
            samples[n] += got[n]
        notes += left
    return samples, notes


def check_independent(samples: dict[str, list[RunSample]]) -> None:
    """On a deterministic backend (meta.json `deterministic`: a seed fixes the run exactly) a seed's
    pairs are copies: refuse to count them as several."""
    seen: dict[object, str] = {}
    for r in next(iter(samples.values())):
        if not r.deterministic:
            continue
        other = seen.setdefault(r.seed, r.pair_label(True))
        if other != r.pair_label(True):
            raise ReportInputError(
                f"{other} and {r.pair_label(True)} both ran seed {r.seed} on {r.backend}, where a seed "
                "fixes the run: they are one pair, not two; pool series run with other seeds "
                "(--set seed=N)"
            )


def default_pooled_out(paths: list[pathlib.Path]) -> pathlib.Path:
    """A single series: itself. Several: pooled-<first>+<n-1> beside them (or in the current directory
    when they have no common parent), so no series' own comparison is overwritten."""
    if len(paths) == 1:
        return paths[0]
    return default_out_dir(paths) / f"pooled-{series_labels(paths)[0]}+{len(paths) - 1}"


def compare_series(
    paths: list[pathlib.Path], out: pathlib.Path | None = None, baseline: str | None = None, echo: bool = False
) -> pathlib.Path:
    """Compare the variants of one or more series over all their pairs; compare.html's path."""
    groups = groups_of_series(paths)
    names = variant_order(paths, groups, baseline)
    samples, notes = load_pooled(paths, groups, names)
    check_independent(samples)
    return write_comparison(names, samples, notes, out if out is not None else default_pooled_out(paths), echo)
