"""Where a run is, on the terminal: its phase (network, switches, agents, first iteration,
stopping, report) and then the iterations of every worker; and what the agents' progress files
(docs/runs.md, "Progress") say.

On a terminal a live rich progress bar; elsewhere (logs, CI) a line per phase and a progress line
every 5 s.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from dlcp.experiment.config import tomllib


def read_progress(run_dir: Path, host: str) -> dict:
    """The last state `progress/<host>` holds, {} while there is none."""
    try:
        return json.loads((run_dir / "progress" / host).read_text())
    except (OSError, ValueError):
        return {}


def iterations_done(run_dir: Path) -> str:
    """ "k of n iterations" from the agents' progress files (the slowest agent)."""
    done, total = [], None
    for path in sorted((run_dir / "progress").glob("*")):
        try:
            state = json.loads(path.read_text().strip().splitlines()[-1])
        except (OSError, ValueError, IndexError):
            continue
        if isinstance(state, dict) and "iter" in state:
            done.append(int(state["iter"]))
            total = state.get("iters", total)
    if not done:
        return simulated_iterations_done(run_dir) or "no iteration finished"
    return f"{min(done)} of {total if total is not None else '?'} iterations"


def simulated_iterations_done(run_dir: Path) -> str | None:
    """A simulated run has no agents' progress files: meta.json's `simulation` says how far the
    slowest worker got (of config.toml's iterations); None without it."""
    try:
        done = json.loads((run_dir / "meta.json").read_text())["simulation"]["iterations_done"]
        total = tomllib.loads((run_dir / "config.toml").read_text())["workload"]["iterations"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return None if not done else f"{done} of {total} iterations"


NAMED_WORKERS_MAX = 8  # beyond this, a progress line gives the range over the workers, not each


def worker_counts(done: dict[str, int]) -> str:
    """Iterations per worker: each named ("h1:3 h2:4") for a few workers, the range for many (a
    128-worker simulation's line stays one line)."""
    if len(done) <= NAMED_WORKERS_MAX:
        return " ".join(f"{h}:{n}" for h, n in done.items())
    low, high = min(done.values()), max(done.values())
    return f"{len(done)} workers at {low}" + (f"-{high}" if high != low else "")


def progress_line(done: dict[str, int], iters: int, elapsed: float, width: int = 30) -> str:
    """The plain-text progress line (logs, CI): bar, iterations overall and per worker, time."""
    total = iters * max(len(done), 1)
    frac = sum(done.values()) / total if total else 1.0
    bar = "#" * int(frac * width) + "." * (width - int(frac * width))
    return f"[{bar}] {sum(done.values())}/{total} iterations  {worker_counts(done)}  {elapsed:5.1f}s"


class Progress:
    """Where a run is: its phase, then the iterations of every worker."""

    LINE_PERIOD_S = 5.0

    def __init__(self, stream=sys.stderr):
        self.stream, self.tty = stream, stream.isatty()
        self.bar = None  # rich.progress.Progress while shown
        self.task = None
        self.last_phase, self.last_time = "", 0.0
        self.t0 = time.monotonic()

    def _live(self):
        if self.bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bar

            self.bar = Bar(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[detail]}"),
                TimeElapsedColumn(),
                console=Console(file=self.stream),
                transient=False,
            )
            self.bar.start()
            self.task = self.bar.add_task("", total=None, detail="")
        return self.bar

    def phase(self, text: str) -> None:
        """A step without an iteration count yet (e.g. "starting the switches")."""
        if self.tty:
            self._live().update(self.task, description=text, total=None, completed=0, detail="")
        elif text != self.last_phase:
            print(f"dlcp run: {text} ({time.monotonic() - self.t0:.1f} s)", file=self.stream, flush=True)
        self.last_phase = text

    def iterations(self, done: dict[str, int], per_worker: int, started: float) -> None:
        """Training: iterations finished per worker, out of `per_worker` each."""
        total = per_worker * max(len(done), 1)
        if self.tty:
            self._live().update(
                self.task,
                description="training",
                total=total,
                completed=sum(done.values()),
                detail=worker_counts(done),
            )
            return
        now = time.monotonic()
        if now - self.last_time >= self.LINE_PERIOD_S:
            print(progress_line(done, per_worker, now - started), file=self.stream, flush=True)
            self.last_time = now
        self.last_phase = "training"

    def done(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
        self.last_phase = ""
