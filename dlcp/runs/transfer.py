"""A run directory on its way home from the worker that ran it (docs/runs.md, "On a cluster").

A run is written into a staging directory and appears at its place in the results only when
complete, by a rename: a reader (the comparison, a resumed series, `dlcp sweep --summary`) sees a
whole run or none, and a worker that dies mid-run leaves nothing at the run's place. Staging
directories live in `<results>/.staging/` (one filesystem with the results, so the rename is
atomic; hidden from the `*/meta.json` globs that find runs), or beside a series that is one run
(`--run-dir`: the run's place is the results directory itself). When the workers cannot write the
results directory (another machine), the run travels as a tar archive in the task's result and
is unpacked into staging on the submitting machine.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import uuid
from pathlib import Path

STAGING = ".staging"


def staging_root(results: Path, dest: Path) -> Path:
    """Where runs going to `dest` in `results` are staged: on the results' filesystem, outside
    `dest`."""
    return results.parent / f".{results.name}{STAGING}" if dest == results else results / STAGING


def staging_dir(results: Path, dest: Path) -> Path:
    """A new, empty directory to stage the run going to `dest` in."""
    name = "run" if dest == results else str(dest.relative_to(results)).replace("/", "_")
    path = staging_root(results, dest) / f"{name}-{uuid.uuid4().hex[:12]}"
    path.mkdir(parents=True)
    return path


def pack(run_dir: Path) -> bytes:
    """The run directory as a gzip'd tar (fast compression: CSV records shrink several times)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        tar.add(run_dir, arcname=".")
    return buf.getvalue()


def unpack(data: bytes, into: Path) -> None:
    """Unpack what `pack` made into the directory `into` (members outside it are refused)."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(into, filter="data")
        else:  # Python < 3.11.4: check the paths ourselves
            root = into.resolve()
            for m in tar.getmembers():
                if not (m.isfile() or m.isdir()) or not (into / m.name).resolve().is_relative_to(root):
                    raise ValueError(f"run archive: refused member {m.name!r}")
            tar.extractall(into)  # every member checked above


def install(staged: Path, dest: Path) -> None:
    """Put the complete run `staged` at `dest` by renames. An earlier, incomplete run at `dest`
    (stopped or failed: a resumed series reruns it) is moved out first and removed after; the
    place is never half-written."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    old = None
    if dest.exists():
        old = staged.parent / f"{staged.name}.replaced"
        os.rename(dest, old)
    os.rename(staged, dest)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def discard(run_dir: Path, results: Path) -> None:
    """Remove an unfinished run before it runs again, moved out of its place first (by a rename)."""
    root = staging_root(results, run_dir)
    root.mkdir(parents=True, exist_ok=True)
    gone = root / f"{run_dir.name}-discarded-{uuid.uuid4().hex[:12]}"
    os.rename(run_dir, gone)
    shutil.rmtree(gone, ignore_errors=True)


def remove_staging(results: Path) -> None:
    """The staging areas once a series is over (what a dead worker or a stop left in them)."""
    for root in (staging_root(results, results), staging_root(results, results / "run")):
        shutil.rmtree(root, ignore_errors=True)
