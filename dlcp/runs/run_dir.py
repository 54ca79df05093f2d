"""One run directory (docs/runs.md): its layout, what the runner writes into it before the backend
starts (config.toml, topology.json, runtime/), and meta.json, the same fields on every backend.

meta.json holds facts about the run a report needs without knowing the backend: `clock` (the
records' time base: "wall", or "simulated"), `deterministic` (a seed fixes the run), `dilation`
(how much slower than the system it ran), `payload`; then versions, git revision (`+dirty` when
tracked files differ from the commit), host, times, `status`, and each backend's own sections.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from dlcp.backends import Backend
from dlcp.experiment import config as configmod
from dlcp.network.switch_runtime import write_runtime

REPO = Path(__file__).resolve().parents[2]
SUBDIRS = ("runtime", "agents", "progress", "records", "counters", "logs")
PACKAGES = ("dlcp", "torch", "numpy")  # versions every meta.json records; a backend adds its tools


def create(path: Path) -> Path:
    for sub in SUBDIRS:
        (path / sub).mkdir(parents=True, exist_ok=True)
    return path


def write_json(path: Path, obj) -> None:
    """Replace `path` atomically (a reader sees the old or the new file, never half of one)."""
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


def write_inputs(run_dir: Path, cfg: dict, spec, runtimes: dict[str, dict]) -> None:
    """config.toml (the system as the user described it: overrides applied, before time
    dilation), topology.json and the switches' runtime files (what the backend runs)."""
    (run_dir / "config.toml").write_text(configmod.dumps(cfg))
    write_json(run_dir / "topology.json", spec.to_json())
    for runtime in runtimes.values():
        write_runtime(runtime, run_dir / "runtime")


def git_revision() -> str | None:
    """HEAD of the checkout the code runs from, "+dirty" when a tracked file differs; None
    outside a git checkout."""
    try:
        rev = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        ).stdout.strip()
        # --no-optional-locks: no index refresh, so git run as root (sudo) writes nothing into a
        # user's checkout
        dirty = subprocess.run(
            ["git", "--no-optional-locks", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (rev + ("+dirty" if dirty else "")) if rev else None


def package_version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def start_meta(
    cfg: dict,
    variant: str,
    backend: Backend,
    tools: dict[str, str | None],
    overrides: list[str],
    repeat: int,
    dilation: float,
) -> dict:
    """meta.json as a run starts. `tools`: the backend's own versions (Mininet, p4c and bmv2, ns-3);
    `repeat`: 0 = not repeated; `dilation`: how many times slower than the system it runs."""
    caps = backend.capabilities
    return {
        "name": cfg["name"],
        "variant": variant,
        "policy": cfg["dlcp"]["policy"],
        "system": cfg.get("system", ""),
        "backend": backend.name,
        "clock": caps.clock,
        "deterministic": caps.deterministic,
        "payload": cfg["workload"]["payload"],
        "versions": {**{p: package_version(p) for p in PACKAGES}, **tools},
        "python": platform.python_version(),
        "kernel": platform.release(),
        "hostname": platform.node(),
        "git_revision": git_revision(),
        "start_utc": datetime.now(timezone.utc).isoformat(),
        "overrides": list(overrides),
        "repeat": repeat,
        "seed": cfg["seed"],
        "dilation": dilation,
    }


def end_meta(meta: dict, status: str, started: float) -> None:
    """The run's end: UTC time, wall seconds since `started` (time.monotonic), and `status` (ok,
    error, interrupted: Ctrl-C, terminated: SIGTERM)."""
    meta.update(end_utc=datetime.now(timezone.utc).isoformat(), wall_s=round(time.monotonic() - started, 3))
    meta["status"] = status
