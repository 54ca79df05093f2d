"""CPU time and run-queue wait of one OS thread, from Linux's schedstat: whether a transport thread
that fell behind lacked a CPU (it was runnable, waiting on the run queue) or had one and used it
(its own work, or waiting for the interpreter lock, which counts as neither). And the real-time
scheduling a thread may ask for."""

from __future__ import annotations

import logging
import os
import threading


def set_realtime(priority: int, what: str, tid: int = 0) -> bool:
    """Put thread `tid` (0: the calling one; threads it starts later inherit it) under SCHED_RR at
    `priority`. False, with a log line naming `what`, when the system refuses (not root)."""
    try:
        os.sched_setscheduler(tid, os.SCHED_RR, os.sched_param(priority))
    except (OSError, AttributeError) as e:
        logging.getLogger("dlcp.transport").info("%s stays at normal priority: %s", what, e)
        return False
    return True


def thread_times(tid: int | None = None) -> dict | None:
    """cpu_s, runqueue_s and runs (times it was put on a CPU) of thread `tid` of this process (the
    calling thread when None); None where /proc has no schedstat (not Linux, thread gone)."""
    path = "/proc/thread-self/schedstat" if tid is None else f"/proc/self/task/{tid}/schedstat"
    try:
        with open(path) as f:
            run_ns, wait_ns, runs = (int(x) for x in f.read().split()[:3])
    except (OSError, ValueError):
        return None
    return {"cpu_s": round(run_ns / 1e9, 4), "runqueue_s": round(wait_ns / 1e9, 4), "runs": runs}


class ThreadClock:
    """The times of a few named threads: live while they run, their last reading after they end
    (each calls `started` first and `ending` last, from the thread itself)."""

    def __init__(self):
        self._tids: dict[str, int] = {}
        self._final: dict[str, dict | None] = {}

    def started(self, name: str) -> None:
        self._tids[name] = threading.get_native_id()

    def ending(self, name: str) -> None:
        self._final[name] = thread_times()

    def times(self) -> dict:
        out = {}
        for name, tid in list(self._tids.items()):
            t = self._final[name] if name in self._final else thread_times(tid)
            if t is not None:
                out[name] = t
        return out
