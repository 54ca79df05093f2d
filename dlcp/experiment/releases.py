"""The runner's releases of agents that wait for it (docs/runs.md, `progress/background-go` and
`progress/jobs-go`): a file in `<run_dir>/progress/` whose content is the Unix time of the release.

- `background-go`: background senders start with the other agents, set up, and wait; the runner
  releases them once every worker finished its first iteration.
- `jobs-go`: with several jobs ([[jobs]]), every worker connects, says so (progress state
  "connected"), and waits; the runner releases them together once all are connected, and each
  job's first iteration starts its `start_s` (arrival + time-shift) after the release. A common
  origin: without it a job's shift would be blurred by how long its own workers took to connect.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

BACKGROUND_GO = "background-go"
JOBS_GO = "jobs-go"
GO_POLL_S = 0.002


def wait_for_release(run_dir: str, name: str) -> float:
    """Block until the runner writes release `name` (progress/<name>); the Unix time it wrote
    there. Polled: signals stay free for stopping, and it lasts one iteration at most."""
    go = Path(run_dir) / "progress" / name
    while True:
        try:
            text = go.read_text().strip()
        except FileNotFoundError:
            time.sleep(GO_POLL_S)
            continue
        try:
            return float(text)
        except ValueError:  # caught mid-write: the runner writes it atomically, so only by hand
            time.sleep(GO_POLL_S)


def release(run_dir: Path, name: str, now_unix: float) -> None:
    """The runner's side: let every agent waiting for `name` go (atomically, so a reader sees the
    whole timestamp or no file)."""
    progress = Path(run_dir) / "progress"
    tmp = progress / f".{name}.tmp"
    tmp.write_text(repr(now_unix))
    os.replace(tmp, progress / name)
