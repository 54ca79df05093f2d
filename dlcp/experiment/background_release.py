"""The runner's release of a run's background senders (docs/runs.md, `progress/background-go`).

Senders start with the other agents, set up, and wait here; the runner releases them once every
worker finished its first iteration. The file's content is the Unix time of the release.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

GO_FILE = "background-go"  # in <run_dir>/progress/
GO_POLL_S = 0.002


def wait_for_release(run_dir: str) -> float:
    """Block until the runner releases the background (progress/background-go exists); the Unix
    time it wrote there. Polled: signals stay free for stopping, and it lasts one iteration."""
    go = Path(run_dir) / "progress" / GO_FILE
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


def release_background(run_dir: Path, now_unix: float) -> None:
    """The runner's side: let every waiting background sender start (atomically, so a reader sees
    the whole timestamp or no file)."""
    progress = Path(run_dir) / "progress"
    tmp = progress / f".{GO_FILE}.tmp"
    tmp.write_text(repr(now_unix))
    os.replace(tmp, progress / GO_FILE)
