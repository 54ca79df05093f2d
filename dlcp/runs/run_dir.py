"""One run directory (docs/runs.md): its layout, what the runner writes into it before the backend
starts (config.toml, topology.json, runtime/), and meta.json, the same fields on every backend.

meta.json holds facts about the run a report needs without knowing the backend: `clock` (the
records' time base: "wall", or "simulated"), `deterministic` (a seed fixes the run), `dilation`
(how much slower than the system it ran), `payload`, `run_id` (the hash of its resolved config and
seed that a resumed series recognises it by, resume.py); then versions, git revision (`+dirty` when
tracked files differ from the commit), host, times, `status`, and each backend's own sections.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from dlcp.backends import Backend
from dlcp.experiment import config as configmod
from dlcp.network.switch_runtime import write_runtime
from dlcp.runs import naming
from dlcp.runs.contract import RunFailed
from dlcp.runs.resume import run_id

REPO = Path(__file__).resolve().parents[2]
SUBDIRS = ("runtime", "agents", "progress", "records", "counters", "logs")
PACKAGES = ("dlcp", "torch", "numpy")  # versions every meta.json records; a backend adds its tools


def new_results(run_dir: str | None, out_root: str, experiment: str) -> tuple[Path, list[Path]]:
    """A series' directory, created now and never one a run used: `run_dir` (--run-dir: new, or
    empty, as run_inputs checked) or a new `<out_root>/<UTC time>-<experiment>` (naming.py); and
    the directories this created (it and those above it), for `remove_unused` and the hand-over
    under sudo."""
    target = Path(run_dir) if run_dir else Path(out_root)
    created = [p for p in [target, *target.parents] if not p.exists()]
    if run_dir:
        target.mkdir(parents=True, exist_ok=True)
        return target, created
    path = naming.results_dir(out_root, experiment)
    return path, [path, *created]


def holds_runs(results: Path) -> bool:
    """Whether any run started in a series' directory (it, or a run directory in it, holds a
    meta.json)."""
    return any(
        next(results.glob(pattern), None) is not None for pattern in ("meta.json", "*/meta.json", "*/*/meta.json")
    )


def remove_unused(results: Path, created: list[Path]) -> bool:
    """After a series that started no run (stopped or failed first): remove what it created (its
    directory holds at most the fork server's log), so no half-made series is left for `dlcp
    compare results/*` to trip on. Whether it did."""
    if results not in created or holds_runs(results):
        return False
    shutil.rmtree(results, ignore_errors=True)
    for p in created[created.index(results) + 1 :]:  # the directories above, deepest first, left empty
        try:
            p.rmdir()
        except OSError:
            break
    return True


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
    dilation), topology.json and the switches' runtime files (what the backend runs).
    config.toml is created exclusively: it claims the directory, and a run directory another run
    claimed first (two series racing for one --run-dir) is refused (RunFailed), never mixed."""
    try:
        with open(run_dir / "config.toml", "x") as f:
            f.write(configmod.dumps(cfg))
    except FileExistsError:
        raise RunFailed(f"{run_dir} holds a run already (config.toml): run directories are never reused") from None
    write_json(run_dir / "topology.json", spec.to_json())
    for runtime in runtimes.values():
        write_runtime(runtime, run_dir / "runtime")


def counters_kept(run_dir: Path) -> str:
    """Which switches' counter dumps a run directory holds, against topology.json's switches, for
    the message of a run cut short: "counters of s2; none from s1"."""
    try:
        switches = [s["name"] for s in json.loads((run_dir / "topology.json").read_text())["switches"]]
    except (OSError, ValueError, KeyError, TypeError):
        return "its switches unknown (topology.json unreadable)"
    have = [s for s in switches if (run_dir / "counters" / f"{s}.json").exists()]
    missing = [s for s in switches if s not in have]
    text = f"counters of {', '.join(have)}" if have else "no switch counters"
    return text + (f"; none from {', '.join(missing)}" if have and missing else "")


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
        "policy": configmod.policy_of(cfg),
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
        "run_id": run_id(cfg),
        "dilation": dilation,
    }


def end_meta(meta: dict, status: str, started: float, error: str | None = None) -> None:
    """The run's end: UTC time, wall seconds since `started` (time.monotonic), `status` (ok,
    error, interrupted: Ctrl-C, terminated: SIGTERM) and, for an error, `error`: its first line."""
    meta.update(end_utc=datetime.now(timezone.utc).isoformat(), wall_s=round(time.monotonic() - started, 3))
    meta["status"] = status
    if error:
        meta["error"] = error.splitlines()[0]


def end_meta_for(run_dir: Path, error: str) -> None:
    """meta.json's end for a run whose own process died before it could write it (a forked run
    killed by a signal): status error, `error`, its wall time from start_utc."""
    path = run_dir / "meta.json"
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if meta.get("status") is not None:
        return
    now = datetime.now(timezone.utc)
    try:
        wall = (now - datetime.fromisoformat(meta["start_utc"])).total_seconds()
    except (KeyError, TypeError, ValueError):
        wall = None
    meta.update(end_utc=now.isoformat(), wall_s=None if wall is None else round(wall, 3), status="error")
    meta["error"] = error.splitlines()[0]
    write_json(path, meta)
