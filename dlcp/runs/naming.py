"""Names of what a series writes (docs/runs.md, "Run directory"): the results directory
`<out>/<UTC time>-<experiment>/`, one directory per variant (named by `--vary` / `--policies`, else
by `--name`, else by the keys of `--set`, else by the policy) and `rep<i>` inside it per repeat."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path

from dlcp.settings import ConfigError

SET_LABEL_CHARS = re.compile(r"[^A-Za-z0-9._=+,-]+")


def utc_stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def results_dir(out_root: str | Path, experiment: str, stamp: str | None = None) -> Path:
    """A new series' directory, created (with `out_root`) and never one that existed:
    `<out_root>/<UTC time>-<experiment>`, `<UTC time>.2-<experiment>` (then .3, ...) for a series
    started in the same second (the time has one-second resolution; the suffix keeps them in order
    and `*-<experiment>` finding them). Each try creates the directory exclusively, so two series
    started at once never share one. OSError when it cannot be created."""
    stamp = stamp or utc_stamp()
    Path(out_root).mkdir(parents=True, exist_ok=True)
    for n in range(1, 10000):
        path = Path(out_root) / f"{stamp}{'' if n == 1 else f'.{n}'}-{experiment}"
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"{out_root}: 9999 series named {stamp}-{experiment} already")


def run_dir_of(results: Path, variant: str, rep: int) -> Path:
    """A run's directory in its series: `<variant>/`, or `<variant>/rep<i>/` when repeated."""
    return results / variant / f"rep{rep}" if rep else results / variant


def set_label(overrides: list[str]) -> str:
    """A directory-safe name from `--set` overrides: the last part of each key with its value,
    e.g. ["dlcp.load_balancing=per_flow", "seed=2"] -> "load_balancing=per_flow,seed=2"."""
    parts = []
    for item in overrides:
        key, _, value = item.partition("=")
        parts.append(f"{key.strip().rsplit('.', 1)[-1]}={value.strip().strip(chr(34) + chr(39))}")
    return SET_LABEL_CHARS.sub("_", ",".join(parts)).strip("_")[:80]


def variant_names(varied: list[str] | None, policy: str, overrides: list[str], name: str | None) -> list[str]:
    """Run directory names: one per variant of --policies / --vary (`varied`: their names from
    config.variants, None when nothing is varied). A single run is named `--name`, else by the keys
    of --set, else by its policy (never "run"); variants keep their names, "<variant>+<name>" with
    `--name` (--set applies to all of them alike, and meta.json records it)."""
    if varied:
        return [f"{v}+{name}" if name else v for v in varied]
    return [name or set_label(overrides) or policy]


def check_name(name: str | None) -> None:
    """`--name`: one directory-safe word; ConfigError naming the option otherwise."""
    if name is not None and (not name or SET_LABEL_CHARS.search(name) or name.startswith(".")):
        raise ConfigError(f"--name {name!r}: use letters, digits and . _ = + , - only")


def run_label(variant: str, rep: int, seed: int) -> str:
    """How progress lines name a run: "fifo", or "fifo rep 2, seed 8"."""
    return f"{variant} rep {rep}, seed {seed}" if rep else variant
