"""Communication schedulers: each turns gradient-ready events and completions into
collective operations (base.py). `make_scheduler(name, profile, cost, workers, **options)`."""

from __future__ import annotations

from dlcp.comm.schedulers.base import FINAL_PRIMITIVES, Op, Scheduler, Segment
from dlcp.comm.schedulers.bytescheduler import ByteScheduler
from dlcp.comm.schedulers.dear import DeAR
from dlcp.comm.schedulers.mgwfbp import MGWFBP
from dlcp.comm.schedulers.oasr import OASRWFBP
from dlcp.comm.schedulers.usbyte import USByte
from dlcp.comm.schedulers.wfbp import WFBP

SCHEDULERS = {cls.name: cls for cls in (WFBP, MGWFBP, OASRWFBP, ByteScheduler, USByte, DeAR)}


def make_scheduler(name: str, profile, cost, workers: int | None = None, **options) -> Scheduler:
    """A fresh scheduler `name` for `profile` (schedulers that decide ahead do it here, with `cost` and `workers`)."""
    try:
        cls = SCHEDULERS[name]
    except KeyError:
        raise ValueError(f"scheduler {name!r} is not one of {', '.join(SCHEDULERS)}") from None
    try:
        return cls(profile, cost, workers, **options)
    except TypeError as e:  # an option the scheduler does not have
        raise ValueError(f"scheduler {name!r}: {e}") from None


__all__ = [
    "FINAL_PRIMITIVES",
    "MGWFBP",
    "OASRWFBP",
    "SCHEDULERS",
    "WFBP",
    "ByteScheduler",
    "DeAR",
    "Op",
    "Scheduler",
    "Segment",
    "USByte",
    "make_scheduler",
]
