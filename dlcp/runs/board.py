"""Where a series on a cluster stands (docs/runs.md, "On a cluster"): runs done, running and
queued, per worker, as the workers' events (tasks.py) and the results arrive; and the final
table, one row per run: its status, the worker that ran it, how many times it started (a worker
that died mid-run has its run started again elsewhere), and what went wrong.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field

from dlcp.tables import format_table


@dataclass
class RunState:
    label: str
    state: str = "queued"  # queued, running, then the run's status (ok, error, ...), or "done before"
    workers: list[str] = field(default_factory=list)  # where it started, in order
    wall_s: float | None = None
    note: str = ""


class Board:
    """The runs of a series on a cluster; `line()` says where they stand."""

    def __init__(self, series: str, labels: list[str], done_before: set[int], stream=sys.stderr):
        """`labels`: every run of the series, in its order (a run is its position there);
        `done_before`: the positions of those a resumed series found finished."""
        self.series = series  # the token of this series' events (a scheduler may serve others)
        self.runs = [
            RunState(label, "done before", note="found finished (resumed)") if i in done_before else RunState(label)
            for i, label in enumerate(labels)
        ]
        self.stream = stream
        self._events: list[dict] = []
        self._lock = threading.Lock()
        self._last = ""

    def on_event(self, event) -> None:
        """A worker's event (`Client.subscribe_topic` handler, on the client's own thread)."""
        _, msg = event
        with self._lock:
            self._events.append(msg)

    def take_events(self) -> None:
        """Apply the events that arrived: runs started (again, after a worker was lost)."""
        with self._lock:
            events, self._events = self._events, []
        for msg in events:
            index = msg.get("index")
            if msg.get("series") != self.series or msg.get("event") != "start" or not isinstance(index, int):
                continue
            run = self.runs[index]
            if run.state == "running" and run.workers:  # started again: the worker it ran on is gone
                print(
                    f"dlcp run: [{run.label}] started again on worker {msg['name']}: worker {run.workers[-1]} "
                    "was lost while running it",
                    file=self.stream,
                )
            run.workers.append(str(msg["name"]))
            if run.state == "queued" or run.state == "running":
                run.state = "running"

    def finished(self, index: int, status: str, worker: str | None, wall_s: float | None, note: str = "") -> None:
        run = self.runs[index]
        run.state, run.wall_s, run.note = status, wall_s, note
        if worker and worker != "-" and not run.workers:  # its start event was lost with its worker
            run.workers.append(worker)

    def counts(self) -> dict[str, int]:
        out = {"done": 0, "running": 0, "queued": 0}
        for r in self.runs:
            out["running" if r.state == "running" else "queued" if r.state == "queued" else "done"] += 1
        return out

    def line(self) -> str:
        """e.g. "runs: 3 done, 2 running, 3 queued; worker 0: 2 done, running [dlcp rep 2, seed 2]"."""
        c = self.counts()
        per: dict[str, list[int | str]] = {}
        for r in self.runs:
            if not r.workers:
                continue
            w = per.setdefault(r.workers[-1], [0, ""])
            if r.state == "running":
                w[1] = f"running [{r.label}]"
            elif r.state not in ("queued", "done before"):
                w[0] = int(w[0]) + 1
        workers = "; ".join(
            f"worker {name}: {done} done" + (f", {running}" if running else "") for name, (done, running) in per.items()
        )
        return f"runs: {c['done']} done, {c['running']} running, {c['queued']} queued" + (
            f"; {workers}" if workers else ""
        )

    def show(self) -> None:
        """Print where the series stands when that changed."""
        self.take_events()
        text = self.line()
        if text != self._last:
            print(f"dlcp run: {text}", file=self.stream, flush=True)
            self._last = text

    def rows(self) -> list[dict]:
        return [
            {
                "run": r.label,
                "status": r.state,
                "worker": r.workers[-1] if r.workers else None,
                "starts": len(r.workers) or None,
                "wall_s": r.wall_s,
                "note": r.note or retried(r.workers),
            }
            for r in self.runs
        ]

    def table(self) -> str:
        return format_table(self.rows(), ["run", "status", "worker", "starts", "wall_s", "note"])


def retried(workers: list[str]) -> str:
    """The note of a run started more than once: the workers lost while running it."""
    if len(workers) < 2:
        return ""
    lost = workers[:-1]
    return f"retried: worker{'s' if len(lost) > 1 else ''} {', '.join(lost)} lost while running it"
