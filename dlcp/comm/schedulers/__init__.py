"""Communication schedulers: each turns gradient-ready events and completions into collective
operations (base.py), and registers itself in its own module (`SCHEDULERS`, `register_scheduler`).
`make_scheduler(name, profile, cost, workers, **options)`."""

from __future__ import annotations

from dlcp.comm.schedulers.base import (
    FINAL_PRIMITIVES,
    SCHEDULERS,
    Op,
    Scheduler,
    SchedulerEntry,
    Segment,
    make_scheduler,
    register_scheduler,
)

__all__ = [
    "FINAL_PRIMITIVES",
    "SCHEDULERS",
    "Op",
    "Scheduler",
    "SchedulerEntry",
    "Segment",
    "make_scheduler",
    "register_scheduler",
]
