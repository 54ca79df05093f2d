"""What identifies a run, and which runs of a series are still to do (docs/runs.md, "Resuming").

A run is its resolved config, seed included: `run_id` hashes it, and meta.json records the hash.
Where a series' results go (`output.dir`) changes nothing a run does, so it is left out. A
series restarted into its own directory (`dlcp run ... --resume DIR`, or `dlcp sweep` into the
same --out) runs only what is missing there: a run whose directory holds a meta.json with this
run's id and status "ok" is done; one stopped, failed or never started runs (again). A directory
holding a run of another config is refused in one line naming the first key that differs, so a
resumed series never mixes two experiments.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from dlcp.experiment.config import tomllib
from dlcp.settings import ConfigError

# keys that say where a run's results go, not what it does
NOT_THE_RUN = (("output", "dir"),)


def identity(cfg: dict) -> dict:
    """The part of a resolved config that makes the run: all of it but NOT_THE_RUN."""
    out = json.loads(json.dumps(cfg, default=str))
    for section, key in NOT_THE_RUN:
        out.get(section, {}).pop(key, None)
    return out


def run_id(cfg: dict) -> str:
    """A run's identity: a hash of its resolved config and seed (meta.json `run_id`)."""
    text = json.dumps(identity(cfg), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def read_meta(run_dir: Path) -> dict | None:
    try:
        meta = json.loads((run_dir / "meta.json").read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def first_difference(a: object, b: object, prefix: str = "") -> str | None:
    """The first dotted key whose value differs between two configs, with both values."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            found = first_difference(a.get(k), b.get(k), f"{prefix}{k}.")
            if found:
                return found
        return None
    return None if a == b else f"{prefix.rstrip('.')} = {a!r} there, {b!r} here"


def what_differs(run_dir: Path, cfg: dict) -> str:
    """How the run in `run_dir` differs from `cfg` (from its config.toml), for the refusal."""
    try:
        there = tomllib.loads((run_dir / "config.toml").read_text())
    except (OSError, ValueError):
        return "its config.toml missing or unreadable"
    return first_difference(identity(there), identity(cfg)) or "a config that no longer hashes the same"


def state(run_dir: Path, cfg: dict, report: bool) -> str:
    """ "done" (this run, finished, with its report when the series writes them), "todo" (absent,
    stopped, failed, or stopped while writing its report), or ConfigError when the directory holds
    another run."""
    meta = read_meta(run_dir)
    if meta is None:  # never started, or killed before its meta.json: a run's inputs at most
        if run_dir.exists() and any(run_dir.iterdir()) and not (run_dir / "config.toml").exists():
            raise ConfigError(f"{run_dir}: holds something other than a run (no meta.json, no config.toml)")
        return "todo"
    if meta.get("run_id") != run_id(cfg):
        raise ConfigError(
            f"{run_dir}: holds another run ({what_differs(run_dir, cfg)}); run directories are never reused: "
            "a series or sweep started again there reruns only its own unfinished runs (give another --out)"
        )
    finished = meta.get("status") == "ok" and (not report or (run_dir / "report.html").exists())
    return "done" if finished else "todo"
